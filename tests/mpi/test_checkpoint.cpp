// Checkpoints under mpirun (docs/checkpoints.md):
//   - gathered and parallel writes store the same tensors, digests and attributes;
//   - the atomic commit: final names only after completion, `latest`, keep_last, stale .tmp removal;
//   - resume = latest skips a corrupt (digest mismatch), truncated or unmarked checkpoint and uses the
//     previous complete one; nothing usable and a different training setup are ConfigErrors;
//   - stopping after step 3 and resuming continues bit-identically (losses, weights, AdamW state) at the
//     same world size and strategy, with LoRA dropout on, for every strategy and for full fine-tuning;
//   - a checkpoint written by fsdp on W ranks resumes with single on 1 rank (grad_accum x W) and ddp on W
//     ranks with another micro-batch split, and one written by single resumes with fsdp on W ranks:
//     losses within 1e-6 relative of the uninterrupted run.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/config/options.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/data/batch.hpp"
#include "lorabench/io/checkpoint.hpp"
#include "lorabench/io/h5.hpp"
#include "lorabench/comm/mesh.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/train/checkpoint.hpp"
#include "lorabench/train/step_runner.hpp"
#include "mpi_test_util.hpp"
#include "state_compare.hpp"

using namespace lorabench;
namespace fs = std::filesystem;
using lbtest::norm_rel;
using lbtest::rel;
using lbtest::world_rank;
using lbtest::world_size;

namespace {

constexpr int kSteps = 6;


// Where the tests write: one directory per job (rank 0's pid), removed at the end.
fs::path base_dir() {
  static const fs::path base = [] {
    long long pid = ::getpid();
    MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    return fs::temp_directory_path() / ("lorabench_ckpt_" + std::to_string(pid));
  }();
  return base;
}

class CleanUp : public ::testing::Environment {
 public:
  void SetUp() override { base_dir(); }  // collective: every rank learns rank 0's pid here
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(base_dir());
  }
};
const auto* const kCleanUp = ::testing::AddGlobalTestEnvironment(new CleanUp);

