// Checkpoint pieces that need no MPI job: tensor digests, file names, the row split of parallel writes,
// the training fingerprint (every defining field is compared; the world size alone may change), the
// base-weights digest of a snapshot, unsupported option combinations, FullState <-> named tensors, and
// what a broken file reports.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <cstring>
#include <functional>

#include "lorabench/config/options.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/io/checkpoint.hpp"
#include "lorabench/io/h5.hpp"
#include "lorabench/train/checkpoint.hpp"

using namespace lorabench;
namespace fs = std::filesystem;

namespace {

fs::path tmp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("lorabench_ckpt_unit_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

RunConfig base_config() {
  RunConfig c = default_run_config();
  c.model.preset = "tiny";
  c.model.dtype = "fp32";
  c.lora.r = 4;
  c.lora.alpha = 8;
  c.data.format = "synthetic";
  c.data.seq_len = 32;
  c.train.micro_batch = 2;
  return c;
}

std::vector<std::string> changed_fields(const RunConfig& a, const RunConfig& b, int wa = 1, int wb = 1) {
  std::vector<std::string> out;
  for (const auto& line :
       train::fingerprint_differences(train::training_fingerprint(a, wa), train::training_fingerprint(b, wb)))
    out.push_back(line.substr(0, line.find(':')));
  return out;
}

}  // namespace

TEST(CheckpointDigest, DoesNotDependOnTheSplitAndSeesEveryBit) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.25f - 7.0f;
  const std::string whole = io::tensor_digest(v.data(), 1000);
  EXPECT_EQ(whole.size(), 16u);
  const uint64_t parts = io::digest_partial(v.data(), 333, 0) + io::digest_partial(v.data() + 333, 667, 333);
  EXPECT_EQ(io::digest_finish(parts, 1000), whole);
  std::vector<float> w = v;
  uint32_t bits;
  std::memcpy(&bits, &w[500], 4);
  bits ^= 1u;  // the last mantissa bit
  std::memcpy(&w[500], &bits, 4);
  EXPECT_NE(io::tensor_digest(w.data(), 1000), whole);
  w = v;
  std::swap(w[1], w[2]);
  EXPECT_NE(io::tensor_digest(w.data(), 1000), whole) << "positions matter";
  EXPECT_NE(io::tensor_digest(v.data(), 999), whole) << "the element count matters";
}

TEST(CheckpointNames, StepFiles) {
  EXPECT_EQ(io::checkpoint_file_name(42), "step_00000042.h5");
  EXPECT_EQ(io::checkpoint_step_of("step_00000042.h5"), 42);
  EXPECT_EQ(io::checkpoint_step_of("step_00000042.h5.tmp"), -1);
  EXPECT_EQ(io::checkpoint_step_of("step_0000042.h5"), -1);
  EXPECT_EQ(io::checkpoint_step_of("latest"), -1);
}

TEST(CheckpointRows, EvenSplitCoversEveryRowOnce) {
  for (int64_t rows : {1, 3, 7, 896, 151936})
    for (int world : {1, 2, 3, 4, 8}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        auto [b, e] = io::even_rows(rows, r, world);
        EXPECT_EQ(b, next);
        EXPECT_GE(e, b);
        next = e;
      }
      EXPECT_EQ(next, rows);
    }
}

TEST(CheckpointFingerprint, EveryDefiningFieldIsCompared) {
  const RunConfig base = base_config();
  EXPECT_TRUE(changed_fields(base, base).empty());
  struct Change {
    const char* field;
    std::function<void(RunConfig&)> apply;
  };
  const std::vector<Change> changes = {
      {"model.source", [](RunConfig& c) { c.model.preset = "small"; }},
      {"model.dtype", [](RunConfig& c) { c.model.dtype = "bf16"; }},
      {"lora.enabled", [](RunConfig& c) { c.lora.enabled = false; }},
      {"lora.r", [](RunConfig& c) { c.lora.r = 8; }},
      {"lora.alpha", [](RunConfig& c) { c.lora.alpha = 16; }},
      {"lora.rslora", [](RunConfig& c) { c.lora.rslora = true; }},
      {"lora.targets", [](RunConfig& c) { c.lora.targets = {"q", "v"}; }},
      {"data.seq_len", [](RunConfig& c) { c.data.seq_len = 64; }},
      {"run.seed", [](RunConfig& c) { c.run.seed = 7; }},
      {"train.global_batch", [](RunConfig& c) { c.train.grad_accum = 3; }},
  };
  for (const auto& ch : changes) {
    RunConfig c = base;
    ch.apply(c);
    auto f = changed_fields(base, c);
    EXPECT_NE(std::find(f.begin(), f.end(), ch.field), f.end()) << ch.field;
  }
  // Two changes: both listed.
  RunConfig c = base;
  c.lora.r = 8;
  c.data.seq_len = 64;
  EXPECT_EQ(changed_fields(base, c), (std::vector<std::string>{"lora.r", "data.seq_len"}));
  // Training settings that may change on resume are not part of it.
  c = base;
  c.train.lr = 1;
  c.run.steps = 1000;
  c.lora.dropout = 0.5;
  c.parallel.strategy = "fsdp";
  EXPECT_TRUE(changed_fields(base, c).empty());
  EXPECT_EQ(train::fingerprint_digest(train::training_fingerprint(base, 1)),
            train::fingerprint_digest(train::training_fingerprint(c, 1)));
}

