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
#include "bootstrap.hpp"
#include "lorabench/comm/topology.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/log.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/metrics/memory.hpp"
#include "lorabench/model/qwen2.hpp"
#include "lorabench/comm/control.hpp"
#include "lorabench/train/plan.hpp"
#include "lorabench/train/run_specs.hpp"

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

// Collective: the bus bandwidths the prediction takes: from a comm run file, measured on this job's ranks
// with the run's communicator, or estimated (one CPU process; one GPU process cannot know it).
train::CommBandwidth plan_bandwidth(MpiSession& mpi, const RankContext& rc, const std::string& comm_file) {
  train::CommBandwidth bw;
  if (!comm_file.empty()) {
    bw = train::bandwidth_from_file(comm_file);
  } else if (mpi.size() > 1) {
    auto comm = make_data_plane(mpi.world(), rc);
    bw = train::measure_bandwidth(*comm, mpi.world(), rc.device());
  } else if (rc.device().is_cuda()) {
    bw.source = "not known: one process cannot measure the GPUs' interconnect; give --comm RUN.h5 (`lorabench "
                "comm` on the GPUs) or run plan under srun/mpirun with one rank per GPU";
  } else {
    bw = train::estimate_bandwidth();
  }
  return bw;
}

struct PlanArgs {
  std::string input, comm_file, comm_inter_file, out_file, tsv_file, strategies;
  std::vector<std::string> sets, worlds;
  int ranks_per_node = 0;
  bool help = false, no_probe = false;
};

void print_plan_help() {
  std::printf(
      "usage: lorabench plan INPUT.ini [-n N ...] [--strategy LIST] [--ranks-per-node K] [--comm RUN.h5]\n"
      "                      [--comm-inter RUN.h5] [-o FILE] [--no-probe] [--set section.key=value ...]\n\n"
      "Predicts per-rank memory (model state, activations, strategy buffers; RSS against the memory of this\n"
      "node, or of its GPU when parallel.device resolves to cuda) and step time (a probe of 1- and 2-layer\n"
      "models on that device, plus collectives over the bus bandwidth) for each strategy and world size,\n"
      "before anything is allocated at full size. docs/plan.md.\n"
      "  -n N            world sizes (repeatable or comma-separated; default 1,2,4)\n"
      "  --strategy L    strategies (default: single for 1 rank, ddp,zero1,zero2,fsdp for more, hsdp\n"
      "                  when --ranks-per-node puts the ranks on several nodes, and tpT+ddp / tpT+single\n"
      "                  (parallel.tp = T, groups inside a node) where the model splits into T parts);\n"
      "                  with several, each world size's fitting rows are ranked by predicted step time\n"
      "  --ranks-per-node K  ranks sharing this node's CPUs and memory (default: all of them; on GPUs, one\n"
      "                  per GPU of this node with NCCL, all of them sharing its GPUs with the mpi backend)\n"
      "  --comm RUN.h5   bus bandwidths from a `lorabench comm` run file (default: measured on the ranks\n"
      "                  of this job under mpirun, else estimated from memcpy)\n"
      "  --comm-inter RUN.h5  bus bandwidths between nodes (a `lorabench comm` run with one rank per node):\n"
      "                  the collectives of rows on several nodes that cross them use it (default: --comm's)\n"
      "  -o FILE         also write the table to FILE\n"
      "  --tsv FILE      the rows as tab-separated values (bytes and seconds) for scripts\n"
      "  --no-probe      memory lower bound only, no time (instant)\n");
}

PlanArgs parse_plan_args(int argc, char** argv) {
  PlanArgs a;
  po::options_description desc;
  desc.add_options()("help,h", po::bool_switch(&a.help))("set", po::value(&a.sets)->composing())(
      "n,n", po::value(&a.worlds)->composing())("strategy", po::value(&a.strategies))(
      "ranks-per-node", po::value(&a.ranks_per_node))("comm", po::value(&a.comm_file))(
      "comm-inter", po::value(&a.comm_inter_file))(
      "output,o", po::value(&a.out_file))("tsv", po::value(&a.tsv_file))("no-probe", po::bool_switch(&a.no_probe));
  parse_input_command_line(argc, argv, desc, &a.input, "plan", "lorabench plan --help");
  return a;
}