// A directory shared by every rank, created fresh; `local` = one per rank.
std::string shared_dir(const std::string& name, bool local = false) {
  fs::path d = base_dir() / name;
  if (local) d /= "rank" + std::to_string(world_rank());
  if (local || world_rank() == 0) {
    fs::remove_all(d);
    fs::create_directories(d);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return d.string();
}

struct Job {
  std::string strategy = "ddp";
  MPI_Comm comm = MPI_COMM_WORLD;  // MPI_COMM_SELF: a one-rank job inside every rank
  int micro_batch = 2;
  int accum = 1;
  bool lora = true;
  double dropout = 0.1;
  int world() const {
    int n = 0;
    MPI_Comm_size(comm, &n);
    return n;
  }
};

RunConfig config_of(const Job& j, int64_t last_step, int every) {
  RunConfig c = default_run_config();
  c.run.name = "test";
  c.run.seed = 17;
  c.run.steps = int(last_step);
  c.run.warmup_steps = 0;
  c.model.preset = "tiny";
  c.model.dtype = "fp32";
  c.lora.enabled = j.lora;
  c.lora.r = 4;
  c.lora.alpha = 8;
  c.lora.dropout = j.dropout;
  c.data.format = "synthetic";
  c.data.seq_len = 16;
  c.train.micro_batch = j.micro_batch;
  c.train.grad_accum = j.accum;
  c.parallel.strategy = j.strategy;
  c.checkpoint.every = every;
  c.checkpoint.keep_last = 0;
  return c;
}

struct Trajectory {
  std::vector<double> loss;  // of the steps run
  strategy::FullState state;
};

// Runs steps [resume step or 0, last_step) of `j`; `every` > 0 writes checkpoints into run_dir/checkpoints.
Trajectory run_job(const Job& j, int64_t last_step, const std::string& run_dir, const std::string& resume, int every) {
  const RunConfig cfg = config_of(j, last_step, every);
  model::ModelShape shape = model::preset_shape("tiny");
  shape.vocab_size = 1000;
  model::LoraSpec lora = model::make_lora_spec(j.lora, 4, 8, j.dropout, false, {"q", "k", "v", "o", "gate", "up", "down"});
  model::ModelLayout layout = model::build_layout(shape, lora);
  std::unique_ptr<comm::Communicator> comm;
  if (j.strategy != "single") comm = comm::make_mpi_communicator(j.comm);
  comm::MeshComms mesh;  // hsdp: two replica groups of consecutive ranks (one on an odd world)
  strategy::MeshGroups groups;
  if (j.strategy == "hsdp") {
    mesh = comm::split_mesh(*comm, comm::consecutive_mesh(j.world(), j.world() % 2 == 0 ? 2 : 1));
    groups = {mesh.shard.get(), mesh.replicate.get()};
  }
  strategy::StrategySpec spec;
  spec.name = j.strategy;
  spec.bucket_mb = 0.02;
  spec.grad_accum = j.accum;
  spec.sync_every_micro = j.strategy == "zero2" || j.strategy == "fsdp" || j.strategy == "hsdp";
  auto s = strategy::TrainingStrategy::create(spec, layout, at::kFloat, comm.get(), nullptr, groups);
  strategy::InitSource src;
  src.seed = cfg.run.seed;
  s->initialize(src);
  if (j.lora) {  // non-zero B so every adapter moves from the first step
    strategy::FullState st = s->gather_state();
    for (auto& p : st.params)
      if (p.defined()) p.add_(at::sin(at::arange(p.numel()).to(at::kFloat)).mul_(0.05));
    s->load_state(st);
  }
  data::SyntheticSpec ds;
  ds.seed = cfg.run.seed;
  ds.vocab_size = 1000;
  ds.geo.seq_len = 16;
  ds.geo.micro_batch = j.micro_batch;
  ds.geo.grad_accum = j.accum;
  ds.geo.world_size = j.world();
  auto source = data::make_synthetic_source(ds);
  train::StepConfig sc;
  sc.grad_accum = j.accum;
  sc.seed = cfg.run.seed;
  sc.lora_dropout = j.lora && j.dropout > 0;
  sc.max_grad_norm = 0.5;
  sc.adamw.weight_decay = 0.1;
  sc.schedule.kind = "cosine";
  sc.schedule.lr = 5e-3;
  sc.schedule.warmup_steps = 2;
  sc.schedule.total_steps = kSteps;
  sc.options.head_chunk = 300;
  train::StepRunner runner(layout, *s, *source, sc, j.comm);
  train::Checkpointer ckpt(cfg, layout, *source, j.comm, run_dir, nullptr);
  Trajectory t;
  for (int64_t step = ckpt.resume(*s, resume); step < last_step; ++step) {
    train::StepResult r = runner.run(step);
    EXPECT_FALSE(r.nonfinite);
    t.loss.push_back(r.loss);
    ckpt.after_step(*s, step + 1, r.tokens);
  }
  t.state = s->gather_state();
  return t;
}

bool bitwise_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined()) return false;
    if (a[i].defined() && !at::equal(a[i], b[i])) return false;
  }
  return true;
}

std::string ckpt_path(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / io::checkpoint_file_name(step)).string();
}

// ---- file format ---------------------------------------------------------------------------------

