// lorabench plan INPUT.ini [-n N ...] [--strategy LIST] [--ranks-per-node K] [--comm RUN.h5] [-o FILE]
//                [--no-probe] [--set section.key=value ...]
// Per-rank memory and step time of the configuration under each strategy and world size, before any run
// (docs/plan.md). Under mpirun with several ranks the collectives' bandwidth is measured on them.
#include <ATen/Parallel.h>
#include <boost/program_options.hpp>

#include <cstdio>
#include <fstream>
#include <vector>

#include "commands.hpp"
#include "device_setup.hpp"
#include "lorabench/comm/topology.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/metrics/memory.hpp"
#include "lorabench/model/qwen2.hpp"
#include "lorabench/train/control.hpp"
#include "lorabench/train/plan.hpp"

namespace po = boost::program_options;

namespace lorabench::app {

namespace {

std::vector<int> parse_worlds(const std::vector<std::string>& args) {
  std::vector<int> out;
  for (const auto& a : args) {
    for (const auto& item : split(a, ',')) {
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || v < 1 || v > 65536)
        throw ConfigError("plan: -n expects rank counts >= 1 (e.g. -n 1 -n 2 or -n 1,2,4), got \"" + item + "\"");
      out.push_back(int(v));
    }
  }
  return out;
}

}  // namespace