TEST(CheckpointFingerprint, WorldSizeMayChangeWithTheGlobalBatch) {
  RunConfig two = base_config(), one = base_config();
  one.train.grad_accum = 2;  // 2 x 2 x 1 == 2 x 1 x 2
  EXPECT_TRUE(changed_fields(two, one, 2, 1).empty());
  EXPECT_EQ(changed_fields(two, two, 2, 4), (std::vector<std::string>{"train.global_batch"}));
}

TEST(CheckpointFingerprint, DataAndTokenizerContent) {
  const fs::path d = tmp_dir("data");
  fs::copy_file(std::string(LORABENCH_SOURCE_DIR) + "/inputs/data/sft_toy.jsonl", d / "a.jsonl");
  std::ofstream(d / "tok.json") << "{\"pretend\": \"tokenizer\"}";
  RunConfig a = base_config();
  a.data.format = "auto";
  a.data.path = (d / "a.jsonl").string();
  a.data.tokenizer = (d / "tok.json").string();
  RunConfig moved = a;  // the same bytes elsewhere: not a difference
  fs::copy_file(d / "a.jsonl", d / "b.jsonl");
  moved.data.path = (d / "b.jsonl").string();
  EXPECT_TRUE(changed_fields(a, moved).empty());
  std::ofstream(d / "b.jsonl", std::ios::app) << "\n";
  EXPECT_EQ(changed_fields(a, moved), (std::vector<std::string>{"data.content"}));
  RunConfig packed = a;
  packed.data.pack = true;
  EXPECT_EQ(changed_fields(a, packed), (std::vector<std::string>{"data.pack"}));
  RunConfig tok = a;
  std::ofstream(d / "tok2.json") << "{\"pretend\": \"tokenizer2\"}";
  tok.data.tokenizer = (d / "tok2.json").string();
  EXPECT_EQ(changed_fields(a, tok), (std::vector<std::string>{"data.tokenizer"}));
  EXPECT_THROW(train::training_fingerprint([&] { RunConfig c = a; c.data.path = (d / "none").string(); return c; }(), 1),
               IoError);
}