TEST(CheckpointIo, GatheredAndParallelWritesAgree) {
  const std::string dir = shared_dir("modes");
  const int rank = world_rank(), world = world_size();
  // Rows that do not split evenly, a 1-d tensor and a tensor with fewer rows than ranks.
  const std::vector<std::vector<int64_t>> shapes = {{7, 5}, {13}, {1, 9}, {3, 2, 4}};
  std::vector<std::vector<float>> data;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) v[size_t(k)] = std::sin(float(k + 1) * float(i + 1));
    data.push_back(v);
  }
  const std::vector<io::AttrGroup> groups = {{"state", {{"step", int64_t(3)}, {"tokens_seen", int64_t(99)}}},
                                             {"fingerprint", {{"model.dtype", std::string("fp32")}}},
                                             {"schedule", {{"lr", 1e-3}}}};
  for (auto mode : {io::CheckpointWriteMode::kGathered, io::CheckpointWriteMode::kParallel}) {
    std::vector<io::TensorPiece> pieces;
    for (size_t i = 0; i < shapes.size(); ++i) {
      io::TensorPiece p;
      p.path = "trainable/t" + std::to_string(i);
      p.shape = shapes[i];
      const int64_t rows = shapes[i][0], per_row = int64_t(data[i].size()) / rows;
      std::tie(p.row_begin, p.row_end) =
          mode == io::CheckpointWriteMode::kGathered ? std::make_pair(int64_t(0), rows) : io::even_rows(rows, rank, world);
      p.data = data[i].data() + p.row_begin * per_row;
      pieces.push_back(p);
    }
    io::write_checkpoint_file(dir + "/" + io::write_mode_name(mode) + ".h5", MPI_COMM_WORLD, mode, 3, groups, pieces,
                              std::vector<int64_t>(size_t(world), 17));
  }
  io::CheckpointContents g = io::read_checkpoint(dir + "/gathered.h5"), p = io::read_checkpoint(dir + "/parallel.h5");
  ASSERT_EQ(g.tensors.size(), shapes.size());
  ASSERT_EQ(p.tensors.size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(g.tensors[i].shape, shapes[i]);
    EXPECT_EQ(p.tensors[i].shape, shapes[i]);
    EXPECT_EQ(g.tensors[i].data, data[i]);
    EXPECT_EQ(p.tensors[i].data, data[i]);
    EXPECT_EQ(g.tensors[i].digest, p.tensors[i].digest) << "digests must not depend on the write split";
    EXPECT_EQ(g.tensors[i].digest, io::tensor_digest(data[i].data(), int64_t(data[i].size())));
  }
  EXPECT_EQ(g.step, 3);
  EXPECT_EQ(p.rank_seeds, std::vector<int64_t>(size_t(world), 17));
  ASSERT_NE(p.group("state"), nullptr);
  EXPECT_EQ(io::attr_text(*io::find_attr(p.group("state")->attrs, "tokens_seen")), "99");
  EXPECT_EQ(io::attr_text(*io::find_attr(p.group("schedule")->attrs, "lr")), "0.001");
}

