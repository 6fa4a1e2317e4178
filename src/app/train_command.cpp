// lorabench INPUT.ini [--set section.key=value ...]: the training run.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <H5public.h>
#include <dlfcn.h>
#include <boost/program_options.hpp>
#include <torch/version.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "commands.hpp"
#include "bootstrap.hpp"
#include "run_dir_lock.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/comm/mesh.hpp"
#include "lorabench/comm/topology.hpp"
#include "lorabench/config/options.hpp"
#include "lorabench/config/paths.hpp"
#include "lorabench/core/cpu_isa.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/log.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/stop_request.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/core/version.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/io/run_file.hpp"
#include "lorabench/lora/adapter.hpp"
#include "lorabench/metrics/memory.hpp"
#include "lorabench/model/gemm.hpp"
#include "lorabench/model/qwen2.hpp"
#include "lorabench/model/tensor_parallel.hpp"
#include "lorabench/train/checkpoint.hpp"
#include "lorabench/comm/control.hpp"
#include "lorabench/train/plan.hpp"
#include "lorabench/train/run_specs.hpp"
#include "lorabench/train/trainer.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace lorabench::app {

namespace {

void print_train_help() {
  std::printf(
      "usage: lorabench INPUT.ini [--set section.key=value ...]\n"
      "       mpirun -n N lorabench INPUT.ini ...   /   srun -n N lorabench INPUT.ini ...\n\n"
      "Fine-tunes the configured Qwen2.5 model and writes outputs/<run>/run.h5.\n"
      "Every key of the input file can be overridden with --set (same name as section.key).\n\n"
      "options:\n"
      "  --set section.key=value   override one key (repeatable)\n"
      "  --print-config            print the effective configuration and exit\n"
      "  -h, --help                this text and every input key\n\n"
      "input keys (docs/input-reference.md):%s",
      options_help().c_str());
}

// Intra-op threads for libtorch and the BLAS behind it. OpenBLAS ignores at::set_num_threads and reads
// OPENBLAS_NUM_THREADS only at load time, so it is set through its own call when present.
void set_threads(int n) {
  at::set_num_threads(n);
  using SetFn = void (*)(int);
  if (auto fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(n);
}

io::KeyValues provenance(const MpiSession& mpi, const comm::Topology& topo, const RunConfig& cfg, int argc,
                         char** argv) {
  io::KeyValues p;
  std::vector<std::string> args(argv, argv + argc);
  p.emplace_back("argv", join(args, " "));
  p.emplace_back("input_file", cfg.input_path);
  p.emplace_back("working_directory", fs::current_path().string());
  std::set<std::string> hosts;
  for (const auto& r : topo.ranks) hosts.insert(r.host);
  p.emplace_back("hosts", join(std::vector<std::string>(hosts.begin(), hosts.end()), ","));
  p.emplace_back("world_size", std::to_string(topo.world_size));
  p.emplace_back("node_count", std::to_string(topo.node_count));
  p.emplace_back("nodes_emulated", topo.emulated ? "true" : "false");
  p.emplace_back("mpi_library", MpiSession::library_version());
  p.emplace_back("mpi_thread_level", MpiSession::thread_level_name(mpi.thread_level()));
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  p.emplace_back("hdf5_version", strformat("%u.%u.%u", maj, min, rel));
  p.emplace_back("libtorch_version", TORCH_VERSION);
  p.emplace_back("libtorch_config", at::show_config());
  p.emplace_back("libtorch_parallel", at::get_parallel_info());
  p.emplace_back("compiler", __VERSION__);
  p.emplace_back("cpu_model", sys::cpu_model());
  std::vector<std::string> isa;
  for (const auto& f : sys::cpu_flags())
    if (starts_with(f, "avx") || starts_with(f, "amx") || f == "fma") isa.push_back(f);
  p.emplace_back("cpu_isa", join(isa, " "));
  p.emplace_back("cpus_online", std::to_string(sys::online_cpus()));
  p.emplace_back("kernel", sys::kernel_release());
  p.emplace_back("threads_per_rank", std::to_string(cfg.parallel.threads_per_rank));
  const sys::BlasInfo blas = sys::blas_info();
  p.emplace_back("blas", blas.kind + ": sgemm_ from " + blas.provider + " -> " + blas.resolved);
  p.emplace_back("kernel_isa", isa_name(cpu_isa()));  // the ISA variant of lorabench's own kernels
  p.emplace_back("fp32_gemm", model::fp32_gemm_engine());
  p.emplace_back("bf16_gemm_cpu", model::bf16_gemm_engine());
  p.emplace_back("started_utc", sys::utc_now_iso8601());
  p.emplace_back("slurm_job_id", sys::getenv_or("SLURM_JOB_ID", ""));
  p.emplace_back("slurm_job_nodelist", sys::getenv_or("SLURM_JOB_NODELIST", ""));
  p.emplace_back("slurm_tasks_per_node", sys::getenv_or("SLURM_TASKS_PER_NODE", ""));
  p.emplace_back("slurm_ntasks", sys::getenv_or("SLURM_NTASKS", ""));
  for (const auto& [k, v] : sys::relevant_environment()) p.emplace_back("env." + k, v);
  return p;
}

}  // namespace

int keys_main(MpiSession& mpi, int argc, char** argv) {
  bool markdown = argc > 1 && std::string(argv[1]) == "--markdown";
  if (argc > 1 && !markdown) throw ConfigError(std::string("keys: unknown option ") + argv[1] + " (--markdown)");
  if (mpi.rank() == 0) std::printf("%s", markdown ? options_markdown().c_str() : options_help().c_str());
  return 0;
}

RunConfig read_run_config(MpiSession& mpi, const std::string& input, const std::vector<std::string>& sets) {
  // Rank 0 reads the input file; every rank parses the same text.
  std::string text;
  try {
    text = comm::read_on_root(mpi.world(), input);
  } catch (const IoError& e) {
    throw ConfigError(input + ": cannot read the input file (" + e.what() + ")");
  }
  RunConfig cfg = parse_run_config(input, text, sets);
  if (mpi.rank() == 0)
    for (const auto& line : repeated_overrides(sets)) log::warn(line);
  return cfg;
}

void parse_input_command_line(int argc, char** argv, po::options_description& desc, std::string* input,
                              const std::string& what, const std::string& help) {
  desc.add_options()("input", po::value(input));
  po::positional_options_description pos;
  pos.add("input", 1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(what + ": " + e.what() + " (" + help + ")");
  }
}

namespace {

struct TrainArgs {
  std::string input;
  std::vector<std::string> sets;
  bool help = false, print_config = false;
};

TrainArgs parse_train_args(int argc, char** argv) {
  TrainArgs a;
  po::options_description desc;
  desc.add_options()("help,h", po::bool_switch(&a.help))("set", po::value(&a.sets)->composing())(
      "print-config", po::bool_switch(&a.print_config));
  parse_input_command_line(argc, argv, desc, &a.input, "command line", "lorabench --help");
  if (!a.help && a.input.empty())
    throw ConfigError("no input file (usage: lorabench INPUT.ini [--set section.key=value ...])");
  return a;
}

// The input file and its overrides, validated for this job. run.name unset: a default name that says what
// ran (numbered on rank 0 once the inputs are checked, name_the_run).
RunConfig validated_config(MpiSession& mpi, const TrainArgs& a, bool* default_name) {
  RunConfig cfg = read_run_config(mpi, a.input, a.sets);
  *default_name = cfg.run.name.empty();
  if (*default_name) cfg.run.name = default_run_name(a.input, cfg.parallel.strategy, mpi.size());
  ValidationContext vctx;
  vctx.world_size = mpi.size();
  vctx.nccl_built = comm::nccl_built();
  vctx.cuda_available = device::cuda_visible_devices() > 0;
  vctx.cuda_built = device::cuda_built();
  vctx.cpu_blocked_attention = model::cpu_blocked_attention_available();
  validate_run_config(cfg, vctx);
  train::validate_checkpoint_config(cfg);
  return cfg;
}

// What the process does the same way for every run: logging, memory accounting, threads. (The kernels a
// model runs travel with it: train::layout_of.)
void configure_process(const RunConfig& cfg) {
  log::set_quiet(cfg.run.quiet);
  metrics::install_memory_counter();
  set_threads(cfg.parallel.threads_per_rank);
}

// Rank 0: what is wrong with the files the input names (they exist, an adapter to start from matches the
// configuration) and whether the run fits its device's memory (docs/plan.md); "" when nothing is.
std::string input_problems(const RunConfig& cfg, int world, const RankContext& rc) {
  std::vector<std::string> problems = input_path_problems(cfg);
  if (problems.empty() && !cfg.lora.init_from.empty()) {
    try {
      const lora::AdapterConfig a = lora::read_adapter_config(cfg.lora.init_from);
      const auto diffs = lora::adapter_mismatches(
          a, model::make_lora_spec(true, cfg.lora.r, cfg.lora.alpha, cfg.lora.dropout, cfg.lora.rslora, cfg.lora.targets));
      if (!diffs.empty())
        problems.push_back(describe_path("lora.init_from", cfg.lora.init_from) +
                           ": the adapter does not match the configuration:\n    " + join(diffs, "\n    "));
    } catch (const IoError& e) {
      problems.push_back(describe_path("lora.init_from", cfg.lora.init_from) + ": " + e.what());
    }
  }
  if (!problems.empty()) return cfg.input_path + ": " + join(problems, "\n  ");
  try {  // data.seq_len and lora.r against the model they run on
    train::check_config_fits_model(cfg, train::model_shape_of(cfg));
  } catch (const ConfigError& e) {
    return e.what();
  }
  const device::Device& dev = rc.device();
  try {  // host memory on CPU, the GPU's memory on CUDA
    train::check_fits_or_throw(cfg, world, rc.ranks_on_device,
                               train::memory_for_fit_checks(cfg, dev.memory_available()),
                               dev.is_cuda() ? "GPU " + dev.str() : std::string("this node"), rc.topo.node_count);
  } catch (const ConfigError& e) {
    return cfg.input_path + ": " + e.what();
  }
  return "";
}

// Collective: the inputs are checked before anything is written, and the run's name settled. With run.name
// unset, the first free of NAME, NAME-2, ... for a new run and the latest of them for checkpoint.resume =
// latest, so that running one command twice never meets the first run's directory.
void check_inputs_and_name_run(MpiSession& mpi, RunConfig& cfg, bool default_name, const RankContext& rc) {
  std::string err;
  if (mpi.rank() == 0) {
    err = input_problems(cfg, mpi.size(), rc);
    if (err.empty() && default_name) {
      const bool continues = cfg.checkpoint.resume == "latest" || cfg.checkpoint.resume == "auto";
      cfg.run.name = continues ? latest_run_name(cfg.run.output_dir, cfg.run.name)
                               : first_free_run_name(cfg.run.output_dir, cfg.run.name);
    }
  }
  if (!comm::broadcast_status(mpi.world(), err.empty(), err)) throw ConfigError(err);
  cfg.run.name = comm::broadcast_string(mpi.world(), cfg.run.name);
}

struct RunDir {
  fs::path dir;                           // outputs/<name>
  train::ResumePoint resume;              // where training continues from
  std::string previous_run_file;          // a resumed run's earlier run.h5, kept as run.<k>.h5
  std::unique_ptr<RunDirLock> lock;        // rank 0: the directory is this run's while it lives
  std::unique_ptr<io::RunFileWriter> run;  // rank 0's run file (closed before the lock goes)
};

// Rank 0: the run directory for a new run, or the existing one continued; an existing run is never
// silently overwritten. Resuming (checkpoint.resume) keeps its checkpoints and the previous run file as
// run.<k>.h5 beside the new run.h5 (docs/checkpoints.md). "" or what is wrong.
std::string make_run_dir(const RunConfig& cfg, RunDir& d) {
  const fs::path run_path = d.dir / "run.h5";
  const bool resuming = !d.resume.path.empty();
  if (const std::string holder = fs::exists(d.dir) ? RunDirLock::holder(d.dir.string()) : ""; !holder.empty())
    return "run.name: " + resolve_path(d.dir.string()) + " is in use by a live run (" + holder + "): " +
           (cfg.run.overwrite ? "run.overwrite = true would delete it under that run"
                              : "a second run would write into it") +
           "; wait for it or stop it, or choose another run.name";
  // checkpoint.resume = auto without a checkpoint continues the directory too (a requeued job that was
  // killed before its first checkpoint): its run file is kept as run.<k>.h5, as on a resume.
  if (fs::exists(d.dir) && (resuming || cfg.checkpoint.resume == "auto") && !cfg.run.overwrite) {
    for (int k = 1; fs::exists(run_path); ++k) {
      const fs::path old = d.dir / ("run." + std::to_string(k) + ".h5");
      if (fs::exists(old)) continue;
      fs::rename(run_path, old);
      d.previous_run_file = old.string();
    }
  } else if (fs::exists(d.dir)) {
    if (!cfg.run.overwrite)
      return "run.name: " + resolve_path(d.dir.string()) +
             " already exists (choose another run.name, leave run.name unset for a numbered default name, or "
             "--set run.overwrite=true to replace it)";
    const std::string ck = resuming ? fs::weakly_canonical(d.resume.path).string() : "";
    if (resuming && starts_with(ck, fs::weakly_canonical(d.dir).string() + "/"))
      return "run.overwrite: true would delete " + d.resume.path + ", which checkpoint.resume resumes from";
    fs::remove_all(d.dir);
  }
  fs::create_directories(d.dir);
  d.lock = std::make_unique<RunDirLock>(d.dir.string());
  d.run = std::make_unique<io::RunFileWriter>(run_path.string(), schema::kKindTrain, cfg.run.name);
  return "";
}

// Collective: the checkpoint to resume from, and the run directory with rank 0's run file.
RunDir prepare_run_dir(MpiSession& mpi, const RunConfig& cfg) {
  RunDir d;
  d.dir = fs::path(cfg.run.output_dir) / cfg.run.name;
  d.resume = train::select_resume_checkpoint(cfg, d.dir.string(), mpi.size(), mpi.world());
  std::string err;
  if (mpi.rank() == 0) {
    try {
      err = make_run_dir(cfg, d);
    } catch (const std::exception& e) {
      err = describe_path("run.output_dir", cfg.run.output_dir) + ": " + e.what();
    }
  }
  if (!comm::broadcast_status(mpi.world(), err.empty(), err)) throw ConfigError(err);
  return d;
}

// Collective: the first writes of the run file (configuration, provenance, ranks); a failure (a full
// disk) stops every rank together with AgreedIoError.
void write_run_header(MpiSession& mpi, const RunConfig& cfg, const RankContext& rc, const RunDir& d, int argc,
                      char** argv, const comm::MeshComms* mesh) {
  comm::agreed_writes(mpi.world(), [&] {
    if (!d.run) return;
    d.run->write_config(resolved_values(cfg), cfg.input_text, cfg.input_path, cfg.overrides);
    const device::Device& dev = rc.device();
    io::KeyValues prov = provenance(mpi, rc.topo, cfg, argc, argv);
    for (const auto& kv : dev.describe()) prov.push_back(kv);
    if (dev.is_cuda())
      prov.emplace_back("papi_scope", "the host thread of each rank (launches, staging copies), not the GPU's kernels");
    prov.emplace_back("device_choice", rc.choice.reason);
    prov.emplace_back("backend", rc.choice.backend);
    if (mesh) {  // hsdp's mesh and every rank's place in it (rank:replica.shard)
      prov.emplace_back("mesh", mesh->mesh.describe());
      prov.emplace_back("mesh_coords", mesh->mesh.describe_coords());
    }
    prov.emplace_back("attention_kernel", model::attention_kernel(train::kernel_options_of(cfg), dev.is_cuda(), cfg.model.dtype == "bf16"));
    if (!d.resume.path.empty()) {
      prov.emplace_back("resumed_from", d.resume.path);
      prov.emplace_back("resumed_at_step", std::to_string(d.resume.step));
      prov.emplace_back("previous_run_file", d.previous_run_file);
    }
    d.run->write_provenance(prov);
    std::vector<io::RankRow> rows;
    for (const auto& r : rc.topo.ranks)
      rows.push_back({r.rank, r.host, r.local_rank, r.node, r.pid, cfg.parallel.threads_per_rank,
                      starts_with(r.device, "cuda:") ? std::stoi(r.device.substr(5)) : -1});
    d.run->write_ranks(rows);
    d.run->flush();
  });
}

// The run's opening lines; one line per rank, in rank order.
void announce(MpiSession& mpi, const RunConfig& cfg, const RankContext& rc, const comm::Communicator& comm,
              const RunDir& d) {
  log::info(strformat("lorabench %s (%s)  %s", program_version(), git_commit(), cfg.input_path.c_str()));
  log::info("run directory: " + d.dir.string());
  if (cfg.model.dtype == "fp32" && sys::blas_info().kind == "reference BLAS")
    log::warn("the reference BLAS is loaded: fp32 GEMMs run ~30x slower than with OpenBLAS "
              "(apt-get install libopenblas0-pthread); the timings of this run are not representative");
  log::info("effective configuration:\n" + effective_config_table(cfg));
  const bool staged = rc.device().is_cuda() && rc.choice.backend == "mpi";
  for (int r = 0; r < rc.topo.world_size; ++r) {
    if (r == rc.topo.rank)
      log::any(comm::describe_rank(rc.topo) + strformat(" threads %d backend %s%s", at::get_num_threads(),
                                                        comm.backend_name().c_str(), staged ? " (staged)" : ""));
    LB_MPI_CHECK(MPI_Barrier(mpi.world()));
  }
}

// Why a run whose probed prediction does not fit is refused: the numbers and what to change.
std::string prediction_refusal(const train::PlanRow& p, const device::Device& dev) {
  const bool gpu = dev.is_cuda();
  if (p.available >= 0 && (gpu ? p.reserved : p.rss) <= p.available) return p.note;  // not memory: GPUs per node
  return strformat("each rank needs %s (%s: a tensor peak of %s, of it model state %s, activations %s, strategy "
                   "buffers %s%s), and %s has %s per rank. Lower data.seq_len or train.micro_batch, set "
                   "model.activation_checkpointing = true, shard with parallel.strategy = fsdp, or use more nodes; "
                   "`lorabench plan` predicts each option (run.predict = false skips this check)",
                   format_bytes(double(gpu ? p.reserved : p.rss)).c_str(),
                   gpu ? "GPU memory reserved" : "resident memory", format_bytes(double(p.tensor_peak)).c_str(),
                   format_bytes(double(p.model_state)).c_str(), format_bytes(double(p.activations)).c_str(),
                   format_bytes(double(p.strategy_extra)).c_str(),
                   gpu ? "" : ", plus the process's own footprint", gpu ? ("GPU " + dev.str()).c_str() : "this node",
                   format_bytes(double(p.available)).c_str());
}

// Collective: the planner's prediction for this very run, recorded beside what it measures (lorabench
// plan): on its device (a GPU run probes on its GPU), with the bandwidth of its own communicator. A run it
// predicts cannot fit stops here on every rank (ConfigError), its run file marked failed with the reason.
void record_prediction(MpiSession& mpi, const RunConfig& cfg, const RankContext& rc, comm::Communicator& comm,
                       io::RunFileWriter* run) {
  device::Device& dev = rc.device();
  const int cpus = train::node_cpus(mpi.world());
  const train::CommBandwidth bw =
      mpi.size() > 1 ? train::measure_bandwidth(comm, mpi.world(), dev) : train::estimate_bandwidth();
  std::string refusal;
  if (run) {
    const double t0 = sys::now_s();
    const train::ProbeResult probe = train::probe_model(cfg, dev);
    const bool probed = probe.skipped.empty();
    if (!probed) log::warn(probe.skipped + ": the prediction has the activations' lower bound and no times");
    train::PlanOptions po;
    po.worlds = {mpi.size()};
    po.strategies = {train::plan_strategy_name(cfg)};
    po.ranks_per_node = rc.topo.host_local_size;
    po.node_cpus = cpus;
    plan_on_device(po, rc);
    const auto rows = train::make_plan(cfg, po, probed ? &probe : nullptr, bw);
    if (!rows.empty()) {
      const train::PlanRow& p = rows.front();
      train::write_prediction(*run, p, dev.is_cuda(), (probed ? probe.note : probe.skipped) + "; bandwidth " + bw.source);
      log::info(strformat("prediction (lorabench plan, %.1f s): tensor peak %s per rank, step %.3f s", sys::now_s() - t0,
                          format_bytes(double(p.tensor_peak)).c_str(), p.step_s));
      // The lower bound let the run start; the probe's prediction is the better figure, and it decides.
      if (!p.fits)
        refusal = cfg.input_path + ": the run's prediction says it cannot fit: " + prediction_refusal(p, dev);
    }
    if (!refusal.empty()) run->set_status(schema::kStatusFailed, refusal);
    run->flush();
  }
  comm::quiet_barrier(mpi.world());  // the other ranks sleep while rank 0 probes
  if (!comm::broadcast_status(mpi.world(), refusal.empty(), refusal)) throw ConfigError(refusal);
}

// Collective: hsdp's mesh, or tensor parallelism's, placed on the nodes and split from the data plane; nullptr for
// the other runs.
std::unique_ptr<comm::MeshComms> make_mesh(const RunConfig& cfg, const RankContext& rc, comm::Communicator& world) {
  const int tp = cfg.parallel.tp;
  if (cfg.parallel.strategy != "hsdp" && tp <= 1) return nullptr;
  comm::Mesh m;
  try {  // the same topology on every rank: all throw alike
    m = tp > 1 ? comm::place_tp_mesh(rc.topo, tp) : comm::place_mesh(rc.topo, cfg.parallel.dp_replicate);
  } catch (const ConfigError& e) {
    throw ConfigError(cfg.input_path + ": " + e.what());
  }
  auto mc = std::make_unique<comm::MeshComms>(comm::split_mesh(world, m));
  if (tp > 1) {
    const int replicas = model::tp_kv_replicas(train::model_shape_of(cfg), tp);
    if (replicas > 1) mc->tp_kv = mc->tp->split(mc->me.tp / replicas, mc->me.tp);
    log::info("mesh: " + m.describe() + "; rank:replica.shard.tp " + m.describe_coords() +
              (replicas > 1 ? strformat("; each key/value head is held by %d ranks", replicas) : std::string()));
    return mc;
  }
  log::info("mesh: " + m.describe() + "; rank:replica.shard " + m.describe_coords());
  if (!m.shard_within_node)
    log::warn("mesh: the shard groups span nodes (" + std::to_string(m.dp_shard) + " ranks each, " +
              std::to_string(rc.topo.local_size) + " per node): their gathers cross the network");
  return mc;
}

int train(MpiSession& mpi, const RunConfig& cfg, const RankContext& rc, comm::Communicator& comm,
          const comm::MeshComms* mesh, RunDir& d) {
  train::TrainEnv env;
  env.cfg = &cfg;
  env.world = mpi.world();
  env.comm = &comm;
  env.device = &rc.device();
  env.topo = &rc.topo;
  env.mesh = mesh;
  env.run = d.run.get();
  env.run_dir = d.dir.string();
  env.resume_from = d.resume.path;
  try {
    return train::run_training(env);
  } catch (const std::exception& e) {
    // Rank 0 marks its run file failed before main() aborts the job.
    if (d.run) d.run->set_status(schema::kStatusFailed, e.what());
    throw;
  }
}

}  // namespace

int train_main(MpiSession& mpi, int argc, char** argv) {
  const TrainArgs args = parse_train_args(argc, argv);
  if (args.help) {
    if (mpi.rank() == 0) print_train_help();
    return 0;
  }
  stop::install_handlers();  // SIGTERM / SIGUSR1 / SIGINT from here on: finish the step, checkpoint, exit 75
  bool default_name = false;
  RunConfig cfg = validated_config(mpi, args, &default_name);
  if (args.print_config) {
    if (mpi.rank() == 0) std::printf("%s", effective_config_table(cfg).c_str());
    return 0;
  }
  configure_process(cfg);
  const RankContext rc = bootstrap(mpi.world(), bootstrap_request(cfg));
  std::unique_ptr<comm::Communicator> comm = make_data_plane(mpi.world(), rc, {cfg.fault.comm_delay_ms / 1000.0, {}});
  const std::unique_ptr<comm::MeshComms> mesh = make_mesh(cfg, rc, *comm);  // hsdp and tp only; destroyed before `comm`
  check_inputs_and_name_run(mpi, cfg, default_name, rc);
  RunDir dir = prepare_run_dir(mpi, cfg);
  try {
    write_run_header(mpi, cfg, rc, dir, argc, argv, mesh.get());
  } catch (const AgreedIoError& e) {
    std::fprintf(stderr, "lorabench: rank %d: %s\n", mpi.rank(), e.what());
    return kExitIoError;
  }
  announce(mpi, cfg, rc, *comm, dir);
  if (cfg.run.predict) {
    RunConfig placed = cfg;  // the prediction of the mesh as placed (dp_replicate 0 = one replica per node)
    if (mesh && cfg.parallel.strategy == "hsdp") placed.parallel.dp_replicate = mesh->mesh.dp_replicate;
    record_prediction(mpi, placed, rc, *comm, dir.run.get());
  }
  return train(mpi, cfg, rc, *comm, mesh.get(), dir);
}

}  // namespace lorabench::app
