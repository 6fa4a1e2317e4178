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
#include "device_setup.hpp"
#include "lorabench/comm/delayed_communicator.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/comm/nccl_communicator.hpp"
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
#include "lorabench/train/checkpoint.hpp"
#include "lorabench/train/control.hpp"
#include "lorabench/train/plan.hpp"
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
  std::string text, err;
  bool ok = true;
  if (mpi.rank() == 0) {
    try {
      text = read_file(input);
    } catch (const IoError& e) {
      ok = false;
      err = input + ": cannot read the input file (" + e.what() + ")";
    }
  }
  if (!train::broadcast_status(mpi.world(), ok, err)) throw ConfigError(err);
  text = train::broadcast_string(mpi.world(), text);
  return parse_run_config(input, text, sets);
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

int train_main(MpiSession& mpi, int argc, char** argv) {
  std::string input;
  std::vector<std::string> sets;
  bool help = false, print_config = false;
  po::options_description desc;
  desc.add_options()("help,h", po::bool_switch(&help))("set", po::value(&sets)->composing())(
      "print-config", po::bool_switch(&print_config));
  parse_input_command_line(argc, argv, desc, &input, "command line", "lorabench --help");
  if (help) {
    if (mpi.rank() == 0) print_train_help();
    return 0;
  }
  if (input.empty()) throw ConfigError("no input file (usage: lorabench INPUT.ini [--set section.key=value ...])");

  // SIGTERM / SIGUSR1 from here on: finish the step, checkpoint, exit 75 (core/stop_request.hpp).
  stop::install_handlers();
  RunConfig cfg = read_run_config(mpi, input, sets);
  std::string err;
  bool ok = true;
  // run.name unset: a default name that says what ran, numbered when taken (chosen below, on rank 0).
  const bool default_name = cfg.run.name.empty();
  if (default_name) cfg.run.name = default_run_name(input, cfg.parallel.strategy, mpi.size());

  ValidationContext vctx;
  vctx.world_size = mpi.size();
  vctx.nccl_built = comm::nccl_built();
  vctx.cuda_available = device::cuda_visible_devices() > 0;
  vctx.cuda_built = device::cuda_built();
  vctx.cpu_blocked_attention = model::cpu_blocked_attention_available();
  validate_run_config(cfg, vctx);
  train::validate_checkpoint_config(cfg);
  if (print_config) {
    if (mpi.rank() == 0) std::printf("%s", effective_config_table(cfg).c_str());
    return 0;
  }
  log::set_quiet(cfg.run.quiet);
  metrics::install_memory_counter();
  set_threads(cfg.parallel.threads_per_rank);
  model::set_fused_cpu_kernels(cfg.model.fused_kernels);
  model::set_cuda_attention(model::parse_cuda_attention(cfg.model.cuda_attention));
  model::set_cpu_attention(model::parse_cpu_attention(cfg.model.cpu_attention));

  comm::Topology topo = comm::discover_topology(mpi.world(), cfg.parallel.emulate_nodes, 0);
  std::unique_ptr<device::Device> gpu;
  int ranks_on_device = 1;
  const device::Choice choice = choose_device(mpi.world(), cfg, topo, gpu, ranks_on_device);
  device::Device& dev = gpu ? *gpu : device::cpu_device();
  if (dev.is_cuda()) topo = comm::discover_topology(mpi.world(), cfg.parallel.emulate_nodes, device::cuda_visible_devices());
  std::unique_ptr<comm::Communicator> comm = make_data_plane(mpi.world(), choice, dev);
  if (cfg.fault.comm_delay_ms > 0) comm = comm::make_delayed_communicator(std::move(comm), cfg.fault.comm_delay_ms / 1000.0);

  // The files the input names exist (checked before anything is written), and the run's name: with
  // run.name unset, the first free of NAME, NAME-2, ... for a new run and the latest of them for
  // checkpoint.resume = latest, so that running one command twice never meets the first run's directory.
  ok = true;
  err.clear();
  if (mpi.rank() == 0) {
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
    if (!problems.empty()) {
      ok = false;
      err = cfg.input_path + ": " + join(problems, "\n  ");
    } else {  // host memory on CPU, the GPU's memory on CUDA; docs/plan.md
      try {
        train::check_fits_or_throw(cfg, mpi.size(), ranks_on_device, dev.memory_available(),
                                   dev.is_cuda() ? "GPU " + dev.str() : std::string("this node"));
      } catch (const ConfigError& e) {
        ok = false;
        err = cfg.input_path + ": " + e.what();
      }
    }
    if (ok && default_name) {
      const bool continues = cfg.checkpoint.resume == "latest" || cfg.checkpoint.resume == "auto";
      cfg.run.name = continues ? latest_run_name(cfg.run.output_dir, cfg.run.name)
                                                       : first_free_run_name(cfg.run.output_dir, cfg.run.name);
    }
  }
  if (!train::broadcast_status(mpi.world(), ok, err)) throw ConfigError(err);
  cfg.run.name = train::broadcast_string(mpi.world(), cfg.run.name);

  // The run directory: rank 0 creates it; an existing run is never silently overwritten. Resuming
  // (checkpoint.resume) continues in an existing directory: its checkpoints stay and the previous run
  // file is kept as run.<k>.h5 beside the new run.h5 (docs/checkpoints.md).
  const fs::path run_dir = fs::path(cfg.run.output_dir) / cfg.run.name;
  const fs::path run_path = run_dir / "run.h5";
  const train::ResumePoint resume = train::select_resume_checkpoint(cfg, run_dir.string(), mpi.size(), mpi.world());
  std::string previous_run_file;
  std::unique_ptr<io::RunFileWriter> run;
  ok = true;
  err.clear();
  if (mpi.rank() == 0) {
    try {
      const bool resuming = !resume.path.empty();
      // checkpoint.resume = auto without a checkpoint continues the directory too (a requeued job that
      // was killed before its first checkpoint): its run file is kept as run.<k>.h5, as on a resume.
      if (fs::exists(run_dir) && (resuming || cfg.checkpoint.resume == "auto") && !cfg.run.overwrite) {
        for (int k = 1; fs::exists(run_path); ++k) {
          const fs::path old = run_dir / ("run." + std::to_string(k) + ".h5");
          if (fs::exists(old)) continue;
          fs::rename(run_path, old);
          previous_run_file = old.string();
        }
      } else if (fs::exists(run_dir)) {
        const std::string ck = resuming ? fs::weakly_canonical(resume.path).string() : "";
        if (!cfg.run.overwrite) {
          ok = false;
          err = "run.name: " + resolve_path(run_dir.string()) +
                " already exists (choose another run.name, leave run.name unset for a numbered default name, or "
                "--set run.overwrite=true to replace it)";
        } else if (resuming && starts_with(ck, fs::weakly_canonical(run_dir).string() + "/")) {
          ok = false;
          err = "run.overwrite: true would delete " + resume.path + ", which checkpoint.resume resumes from";
        } else {
          fs::remove_all(run_dir);
        }
      }
      if (ok) {
        fs::create_directories(run_dir);
        run = std::make_unique<io::RunFileWriter>(run_path.string(), schema::kKindTrain, cfg.run.name);
      }
    } catch (const std::exception& e) {
      ok = false;
      err = describe_path("run.output_dir", cfg.run.output_dir) + ": " + e.what();
    }
  }
  if (!train::broadcast_status(mpi.world(), ok, err)) throw ConfigError(err);

  // The first writes of the run file; a failure (a full disk) stops every rank together (exit 4).
  try {
    train::agreed_writes(mpi.world(), [&] {
      if (!run) return;
      run->write_config(resolved_values(cfg), cfg.input_text, cfg.input_path, cfg.overrides);
      io::KeyValues prov = provenance(mpi, topo, cfg, argc, argv);
      for (const auto& kv : dev.describe()) prov.push_back(kv);
      if (dev.is_cuda())
        prov.emplace_back("papi_scope", "the host thread of each rank (launches, staging copies), not the GPU's kernels");
      prov.emplace_back("device_choice", choice.reason);
      prov.emplace_back("backend", choice.backend);
      prov.emplace_back("attention_kernel", model::attention_kernel(dev.is_cuda(), cfg.model.dtype == "bf16"));
      if (!resume.path.empty()) {
        prov.emplace_back("resumed_from", resume.path);
        prov.emplace_back("resumed_at_step", std::to_string(resume.step));
        prov.emplace_back("previous_run_file", previous_run_file);
      }
      run->write_provenance(prov);
      std::vector<io::RankRow> rows;
      for (const auto& r : topo.ranks)
        rows.push_back({r.rank, r.host, r.local_rank, r.node, r.pid, cfg.parallel.threads_per_rank,
                        starts_with(r.device, "cuda:") ? std::stoi(r.device.substr(5)) : -1});
      run->write_ranks(rows);
      run->flush();
    });
  } catch (const AgreedIoError& e) {
    std::fprintf(stderr, "lorabench: rank %d: %s\n", mpi.rank(), e.what());
    return kExitIoError;
  }

  log::info(strformat("lorabench %s (%s)  %s", program_version(), git_commit(), input.c_str()));
  log::info("run directory: " + run_dir.string());
  if (cfg.model.dtype == "fp32" && sys::blas_info().kind == "reference BLAS")
    log::warn("the reference BLAS is loaded: fp32 GEMMs run ~30x slower than with OpenBLAS "
              "(apt-get install libopenblas0-pthread); the timings of this run are not representative");
  log::info("effective configuration:\n" + effective_config_table(cfg));
  // One line per rank, in rank order.
  for (int r = 0; r < topo.world_size; ++r) {
    if (r == topo.rank)
      log::any(comm::describe_rank(topo) + strformat(" threads %d backend %s%s", at::get_num_threads(),
                                                     comm->backend_name().c_str(),
                                                     dev.is_cuda() && choice.backend == "mpi" ? " (staged)" : ""));
    LB_MPI_CHECK(MPI_Barrier(mpi.world()));
  }

  // The planner's prediction for this very run, recorded beside what it measures (lorabench plan): on
  // its device (a GPU run probes on its GPU), with the bandwidth of its own communicator.
  if (cfg.run.predict) {
    const int cpus = train::node_cpus(mpi.world());
    const train::CommBandwidth bw =
        mpi.size() > 1 ? train::measure_bandwidth(*comm, mpi.world(), dev) : train::estimate_bandwidth();
    if (run) {
      const double t0 = sys::now_s();
      const train::ProbeResult probe = train::probe_model(cfg, dev);
      train::PlanOptions po;
      po.worlds = {mpi.size()};
      po.strategies = {cfg.parallel.strategy};
      po.ranks_per_node = topo.host_local_size;
      po.node_cpus = cpus;
      plan_on_device(po, choice, dev);
      const auto rows = train::make_plan(cfg, po, &probe, bw);
      if (!rows.empty()) {
        const train::PlanRow& p = rows.front();
        run->write_summary("predicted_tensor_peak_bytes", double(p.tensor_peak));
        run->write_summary("predicted_activation_bytes", double(p.activations));
        if (dev.is_cuda())
          run->write_summary("predicted_reserved_bytes", double(p.reserved));
        else
          run->write_summary("predicted_rss_bytes", double(p.rss));
        run->write_summary("predicted_step_time_s", p.step_s);
        run->write_summary("predicted_compute_s", p.compute_s);
        run->write_summary("predicted_comm_s", p.comm_s);
        run->write_summary("predicted_tokens_per_s", p.tokens_per_s);
        run->write_summary("predicted_how", probe.note + "; bandwidth " + bw.source);
        log::info(strformat("prediction (lorabench plan, %.1f s): tensor peak %s per rank, step %.3f s", sys::now_s() - t0,
                            format_bytes(double(p.tensor_peak)).c_str(), p.step_s));
      }
      run->flush();
    }
    train::quiet_barrier(mpi.world());  // the other ranks sleep while rank 0 probes
  }

  train::TrainEnv env;
  env.cfg = &cfg;
  env.world = mpi.world();
  env.comm = comm.get();
  env.device = &dev;
  env.topo = &topo;
  env.run = run.get();
  env.run_dir = run_dir.string();
  env.resume_from = resume.path;
  try {
    return train::run_training(env);
  } catch (const std::exception& e) {
    // Rank 0 marks its run file failed before main() aborts the job.
    if (run) run->set_status(schema::kStatusFailed, e.what());
    throw;
  }
}

}  // namespace lorabench::app