TEST(CheckpointIo, AtomicCommitLatestAndKeepLast) {
  const std::string dir = shared_dir("commit");
  const int rank = world_rank();
  std::vector<float> v(12, 1.5f);
  if (rank == 0) std::ofstream(dir + "/step_00000009.h5.tmp") << "partial";  // an interrupted write's leftover
  MPI_Barrier(MPI_COMM_WORLD);
  for (int64_t step = 1; step <= 5; ++step) {
    v[0] = float(step);
    io::TensorPiece p{"trainable/w", {3, 4}, 0, 3, v.data()};
    io::CheckpointWriteResult r =
        io::save_checkpoint(dir, step, MPI_COMM_WORLD, io::CheckpointWriteMode::kGathered,
                            {{"state", {{"step", step}}}}, {p}, {0}, /*keep_last=*/2);
    EXPECT_EQ(r.path, dir + "/" + io::checkpoint_file_name(step));
    EXPECT_EQ(r.bytes, 48);
    // After every save: the new file is complete under its final name and `latest` names it.
    EXPECT_TRUE(io::probe_checkpoint(r.path).complete);
    EXPECT_EQ(io::read_latest_pointer(dir), io::checkpoint_file_name(step));
    EXPECT_FALSE(fs::exists(r.path + ".tmp"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<std::string> names;
  for (const auto& p : io::list_checkpoints(dir)) names.push_back(fs::path(p).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"step_00000005.h5", "step_00000004.h5"}));
  EXPECT_FALSE(fs::exists(dir + "/step_00000009.h5.tmp")) << "stale temporary files are removed";
  EXPECT_FALSE(fs::exists(dir + "/latest.tmp"));
  io::CheckpointContents c = io::read_checkpoint(dir + "/step_00000005.h5");
  EXPECT_EQ(c.tensors.at(0).data[0], 5.0f);
}

// Issue 49, item 3: single-byte changes in a checkpoint's HDF5 metadata made `checkpoint info|verify` and
// resume segfault, or abort and hang, inside libhdf5. The seal is checked before libhdf5 opens the file:
// every byte of the first 4 KiB (the seal, the superblock, the root group's and the first objects'
// headers) and every 61st byte after, flipped alone, is reported as damage by the probe and by the reader.
TEST(CheckpointIo, DamagedBytesAnywhereAreReportedBeforeLibhdf5Reads) {
  const std::string dir = shared_dir("damage");
  std::vector<float> v(24, 0.25f);
  io::TensorPiece p{"trainable/w", {4, 6}, 0, 4, v.data()};
  const io::CheckpointWriteResult w = io::save_checkpoint(dir, 1, MPI_COMM_WORLD, io::CheckpointWriteMode::kGathered,
                                                          {{"state", {{"step", int64_t(1)}}}}, {p}, {0}, 0);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    auto slurp = [](const std::string& f) {
      std::ifstream in(f, std::ios::binary);
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    };
    auto put = [](const std::string& f, const std::string& bytes) {
      std::ofstream(f, std::ios::binary | std::ios::trunc) << bytes;
    };
    const std::string good = slurp(w.path);
    ASSERT_GT(good.size(), 4096u);
    EXPECT_EQ(good.rfind("lorabench checkpoint seal 1\nsize " + std::to_string(good.size()) + "\nhash ", 0), 0u);
    const io::CheckpointProbe ok = io::probe_checkpoint(w.path);
    EXPECT_TRUE(ok.complete && ok.sealed) << ok.problem;
    EXPECT_EQ(io::read_checkpoint(w.path).seal_hash, ok.seal_hash);
    size_t tried = 0;
    for (size_t off = 0; off < good.size(); off += off < 4096 ? 1 : 61) {
      std::string bad = good;
      bad[off] = char(bad[off] ^ 0x5a);
      put(w.path, bad);
      ++tried;
      const io::CheckpointProbe probe = io::probe_checkpoint(w.path);
      ASSERT_FALSE(probe.complete) << "byte " << off << " changed and the probe accepted the file";
      ASSERT_EQ(probe.problem.rfind("damaged: ", 0), 0u) << "byte " << off << ": " << probe.problem;
      try {
        io::read_checkpoint(w.path);
        ADD_FAILURE() << "byte " << off << " changed and the reader read the file";
      } catch (const IoError& e) {
        ASSERT_NE(std::string(e.what()).find(w.path + ": damaged: "), std::string::npos) << e.what();
      }
    }
    EXPECT_GT(tried, 4096u);
    // Cut short, grown, and the seal itself changed in its text or its padding.
    put(w.path, good.substr(0, good.size() - 1));
    EXPECT_NE(io::probe_checkpoint(w.path).problem.find("(truncated)"), std::string::npos);
    put(w.path, good + "x");
    EXPECT_NE(io::probe_checkpoint(w.path).problem.find("(bytes appended)"), std::string::npos);
    std::string padding = good;
    padding[500] = 'x';
    put(w.path, padding);
    EXPECT_NE(io::probe_checkpoint(w.path).problem.find("first 512 bytes) is not as written"), std::string::npos);
    put(w.path, std::string(600, 'z'));
    EXPECT_NE(io::probe_checkpoint(w.path).problem.find("no checkpoint seal and no HDF5 signature"), std::string::npos);
    // Sealed again after a change through libhdf5, the file is whole to the seal: the reader's own checks
    // (here: the complete marker) still apply behind it.
    put(w.path, good);
    {
      h5::Handle f = h5::open_rw(w.path);
      H5Adelete(f, io::kCkptAttrComplete);
    }
    // (libhdf5 may also change the file's size: then the seal's size tells first)
    EXPECT_EQ(io::probe_checkpoint(w.path).problem.rfind("damaged: ", 0), 0u) << io::probe_checkpoint(w.path).problem;
    io::seal_checkpoint_file(w.path);
    EXPECT_EQ(io::probe_checkpoint(w.path).problem, "no complete marker (the write did not finish)");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// ---- resume selection ------------------------------------------------------------------------------

// Offset in the file of a contiguous dataset's first byte.
haddr_t dataset_offset(const std::string& file, const std::string& dset) {
  h5::Handle f = h5::open_read(file);
  h5::Handle d(H5Dopen2(f, dset.c_str(), H5P_DEFAULT));
  return H5Dget_offset(d);
}

TEST(CheckpointResume, LatestSkipsCorruptAndIncompleteFiles) {
  const std::string run = shared_dir("select");
  Job j;
  run_job(j, 4, run, "", 2);  // checkpoints of steps 2 and 4
  RunConfig cfg = config_of(j, kSteps, 2);
  cfg.checkpoint.resume = "latest";
  const int world = world_size();
  train::ResumePoint rp = train::select_resume_checkpoint(cfg, run, world, MPI_COMM_WORLD);
  EXPECT_EQ(rp.path, ckpt_path(run, 4));
  EXPECT_EQ(rp.step, 4);

  // A flipped byte inside a tensor of step 4: its digest no longer matches; step 2 is used.
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    const std::string f = ckpt_path(run, 4);
    haddr_t off = dataset_offset(f, "trainable/base_model.model.model.layers.1.mlp.up_proj.lora_B.weight");
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(std::streamoff(off + 8));
    char b = 0;
    io.read(&b, 1);
    b ^= 0x10;
    io.seekp(std::streamoff(off + 8));
    io.write(&b, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  try {
    io::read_checkpoint(ckpt_path(run, 4));
    ADD_FAILURE() << "a corrupt tensor was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("damaged: the file's hash"), std::string::npos) << e.what();
  }
  rp = train::select_resume_checkpoint(cfg, run, world, MPI_COMM_WORLD);
  EXPECT_EQ(rp.path, ckpt_path(run, 2));
  // The same file sealed again (its seal now agrees with the changed byte): the tensor's digest finds it.
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) io::seal_checkpoint_file(ckpt_path(run, 4));
  MPI_Barrier(MPI_COMM_WORLD);
  try {
    io::read_checkpoint(ckpt_path(run, 4));
    ADD_FAILURE() << "a corrupt tensor was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("up_proj.lora_B.weight: digest"), std::string::npos) << e.what();
  }
  EXPECT_EQ(train::select_resume_checkpoint(cfg, run, world, MPI_COMM_WORLD).path, ckpt_path(run, 2));

  // A resumed run continues from there and writes step 4 again (replacing the corrupt file).
  Job again = j;
  run_job(again, 4, run, rp.path, 2);
  EXPECT_TRUE(io::probe_checkpoint(ckpt_path(run, 4)).complete);
  EXPECT_NO_THROW(io::read_checkpoint(ckpt_path(run, 4)));

  // Step 4 truncated, step 2 without its complete marker: nothing usable, and the error lists both.
  MPI_Barrier(MPI_COMM_WORLD);  // every rank has finished reading them
  if (world_rank() == 0) {
    fs::resize_file(ckpt_path(run, 4), fs::file_size(ckpt_path(run, 4)) / 2);
    {
      h5::Handle f = h5::open_rw(ckpt_path(run, 2));
      H5Adelete(f, io::kCkptAttrComplete);
    }
    io::seal_checkpoint_file(ckpt_path(run, 2));  // whole to the seal, so that the marker is what is missing
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(io::probe_checkpoint(ckpt_path(run, 2)).complete);
  EXPECT_NE(io::probe_checkpoint(ckpt_path(run, 2)).problem.find("no complete marker"), std::string::npos);
  try {
    train::select_resume_checkpoint(cfg, run, world, MPI_COMM_WORLD);
    ADD_FAILURE() << "resume = latest found a checkpoint among broken ones";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no complete checkpoint"), std::string::npos) << m;
    EXPECT_NE(m.find("step_00000004.h5: damaged: "), std::string::npos) << m;
    EXPECT_NE(m.find("(truncated)"), std::string::npos) << m;
    EXPECT_NE(m.find("step_00000002.h5: no complete marker"), std::string::npos) << m;
  }
  // An explicit path to a broken file is an error, not a fallback.
  cfg.checkpoint.resume = ckpt_path(run, 2);
  EXPECT_THROW(train::select_resume_checkpoint(cfg, run, world, MPI_COMM_WORLD), ConfigError);
  // An empty run directory.
  cfg.checkpoint.resume = "latest";
  EXPECT_THROW(train::select_resume_checkpoint(cfg, shared_dir("empty"), world, MPI_COMM_WORLD), ConfigError);
}

TEST(CheckpointResume, DifferentTrainingIsRefusedListingEveryField) {
  const std::string run = shared_dir("refuse");
  Job j;
  run_job(j, 2, run, "", 2);
  RunConfig cfg = config_of(j, kSteps, 2);
  cfg.checkpoint.resume = "latest";
  cfg.lora.r = 8;
  cfg.lora.targets = {"q", "v"};
  cfg.data.seq_len = 32;
  cfg.model.dtype = "bf16";
  cfg.model.preset = "small";
  cfg.train.micro_batch = 1;  // global batch 1 x 1 x W instead of 2 x 1 x W
  cfg.run.seed = 18;
  try {
    train::select_resume_checkpoint(cfg, run, world_size(), MPI_COMM_WORLD);
    ADD_FAILURE() << "a different training was resumed";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    for (const char* field : {"lora.r: checkpoint 4, configuration 8", "lora.targets:", "data.seq_len: checkpoint 16",
                              "model.dtype: checkpoint fp32, configuration bf16", "model.source:", "model.shape:",
                              "model.base_weights:", "train.global_batch:", "run.seed: checkpoint 17, configuration 18"})
      EXPECT_NE(m.find(field), std::string::npos) << field << " not in: " << m;
    EXPECT_NE(m.find("9 fields differ"), std::string::npos) << m;
  }
  // The world size alone may change when the global batch stays: 2 x 1 x W == 1 x 2 x W.
  cfg = config_of(j, kSteps, 2);
  cfg.checkpoint.resume = "latest";
  cfg.train.micro_batch = 1;
  cfg.train.grad_accum = 2;
  EXPECT_EQ(train::select_resume_checkpoint(cfg, run, world_size(), MPI_COMM_WORLD).step, 2);
  // Nothing left to run.
  cfg.run.steps = 2;
  EXPECT_THROW(train::select_resume_checkpoint(cfg, run, world_size(), MPI_COMM_WORLD), ConfigError);
}

// ---- exact resume -----------------------------------------------------------------------------------

struct ExactCase {
  std::string strategy;
  bool lora;
  int accum;
};

void PrintTo(const ExactCase& c, std::ostream* os) { *os << c.strategy << (c.lora ? " lora" : " full") << " accum " << c.accum; }

class ExactResume : public ::testing::TestWithParam<ExactCase> {};

TEST_P(ExactResume, ContinuesBitIdentically) {
  const ExactCase& c = GetParam();
  Job j;
  j.strategy = c.strategy;
  j.lora = c.lora;
  j.accum = c.accum;
  const std::string ref_dir = shared_dir("exact_ref"), run = shared_dir("exact_run");
  Trajectory ref = run_job(j, kSteps, ref_dir, "", 0);
  Trajectory first = run_job(j, 3, run, "", 3);  // stops after step 3 with a checkpoint
  Trajectory rest = run_job(j, kSteps, run, ckpt_path(run, 3), 0);
  ASSERT_EQ(first.loss.size(), 3u);
  ASSERT_EQ(rest.loss.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(first.loss[i], ref.loss[i]) << "step " << i;
    EXPECT_EQ(rest.loss[i], ref.loss[3 + i]) << "step " << 3 + i << " after resume";
  }
  EXPECT_TRUE(bitwise_equal(rest.state.params, ref.state.params)) << "weights";
  EXPECT_TRUE(bitwise_equal(rest.state.exp_avg, ref.state.exp_avg)) << "AdamW m";
  EXPECT_TRUE(bitwise_equal(rest.state.exp_avg_sq, ref.state.exp_avg_sq)) << "AdamW v";
  EXPECT_EQ(rest.state.step, ref.state.step);
  // What the checkpoint records besides the tensors.
  io::CheckpointContents ck = io::read_checkpoint(ckpt_path(run, 3), false);
  const int64_t G = int64_t(j.micro_batch) * j.accum * j.world();
  EXPECT_EQ(io::attr_text(*io::find_attr(ck.group("state")->attrs, "step")), "3");
  EXPECT_EQ(io::attr_text(*io::find_attr(ck.group("optimizer")->attrs, "step")), "3");
  EXPECT_EQ(io::attr_text(*io::find_attr(ck.group("data")->attrs, "next_sample")), std::to_string(3 * G));
  EXPECT_EQ(io::attr_text(*io::find_attr(ck.group("state")->attrs, "tokens_seen")), std::to_string(3 * G * 16));
  EXPECT_EQ(io::attr_text(*io::find_attr(ck.group("rng")->attrs, "kind")), "counter-based");
  EXPECT_EQ(ck.rank_seeds, std::vector<int64_t>(size_t(j.world()), 17));
}

INSTANTIATE_TEST_SUITE_P(Strategies, ExactResume,
                         ::testing::Values(ExactCase{"ddp", true, 1}, ExactCase{"zero1", true, 2},
                                           ExactCase{"zero2", true, 1}, ExactCase{"fsdp", true, 2},
                                           ExactCase{"fsdp", false, 1}, ExactCase{"ddp", false, 1},
                                           ExactCase{"hsdp", true, 2}),
                         [](const ::testing::TestParamInfo<ExactCase>& i) {
                           return i.param.strategy + (i.param.lora ? "_lora" : "_full") + "_accum" +
                                  std::to_string(i.param.accum);
                         });

// ---- resharding -------------------------------------------------------------------------------------

void expect_close_continuation(const Trajectory& got, const Trajectory& ref, const std::string& what) {
  ASSERT_EQ(got.loss.size(), 3u) << what;
  for (int i = 0; i < 3; ++i)
    EXPECT_LE(rel(got.loss[i], ref.loss[3 + i]), 1e-6)
        << what << ": step " << 3 + i << ": " << got.loss[i] << " vs " << ref.loss[3 + i];
  EXPECT_LE(norm_rel(got.state.params, ref.state.params), 1e-5) << what << ": weights";
  EXPECT_LE(norm_rel(got.state.exp_avg, ref.state.exp_avg), 1e-5) << what << ": AdamW m";
  EXPECT_EQ(got.state.step, ref.state.step) << what;
}

TEST(CheckpointReshard, FsdpCheckpointResumesOnOtherWorldSizesAndStrategies) {
  const int W = world_size();
  Job fsdp;
  fsdp.strategy = "fsdp";
  fsdp.dropout = 0;  // dropout masks depend on the micro-batch split, which changes here
  const std::string ref_dir = shared_dir("reshard_ref"), run = shared_dir("reshard_run");
  Trajectory ref = run_job(fsdp, kSteps, ref_dir, "", 0);
  run_job(fsdp, 3, run, "", 3);
  const std::string ck = ckpt_path(run, 3);

  // single on one rank: the W ranks' micro-batches become accumulation steps (same global batch).
  Job single = fsdp;
  single.strategy = "single";
  single.comm = MPI_COMM_SELF;
  single.accum = W;
  expect_close_continuation(run_job(single, kSteps, shared_dir("reshard_single", true), ck, 0), ref,
                            "fsdp x" + std::to_string(W) + " -> single x1");

  // ddp on W ranks with the global batch split differently (micro 1 x accum 2).
  Job ddp = fsdp;
  ddp.strategy = "ddp";
  ddp.micro_batch = 1;
  ddp.accum = 2;
  expect_close_continuation(run_job(ddp, kSteps, shared_dir("reshard_ddp"), ck, 0), ref,
                            "fsdp x" + std::to_string(W) + " -> ddp x" + std::to_string(W));

  // zero2 on W ranks (sharded optimizer state loaded from full tensors).
  Job zero2 = fsdp;
  zero2.strategy = "zero2";
  expect_close_continuation(run_job(zero2, kSteps, shared_dir("reshard_zero2"), ck, 0), ref,
                            "fsdp -> zero2 x" + std::to_string(W));
}

TEST(CheckpointReshard, SingleRankCheckpointResumesWithFsdp) {
  const int W = world_size();
  Job single;
  single.strategy = "single";
  single.comm = MPI_COMM_SELF;
  single.accum = W;
  single.dropout = 0;
  const std::string local = shared_dir("from_single", true);
  run_job(single, 3, local, "", 3);
  // Every rank wrote the same checkpoint into its own directory; the fsdp job reads rank 0's.
  std::string ck = ckpt_path(local, 3);
  int len = int(ck.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  ck.resize(size_t(len));
  MPI_Bcast(ck.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  Job fsdp = single;
  fsdp.strategy = "fsdp";
  fsdp.comm = MPI_COMM_WORLD;
  fsdp.accum = 1;
  Trajectory ref = run_job(fsdp, kSteps, shared_dir("from_single_ref"), "", 0);
  expect_close_continuation(run_job(fsdp, kSteps, shared_dir("from_single_run"), ck, 0), ref,
                            "single x1 -> fsdp x" + std::to_string(W));
}

// hsdp's checkpoint is the full state like every other: it resumes as fsdp on the same ranks and as single on
// one, and an fsdp checkpoint resumes as hsdp.
TEST(CheckpointReshard, HsdpCheckpointResumesAsFsdpAndSingleAndBack) {
  const int W = world_size();
  Job hsdp;
  hsdp.strategy = "hsdp";
  hsdp.dropout = 0;  // dropout masks depend on the micro-batch split, which changes here
  const std::string ref_dir = shared_dir("hsdp_ref"), run = shared_dir("hsdp_run");
  Trajectory ref = run_job(hsdp, kSteps, ref_dir, "", 0);
  run_job(hsdp, 3, run, "", 3);
  const std::string ck = ckpt_path(run, 3);
  Job fsdp = hsdp;
  fsdp.strategy = "fsdp";
  expect_close_continuation(run_job(fsdp, kSteps, shared_dir("hsdp_fsdp"), ck, 0), ref,
                            "hsdp x" + std::to_string(W) + " -> fsdp x" + std::to_string(W));
  Job single = hsdp;
  single.strategy = "single";
  single.comm = MPI_COMM_SELF;
  single.accum = W;
  expect_close_continuation(run_job(single, kSteps, shared_dir("hsdp_single", true), ck, 0), ref,
                            "hsdp x" + std::to_string(W) + " -> single x1");
  // And back: fsdp's checkpoint continued by hsdp.
  const std::string frun = shared_dir("fsdp_for_hsdp");
  Trajectory fref = run_job(fsdp, kSteps, shared_dir("fsdp_for_hsdp_ref"), "", 0);
  run_job(fsdp, 3, frun, "", 3);
  expect_close_continuation(run_job(hsdp, kSteps, shared_dir("fsdp_hsdp"), ckpt_path(frun, 3), 0), fref,
                            "fsdp x" + std::to_string(W) + " -> hsdp x" + std::to_string(W));
}

}  // namespace