TEST(CheckpointFingerprint, SnapshotBaseWeights) {
  const fs::path d = tmp_dir("snapshot");
  const fs::path src = std::string(LORABENCH_FIXTURES) + "/qwen2-tiny";
  fs::copy_file(src / "config.json", d / "config.json");
  fs::copy_file(src / "model.safetensors", d / "model.safetensors");
  RunConfig c = base_config();
  c.model.path = d.string();
  const std::string digest = train::base_weights_digest(c);
  EXPECT_EQ(digest.rfind("safetensors-sampled-v1:", 0), 0u) << digest;
  EXPECT_EQ(train::base_weights_digest(c), digest);
  EXPECT_NE(train::base_weights_digest(base_config()), digest);
  EXPECT_EQ(train::base_weights_digest(base_config()), "random-init preset=tiny seed=1234");
  // Other files in the directory do not count; the weights' last bytes (a sampled block) do.
  std::ofstream(d / "notes.safetensors") << "x";
  EXPECT_EQ(train::base_weights_digest(c), digest);
  {
    std::fstream f(d / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_NE(train::base_weights_digest(c), digest);
}

TEST(CheckpointConfig, UnsupportedCombinationsAreConfigErrors) {
  RunConfig c = base_config();
  EXPECT_NO_THROW(train::validate_checkpoint_config(c));
  c.run.repeat = 2;
  c.checkpoint.every = 5;
  try {
    train::validate_checkpoint_config(c);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.every: checkpoints need run.repeat = 1"), std::string::npos);
  }
  c = base_config();
  c.checkpoint.resume = "latest";
  c.run.overwrite = true;
  try {
    train::validate_checkpoint_config(c);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("run.overwrite"), std::string::npos);
  }
}

TEST(CheckpointState, NamedTensorsRoundTrip) {
  model::ModelShape shape = model::preset_shape("tiny");
  shape.vocab_size = 100;
  for (bool lora : {true, false}) {
    model::LoraSpec spec = model::make_lora_spec(lora, 4, 8, 0, false, {"q", "k", "v", "o", "gate", "up", "down"});
    model::ModelLayout m = model::build_layout(shape, spec);
    strategy::FullState st;
    st.step = 11;
    for (auto* v : {&st.params, &st.exp_avg, &st.exp_avg_sq})
      for (const auto& u : m.units)
        v->push_back(u.trainable.empty() ? at::Tensor() : at::randn({u.trainable_numel}));
    io::CheckpointContents c;
    c.path = "mem.h5";
    c.groups.push_back({"optimizer", {{"step", int64_t(11)}}});
    for (const auto& p : train::state_pieces(m, st, true, 0, 1)) {
      io::StoredTensor t;
      t.path = p.path;
      t.shape = p.shape;
      t.data.assign(p.data, p.data + t.numel());
      c.tensors.push_back(t);
    }
    size_t slots = 0;
    for (const auto& u : m.units) slots += u.trainable.size();
    EXPECT_EQ(c.tensors.size(), 3 * slots);
    EXPECT_NE(c.tensor(lora ? "trainable/base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
                            : "optimizer/exp_avg_sq/model.embed_tokens.weight"),
              nullptr);
    // Parallel writes: the ranks' pieces of every tensor are consecutive rows that add up to the whole.
    const auto whole = train::state_pieces(m, st, true, 0, 1);
    for (int world : {2, 3}) {
      std::vector<std::vector<io::TensorPiece>> by_rank;
      for (int r = 0; r < world; ++r) by_rank.push_back(train::state_pieces(m, st, false, r, world));
      for (size_t i = 0; i < whole.size(); ++i) {
        const int64_t per_row = c.tensors[i].numel() / whole[i].shape[0];
        int64_t next = 0;
        for (int r = 0; r < world; ++r) {
          const io::TensorPiece& p = by_rank[size_t(r)][i];
          ASSERT_EQ(p.path, whole[i].path);
          EXPECT_EQ(p.row_begin, next);
          EXPECT_EQ(p.data, whole[i].data + p.row_begin * per_row);
          next = p.row_end;
        }
        EXPECT_EQ(next, whole[i].shape[0]);
      }
    }
    strategy::FullState back = train::state_from_checkpoint(m, c);
    EXPECT_EQ(back.step, 11);
    for (size_t u = 0; u < m.units.size(); ++u) {
      ASSERT_EQ(back.params[u].defined(), st.params[u].defined());
      if (!st.params[u].defined()) continue;
      EXPECT_TRUE(at::equal(back.params[u], st.params[u]));
      EXPECT_TRUE(at::equal(back.exp_avg[u], st.exp_avg[u]));
      EXPECT_TRUE(at::equal(back.exp_avg_sq[u], st.exp_avg_sq[u]));
    }
    // A missing tensor, another shape, a tensor the model does not have: each named.
    io::CheckpointContents bad = c;
    const std::string victim = bad.tensors[5].path;
    bad.tensors.erase(bad.tensors.begin() + 5);
    try {
      train::state_from_checkpoint(m, bad);
      ADD_FAILURE();
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("missing tensor " + victim), std::string::npos) << e.what();
    }
    bad = c;
    bad.tensors[2].shape.push_back(1);
    EXPECT_THROW(train::state_from_checkpoint(m, bad), IoError);
    bad = c;
    bad.tensors.push_back({"trainable/extra.weight", {1}, "", {1.0f}});
    try {
      train::state_from_checkpoint(m, bad);
      ADD_FAILURE();
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("trainable/extra.weight"), std::string::npos) << e.what();
    }
  }
}

TEST(CheckpointRead, BrokenFilesSayWhy) {
  const fs::path d = tmp_dir("broken");
  EXPECT_EQ(io::probe_checkpoint((d / "none.h5").string()).problem, "missing");
  std::ofstream(d / "text.h5") << "not hdf5";
  io::CheckpointProbe p = io::probe_checkpoint((d / "text.h5").string());
  EXPECT_FALSE(p.complete);
  EXPECT_EQ(p.problem, "damaged: 8 bytes, too short for a checkpoint");
  try {
    io::read_checkpoint((d / "text.h5").string());
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("text.h5: damaged: 8 bytes, too short"), std::string::npos) << e.what();
  }
  // Longer than a seal, neither sealed nor HDF5.
  std::ofstream(d / "long.h5") << std::string(1000, 'x');
  EXPECT_EQ(io::probe_checkpoint((d / "long.h5").string()).problem,
            "damaged: no checkpoint seal and no HDF5 signature at the start of the file");
  // An HDF5 file without a seal (how checkpoints were written before seals) is read as before, unsealed;
  // here one that is not a checkpoint.
  { h5::Handle f = h5::create_truncate((d / "plain.h5").string()); }
  p = io::probe_checkpoint((d / "plain.h5").string());
  EXPECT_FALSE(p.sealed);
  EXPECT_EQ(p.problem, "not a lorabench checkpoint");
  EXPECT_TRUE(io::list_checkpoints((d / "nothing").string()).empty());
  EXPECT_EQ(io::read_latest_pointer((d / "nothing").string()), "");
  fs::remove_all(d.parent_path());
}