train::PlanOptions plan_options(const PlanArgs& a) {
  train::PlanOptions o;
  o.worlds = a.worlds.empty() ? std::vector<int>{1, 2, 4} : parse_worlds(a.worlds);
  if (!a.strategies.empty()) o.strategies = split(a.strategies, ',');
  for (const auto& name : o.strategies) {
    std::string s;
    try {
      s = train::split_tp_strategy(name).first;
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("plan: --strategy: ") + e.what());
    }
    if (s != "single" && s != "ddp" && s != "zero1" && s != "zero2" && s != "fsdp" && s != "hsdp")
      throw ConfigError("plan: --strategy: unknown strategy \"" + name +
                        "\" (single, ddp, zero1, zero2, fsdp, hsdp; tpT+single, tpT+ddp for tensor parallelism)");
  }
  o.ranks_per_node = a.ranks_per_node;
  o.probe = !a.no_probe;
  return o;
}

void write_tsv(const std::string& path, const std::vector<train::PlanRow>& rows, const std::string& device) {
  std::ofstream f(path);
  f << "strategy\tworld\tranks_per_node\tmodel_state_bytes\tactivation_bytes\tstrategy_extra_bytes\t"
       "tensor_peak_bytes\trss_bytes\tavailable_bytes\tfits\tstep_s\tcompute_s\tcomm_s\ttokens_per_s\t"
       "reserved_bytes\tranks_per_gpu\tdevice\n";
  for (const auto& r : rows)
    f << r.strategy << '\t' << r.world << '\t' << r.ranks_per_node << '\t' << r.model_state << '\t' << r.activations
      << '\t' << r.strategy_extra << '\t' << r.tensor_peak << '\t' << r.rss << '\t' << r.available << '\t'
      << (r.fits ? 1 : 0) << '\t' << r.step_s << '\t' << r.compute_s << '\t' << r.comm_s << '\t' << r.tokens_per_s
      << '\t' << r.reserved << '\t' << r.ranks_per_gpu << '\t' << device << '\n';
  if (!f) throw IoError(path + ": cannot write");
}

// Rank 0: the probe, the rows and their table, on stdout and in the files asked for.
void predict_and_write(const RunConfig& cfg, const train::PlanOptions& o, const train::CommBandwidth& bw,
                       device::Device& dev, const PlanArgs& a) {
  train::ProbeResult probe;
  if (o.probe) probe = train::probe_model(cfg, dev);
  const bool probed = o.probe && probe.skipped.empty();
  if (!probe.skipped.empty()) log::warn(probe.skipped + ": the table has the activations' lower bound and no times");
  const auto rows = train::make_plan(cfg, o, probed ? &probe : nullptr, bw);
  const std::string md = train::plan_markdown(cfg, rows, probed ? &probe : nullptr, bw, o);
  std::printf("%s", md.c_str());
  if (!a.tsv_file.empty()) write_tsv(a.tsv_file, rows, o.probe ? probe.device : dev.str());
  if (!a.out_file.empty()) {
    std::ofstream f(a.out_file);
    f << md;
    if (!f) throw IoError(a.out_file + ": cannot write");
  }
}

}  // namespace

int plan_main(MpiSession& mpi, int argc, char** argv) {
  const PlanArgs args = parse_plan_args(argc, argv);
  if (args.help || args.input.empty()) {
    if (mpi.rank() == 0) print_plan_help();
    return args.input.empty() && !args.help ? 2 : 0;
  }
  const RunConfig cfg = read_run_config(mpi, args.input, args.sets);
  train::check_config_fits_model(cfg, train::model_shape_of(cfg));
  at::set_num_threads(cfg.parallel.threads_per_rank);
  metrics::install_memory_counter();
  train::PlanOptions o = plan_options(args);
  o.node_cpus = train::node_cpus(mpi.world());
  // The device the run would take (parallel.device; docs/gpu.md): on a GPU the probe runs there, a rank's
  // memory is its GPU's, and the bandwidth is measured with the run's own communicator on device buffers.
  const RankContext rc = bootstrap(mpi.world(), bootstrap_request(cfg));
  plan_on_device(o, rc);
  const train::CommBandwidth bw = plan_bandwidth(mpi, rc, args.comm_file);
  if (!args.comm_inter_file.empty()) {
    try {
      o.inter_node = train::bandwidth_from_file(args.comm_inter_file);
    } catch (const ConfigError& e) {  // bandwidth_from_file names --comm
      std::string msg = e.what();
      if (msg.rfind("--comm: ", 0) == 0) msg = "--comm-inter: " + msg.substr(8);
      throw ConfigError("plan: " + msg);
    }
  }
  if (mpi.rank() != 0) {
    comm::quiet_barrier(mpi.world());  // sleep while rank 0 probes
    return 0;
  }
  struct Release {  // the other ranks leave when rank 0 is done, also when it throws
    MPI_Comm w;
    ~Release() { comm::quiet_barrier(w); }
  } release{mpi.world()};
  predict_and_write(cfg, o, bw, rc.device(), args);
  return 0;
}

}  // namespace lorabench::app