int plan_main(MpiSession& mpi, int argc, char** argv) {
  std::string input, comm_file, out_file, tsv_file, strategies;
  std::vector<std::string> sets, worlds;
  int ranks_per_node = 0;
  bool help = false, no_probe = false;
  po::options_description desc;
  desc.add_options()("help,h", po::bool_switch(&help))("set", po::value(&sets)->composing())(
      "n,n", po::value(&worlds)->composing())("strategy", po::value(&strategies))(
      "ranks-per-node", po::value(&ranks_per_node))("comm", po::value(&comm_file))(
      "output,o", po::value(&out_file))("tsv", po::value(&tsv_file))("no-probe", po::bool_switch(&no_probe));
  parse_input_command_line(argc, argv, desc, &input, "plan", "lorabench plan --help");
  if (help || input.empty()) {
    if (mpi.rank() == 0)
      std::printf(
          "usage: lorabench plan INPUT.ini [-n N ...] [--strategy LIST] [--ranks-per-node K] [--comm RUN.h5]\n"
          "                      [-o FILE] [--no-probe] [--set section.key=value ...]\n\n"
          "Predicts per-rank memory (model state, activations, strategy buffers; RSS against the memory of this\n"
          "node, or of its GPU when parallel.device resolves to cuda) and step time (a probe of 1- and 2-layer\n"
          "models on that device, plus collectives over the bus bandwidth) for each strategy and world size,\n"
          "before anything is allocated at full size. docs/plan.md.\n"
          "  -n N            world sizes (repeatable or comma-separated; default 1,2,4)\n"
          "  --strategy L    strategies (default: single for 1 rank, ddp,zero1,zero2,fsdp for more)\n"
          "  --ranks-per-node K  ranks sharing this node's CPUs and memory (default: all of them; on GPUs, one\n"
          "                  per GPU of this node with NCCL, all of them sharing its GPUs with the mpi backend)\n"
          "  --comm RUN.h5   bus bandwidths from a `lorabench comm` run file (default: measured on the ranks\n"
          "                  of this job under mpirun, else estimated from memcpy)\n"
          "  -o FILE         also write the table to FILE\n"
          "  --tsv FILE      the rows as tab-separated values (bytes and seconds) for scripts\n"
          "  --no-probe      memory lower bound only, no time (instant)\n");
    return input.empty() && !help ? 2 : 0;
  }
  RunConfig cfg = read_run_config(mpi, input, sets);
  at::set_num_threads(cfg.parallel.threads_per_rank);
  metrics::install_memory_counter();
  // The probe runs the kernels the run would.
  model::set_fused_cpu_kernels(cfg.model.fused_kernels);
  model::set_cuda_attention(model::parse_cuda_attention(cfg.model.cuda_attention));
  model::set_cpu_attention(model::parse_cpu_attention(cfg.model.cpu_attention));

  train::PlanOptions o;
  o.worlds = worlds.empty() ? std::vector<int>{1, 2, 4} : parse_worlds(worlds);
  if (!strategies.empty()) o.strategies = split(strategies, ',');
  for (const auto& s : o.strategies)
    if (s != "single" && s != "ddp" && s != "zero1" && s != "zero2" && s != "fsdp")
      throw ConfigError("plan: --strategy: unknown strategy \"" + s + "\" (single, ddp, zero1, zero2, fsdp)");
  o.ranks_per_node = ranks_per_node;
  o.probe = !no_probe;

  o.node_cpus = train::node_cpus(mpi.world());
  // The device the run would take (parallel.device; docs/gpu.md): on a GPU the probe runs there, a rank's
  // memory is its GPU's, and the bandwidth is measured with the run's own communicator on device buffers.
  comm::Topology topo = comm::discover_topology(mpi.world(), cfg.parallel.emulate_nodes, 0);
  std::unique_ptr<device::Device> gpu;
  int sharing = 1;
  const device::Choice choice = choose_device(mpi.world(), cfg, topo, gpu, sharing);
  device::Device& dev = gpu ? *gpu : device::cpu_device();
  plan_on_device(o, choice, dev);
  train::CommBandwidth bw;
  if (!comm_file.empty()) {
    bw = train::bandwidth_from_file(comm_file);
  } else if (mpi.size() > 1) {
    auto comm = make_data_plane(mpi.world(), choice, dev);
    bw = train::measure_bandwidth(*comm, mpi.world(), dev);
  } else if (dev.is_cuda()) {
    bw.source = "not known: one process cannot measure the GPUs' interconnect; give --comm RUN.h5 (`lorabench "
                "comm` on the GPUs) or run plan under srun/mpirun with one rank per GPU";
  } else {
    bw = train::estimate_bandwidth();
  }
  if (mpi.rank() != 0) {
    train::quiet_barrier(mpi.world());  // sleep while rank 0 probes
    return 0;
  }
  struct Release {  // the other ranks leave when rank 0 is done, also when it throws
    MPI_Comm w;
    ~Release() { train::quiet_barrier(w); }
  } release{mpi.world()};
  train::ProbeResult probe;
  if (o.probe) probe = train::probe_model(cfg, dev);
  const auto rows = train::make_plan(cfg, o, o.probe ? &probe : nullptr, bw);
  const std::string md = train::plan_markdown(cfg, rows, o.probe ? &probe : nullptr, bw, o);
  std::printf("%s", md.c_str());
  if (!tsv_file.empty()) {
    std::ofstream f(tsv_file);
    f << "strategy\tworld\tranks_per_node\tmodel_state_bytes\tactivation_bytes\tstrategy_extra_bytes\t"
         "tensor_peak_bytes\trss_bytes\tavailable_bytes\tfits\tstep_s\tcompute_s\tcomm_s\ttokens_per_s\t"
         "reserved_bytes\tranks_per_gpu\tdevice\n";
    for (const auto& r : rows)
      f << r.strategy << '\t' << r.world << '\t' << r.ranks_per_node << '\t' << r.model_state << '\t' << r.activations
        << '\t' << r.strategy_extra << '\t' << r.tensor_peak << '\t' << r.rss << '\t' << r.available << '\t'
        << (r.fits ? 1 : 0) << '\t' << r.step_s << '\t' << r.compute_s << '\t' << r.comm_s << '\t' << r.tokens_per_s
        << '\t' << r.reserved << '\t' << r.ranks_per_gpu << '\t' << (o.probe ? probe.device : dev.str()) << '\n';
    if (!f) throw IoError(tsv_file + ": cannot write");
  }
  if (!out_file.empty()) {
    std::ofstream f(out_file);
    f << md;
    if (!f) throw IoError(out_file + ": cannot write");
  }
  return 0;
}

}  // namespace lorabench::app
