// lorabench comm: a collective benchmark in the manner of nccl-tests, through lorabench's own
// Communicator, with the raw MPI call and a memcpy of the same size beside it.
//
//   mpirun -n 2 lorabench comm [--ops all_reduce,...] [--min-bytes 1K] [--max-bytes 16M] [--factor 4]
//                              [--dtype fp32] [--warmup 5] [--iters 20] [--check=1] [--backend mpi]
//                              [-o PATH] [--name NAME] [--config FILE.ini]
//
// Flags override the [comm] section of --config. Rank 0 prints the table and writes the run file
// (kind "comm"; docs/hdf5-schema-comm.md). Exit 0 when every checked row was correct, 1 otherwise.
#include <boost/program_options.hpp>
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bootstrap.hpp"
#include "commands.hpp"
#include "lorabench/comm/bench.hpp"
#include "lorabench/comm/control.hpp"
#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/comm/topology.hpp"
#include "lorabench/config/paths.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/log.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/io/run_file.hpp"
#include "lorabench/io/schema.hpp"

namespace lorabench::app {

namespace po = boost::program_options;
using comm::BenchOp;
using comm::BenchOptions;
using comm::BenchRow;

namespace {

std::string flag_of(const std::string& key) {
  std::string f = key;
  for (auto& c : f)
    if (c == '_') c = '-';
  return f;
}

po::options_description flag_table() {
  po::options_description d("lorabench comm [options]   (flags override the [comm] section of --config)");
  d.add_options()("help,h", "this text")("config", po::value<std::string>()->value_name("FILE"),
                                         "ini file with a [comm] section of the keys below (ops, min_bytes, ...)");
  for (const auto& k : comm::bench_keys()) {
    std::string name = flag_of(k.key);
    if (name == "output") name = "output,o";
    std::string help = std::string(k.help) + (*k.default_value ? std::string(" (default ") + k.default_value + ")" : "");
    auto* v = po::value<std::string>()->value_name(std::string(k.key) == "ops" ? "LIST" : "V");
    if (std::string(k.key) == "check") v->implicit_value("1");
    d.add_options()(name.c_str(), v, help.c_str());
  }
  return d;
}

std::string fmt_us(double s) { return strformat("%9.2f", s * 1e6); }
std::string fmt_bw(double b) { return strformat("%7.3f", b); }

std::string bus_formula(BenchOp op) {
  switch (op) {
    case BenchOp::kAllReduce: return "2(n-1)/n";
    case BenchOp::kAllGather:
    case BenchOp::kReduceScatter:
    case BenchOp::kAllToAll: return "(n-1)/n";
    case BenchOp::kBroadcast: return "1";
  }
  return "?";
}

void print_op_header(BenchOp op, int n) {
  std::printf("#\n# %s  (busbw = algbw x %s = %.3f x algbw)\n", comm::bench_op_name(op), bus_formula(op).c_str(),
              comm::bus_factor(op, n));
  std::printf("# %10s %12s %6s %5s %4s | %9s %9s %9s %7s %7s %6s | %9s %7s | %9s %7s\n", "size", "count", "type",
              "redop", "root", "time", "min", "max", "algbw", "busbw", "#wrong", "raw MPI", "busbw", "memcpy", "bw");
  std::printf("# %10s %12s %6s %5s %4s | %9s %9s %9s %7s %7s %6s | %9s %7s | %9s %7s\n", "(B)", "(elements)", "", "",
              "", "(us)", "(us)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(us)", "(GB/s)");
}

void print_row(const BenchRow& r) {
  const bool reduces = r.op == BenchOp::kAllReduce || r.op == BenchOp::kReduceScatter;
  std::string wrong = r.check_passed < 0 ? "N/A" : std::to_string(r.wrong);
  std::printf("  %10zu %12zu %6s %5s %4d | %s %s %s %s %s %6s | %s %s | %s %s\n", r.bytes, r.count,
              comm::dtype_name(r.dtype), reduces ? "sum" : "none", r.root, fmt_us(r.time_avg_s).c_str(),
              fmt_us(r.time_min_s).c_str(), fmt_us(r.time_max_s).c_str(), fmt_bw(r.algbw_GBps).c_str(),
              fmt_bw(r.busbw_GBps).c_str(), wrong.c_str(), fmt_us(r.raw_mpi_time_s).c_str(),
              fmt_bw(r.raw_mpi_busbw_GBps).c_str(), fmt_us(r.memcpy_time_s).c_str(), fmt_bw(r.memcpy_GBps).c_str());
  std::fflush(stdout);
}


std::string mpi_standard_version() {
  int v = 0, sv = 0;
  MPI_Get_version(&v, &sv);
  return strformat("%d.%d", v, sv);
}

std::string hdf5_version() {
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  return strformat("%u.%u.%u", maj, min, rel);
}

std::vector<std::string> distinct_hosts(const comm::Topology& t) {
  std::vector<std::string> hosts;
  for (const auto& r : t.ranks)
    if (std::find(hosts.begin(), hosts.end(), r.host) == hosts.end()) hosts.push_back(r.host);
  return hosts;
}

// Validation: one check per collective (all its sizes), or one failing check when nothing was verified.
std::vector<io::ValidationCheck> validation_checks(const BenchOptions& opt, const std::vector<BenchRow>& rows) {
  std::vector<io::ValidationCheck> checks;
  if (!opt.check) {
    checks.push_back({"comm.results_checked", false, "--check=0: the results were not verified"});
    return checks;
  }
  for (BenchOp op : opt.ops) {
    io::ValidationCheck c;
    c.name = strformat("comm.%s.%s", comm::bench_op_name(op), comm::dtype_name(opt.dtype));
    size_t n = 0, failed = 0;
    std::string first;
    for (const auto& r : rows) {
      if (r.op != op) continue;
      ++n;
      if (r.check_passed != 1) {
        if (failed++ == 0) first = strformat("%zu B: %s", r.bytes, r.check_detail.c_str());
      }
    }
    c.passed = n > 0 && failed == 0;
    c.detail = n == 0 ? "no size was large enough for one element per rank"
               : failed == 0 ? strformat("%zu sizes equal their closed forms on every rank", n)
                             : strformat("%zu of %zu sizes wrong; first: %s", failed, n, first.c_str());
    checks.push_back(c);
  }
  return checks;
}

struct CommArgs {
  BenchOptions opt;
  std::string config_path, config_text;
  std::vector<std::string> given_flags;  // --key=value as given, for the run file
  bool help = false;
};

// Defaults < [comm] of --config < flags. Every problem is reported at once.
CommArgs parse_comm_args(MpiSession& mpi, int argc, char** argv) {
  const po::options_description desc = flag_table();
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(std::string("comm: ") + e.what() + " (lorabench comm --help)");
  }
  CommArgs a;
  if (vm.count("help")) {
    a.help = true;
    if (mpi.rank() == 0) {
      std::printf("Collective benchmark through lorabench's Communicator (nccl-tests style), with the raw MPI\n"
                  "call and a memcpy of the same size for comparison. docs/comm.md.\n\n");
      std::ostringstream ss;
      ss << desc;
      std::printf("%s\n", ss.str().c_str());
    }
    return a;
  }
  if (vm.count("config")) {
    a.config_path = vm["config"].as<std::string>();
    try {
      a.config_text = comm::read_on_root(mpi.world(), a.config_path);
    } catch (const IoError& e) {
      throw ConfigError(std::string("--config: ") + e.what());
    }
    comm::parse_bench_ini(a.config_path, a.config_text, a.opt);
  }
  std::vector<std::string> problems;
  for (const auto& k : comm::bench_keys()) {
    const std::string flag = flag_of(k.key);
    if (!vm.count(flag)) continue;
    const std::string value = vm[flag].as<std::string>();
    a.given_flags.push_back("--" + flag + "=" + value);
    try {
      comm::set_bench_option(a.opt, k.key, value);
    } catch (const std::invalid_argument& e) {
      problems.push_back("--" + flag + ": " + e.what());
    }
  }
  if (!problems.empty()) throw ConfigError("comm: " + join(problems, "\n"));
  comm::validate_bench_options(a.opt);
  return a;
}

// The benchmark's backend through the one bootstrap path: mpi measures host buffers (the CPU), nccl the
// GPUs, auto takes the GPUs with NCCL where the build has both. Never silently another backend.
BootstrapRequest comm_request(const BenchOptions& opt) {
  BootstrapRequest req;
  req.device = opt.backend == "mpi" ? "cpu" : "auto";
  req.backend = opt.backend;
  req.device_key = "comm";
  req.backend_key = "comm: --backend";
  return req;
}

// Collective. The run file: -o as given, else outputs/<name>/run.h5. A name given (--name, name =) is used
// as is and refused when taken; the default name is numbered instead, so the same command twice keeps both
// runs. Rank 0 creates it now (exclusively), so a name clash stops the job before it runs.
std::unique_ptr<io::RunFileWriter> open_comm_run_file(MpiSession& mpi, BenchOptions& opt, const std::string& backend,
                                                      std::string* path) {
  if (opt.name.empty() && opt.output.empty()) {
    std::string name;
    if (mpi.rank() == 0) name = first_free_run_name("outputs", strformat("comm-%s-n%d", backend.c_str(), mpi.size()));
    opt.name = comm::broadcast_string(mpi.world(), name);
  } else if (opt.name.empty()) {
    opt.name = "comm";  // -o names the file; the run keeps the generic name
  }
  *path = opt.output.empty() ? "outputs/" + opt.name + "/run.h5" : opt.output;
  std::unique_ptr<io::RunFileWriter> out;
  std::string error;
  if (mpi.rank() == 0) {
    try {
      std::filesystem::path parent = std::filesystem::path(*path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      if (std::filesystem::exists(*path))
        throw IoError(resolve_path(*path) + " exists (a run file is never overwritten: choose another --name or -o, or "
                      "give neither for a numbered default name)");
      out = std::make_unique<io::RunFileWriter>(*path, schema::kKindComm, opt.name);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!comm::broadcast_status(mpi.world(), error.empty(), error))
    throw ConfigError("comm: run file: " + (mpi.rank() == 0 ? error : *path + " cannot be created"));
  return out;
}

void print_comm_header(MpiSession& mpi, const BenchOptions& opt, const comm::Topology& topo, const std::string& backend,
                       const std::vector<std::pair<std::string, std::string>>& resolved, const std::string& path) {
  const int n = topo.world_size;
  const size_t hosts = distinct_hosts(topo).size();
  std::printf("# lorabench comm: %d rank%s on %zu host%s, backend %s (%s), dtype %s\n", n, n == 1 ? "" : "s", hosts,
              hosts == 1 ? "" : "s", backend.c_str(), MpiSession::library_version().c_str(), comm::dtype_name(opt.dtype));
  std::printf("# sizes %s..%s x%g, warmup %d, iters %d, check %s; run file %s\n", resolved[1].second.c_str(),
              resolved[2].second.c_str(), opt.factor, opt.warmup, opt.iters, opt.check ? "on" : "off", path.c_str());
  std::printf("# time: seconds per call, per-rank mean over the timed calls; avg/min/max over ranks. GB = 1e9 B.\n");
  std::printf("# raw MPI: the blocking MPI call on host memory; memcpy: the same bytes, all ranks at once.\n");
  for (const auto& r : topo.ranks)
    std::printf("#  rank %3d  host %s  local rank %d  device %s  pid %d\n", r.rank, r.host.c_str(), r.local_rank,
                r.device.c_str(), r.pid);
  (void)mpi;
}

// Collective: every collective over its size sweep, rows printed by rank 0 as they come.
std::vector<BenchRow> run_sweep(MpiSession& mpi, comm::Communicator& c, const BenchOptions& opt, int cuda_device) {
  comm::BenchRunner runner(c, mpi.world(), opt, cuda_device);
  std::vector<BenchRow> rows;
  for (BenchOp op : opt.ops) {
    if (mpi.rank() == 0) print_op_header(op, c.size());
    size_t last = 0;
    for (size_t bytes : comm::size_sweep(opt.min_bytes, opt.max_bytes, opt.factor)) {
      comm::BenchLayout l = comm::bench_layout(op, bytes, opt.dtype, c.size());
      if (l.bytes == 0 || l.bytes == last) continue;  // too small for one element per rank, or a repeat
      last = l.bytes;
      rows.push_back(runner.run(op, l));
      if (mpi.rank() == 0) print_row(rows.back());
    }
  }
  return rows;
}

// Rank 0: the per-collective bandwidth lines and the verdict.
void print_comm_summary(const BenchOptions& opt, const std::vector<BenchRow>& rows,
                        const std::vector<io::ValidationCheck>& checks, int64_t wrong, bool valid) {
  std::printf("#\n");
  for (BenchOp op : opt.ops) {
    double sum = 0, peak = 0;
    int k = 0;
    for (const auto& r : rows)
      if (r.op == op) {
        sum += r.busbw_GBps;
        peak = std::max(peak, r.busbw_GBps);
        ++k;
      }
    if (k > 0)
      std::printf("# %-15s avg busbw %7.3f GB/s, peak %7.3f GB/s over %d sizes\n", comm::bench_op_name(op), sum / k,
                  peak, k);
  }
  std::printf("# checks: %s%s\n",
              !opt.check ? "off (--check=0): verdict INVALID (not verified)"
              : wrong == 0 ? "every result equals its closed form"
                           : strformat("%lld wrong elements", static_cast<long long>(wrong)).c_str(),
              opt.check ? (valid ? " -> VALID" : " -> INVALID") : "");
  for (const auto& ch : checks)
    if (!ch.passed && opt.check) std::printf("#   %s: %s\n", ch.name.c_str(), ch.detail.c_str());
}

io::KeyValues comm_provenance(MpiSession& mpi, const comm::Topology& topo, int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  io::KeyValues prov = {
      {"argv", "lorabench " + join(args, " ")},
      {"mpi_library", MpiSession::library_version()},
      {"mpi_version", mpi_standard_version()},
      {"mpi_thread_level", MpiSession::thread_level_name(mpi.thread_level())},
      {"world_size", std::to_string(topo.world_size)},
      {"host", mpi.hostname()},
      {"hosts", join(distinct_hosts(topo), ",")},
      {"cpu_model", sys::cpu_model()},
      {"online_cpus", std::to_string(sys::online_cpus())},
      {"kernel", sys::kernel_release()},
      {"hdf5_version", hdf5_version()},
      {"nccl_version", comm::nccl_built() ? comm::nccl_version() : "not built"},
      {"cuda_devices", std::to_string(device::cuda_visible_devices())},
      {"slurm_job_id", sys::getenv_or("SLURM_JOB_ID", "")},
  };
  for (const auto& [k, v] : sys::relevant_environment()) prov.push_back({"env." + k, v});
  return prov;
}

// Rank 0: the /comm group (the settings, the result table, the per-row check details).
void write_comm_results(io::RunFileWriter& out, const BenchOptions& opt, const std::string& backend,
                        const comm::Topology& topo, const std::vector<BenchRow>& rows) {
  h5::Handle g = h5::require_group(out.file(), schema::kComm);
  h5::write_attr(g, "backend", backend);
  h5::write_attr(g, "world_size", topo.world_size);
  h5::write_attr(g, "hosts", static_cast<int>(distinct_hosts(topo).size()));
  h5::write_attr(g, "dtype", comm::dtype_name(opt.dtype));
  h5::write_attr(g, "warmup", opt.warmup);
  h5::write_attr(g, "iters", opt.iters);
  h5::write_attr(g, "check", opt.check ? 1 : 0);
  h5::write_attr(g, "timing",
                 backend == "nccl" ? "all iters queued on the stream, then one wait (nccl-tests' way)"
                                   : "each call issued and waited for in turn");
  h5::write_strings(out.file(), schema::kCommOpNames, comm::bench_op_names());
  std::vector<std::string> dtype_names;  // indexed by DataType code
  for (auto t : {comm::DataType::kFloat32, comm::DataType::kBFloat16, comm::DataType::kFloat16, comm::DataType::kInt32,
                 comm::DataType::kInt64, comm::DataType::kFloat64})
    dtype_names.emplace_back(comm::dtype_name(t));
  h5::write_strings(out.file(), schema::kCommDtypeNames, dtype_names);
  h5::Table table = h5::Table::create(out.file(), schema::kCommResults, schema::comm_result_table_columns(), 64);
  std::vector<double> data;
  std::vector<std::string> details;
  for (const auto& r : rows) {
    data.insert(data.end(), {double(static_cast<int>(r.op)), double(static_cast<int>(r.dtype)), double(r.bytes),
                             double(r.count), r.time_avg_s, r.time_min_s, r.time_max_s, r.algbw_GBps, r.busbw_GBps,
                             r.raw_mpi_time_s, r.raw_mpi_busbw_GBps, r.memcpy_time_s, r.memcpy_GBps,
                             double(r.check_passed), double(r.wrong)});
    details.push_back(r.check_detail);
  }
  table.append(data, rows.size());
  h5::write_strings(out.file(), schema::kCommCheckDetails, details);
}

// Rank 0: the summary attributes of a comm run (docs/hdf5-schema-comm.md).
void write_comm_summary(io::RunFileWriter& out, const BenchOptions& opt, const std::string& backend, int n,
                        const std::vector<BenchRow>& rows, int64_t wrong) {
  out.write_summary("world_size", static_cast<double>(n));
  out.write_summary("backend", backend);
  out.write_summary("rows", static_cast<double>(rows.size()));
  out.write_summary("wrong_elements", static_cast<double>(wrong));
  double memcpy_peak = 0;
  for (BenchOp op : opt.ops) {
    double peak = 0;
    for (const auto& r : rows)
      if (r.op == op) peak = std::max(peak, r.busbw_GBps);
    out.write_summary(std::string("busbw_peak_GBps_") + comm::bench_op_name(op), peak);
  }
  for (const auto& r : rows) memcpy_peak = std::max(memcpy_peak, r.memcpy_GBps);
  out.write_summary("memcpy_peak_GBps", memcpy_peak);
}

std::vector<io::RankRow> comm_rank_rows(const comm::Topology& topo) {
  std::vector<io::RankRow> rows;
  for (const auto& r : topo.ranks) {
    io::RankRow row;
    row.rank = r.rank;
    row.host = r.host;
    row.local_rank = r.local_rank;
    row.node = r.node;
    row.pid = r.pid;
    row.threads = 1;  // the benchmark runs on one thread per rank
    row.cuda_device = r.device == "cpu" ? -1 : std::atoi(r.device.c_str() + 5);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

int comm_main(MpiSession& mpi, int argc, char** argv) {
  CommArgs args = parse_comm_args(mpi, argc, argv);
  if (args.help) return 0;
  BenchOptions& opt = args.opt;
  const RankContext rc = bootstrap(mpi.world(), comm_request(opt));
  const std::string& backend = rc.choice.backend;  // what runs ("auto" resolved)
  std::string path;
  std::unique_ptr<io::RunFileWriter> out = open_comm_run_file(mpi, opt, backend, &path);
  auto resolved = comm::bench_resolved_values(opt);
  for (auto& kv : resolved) {
    if (kv.first == "backend") kv.second = backend;
    if (kv.first == "output") kv.second = path;
  }
  try {
    std::unique_ptr<comm::Communicator> c = make_data_plane(mpi.world(), rc);
    if (mpi.rank() == 0) print_comm_header(mpi, opt, rc.topo, backend, resolved, path);
    const std::vector<BenchRow> rows = run_sweep(mpi, *c, opt, rc.device().is_cuda() ? rc.device().index() : -1);
    const auto checks = validation_checks(opt, rows);
    bool valid = true;
    int64_t wrong = 0;
    for (const auto& ch : checks) valid = valid && ch.passed;
    for (const auto& r : rows) wrong += r.wrong;
    if (out) {
      print_comm_summary(opt, rows, checks, wrong, valid);
      io::KeyValues config;  // [comm] min_bytes is comm.min_bytes, as [train] lr is train.lr
      for (const auto& [k, v] : resolved) config.push_back({"comm." + k, v});
      out->write_config(config, args.config_text, args.config_path, args.given_flags);
      out->write_provenance(comm_provenance(mpi, rc.topo, argc, argv));
      out->write_ranks(comm_rank_rows(rc.topo));
      write_comm_results(*out, opt, backend, rc.topo, rows);
      write_comm_summary(*out, opt, backend, c->size(), rows, wrong);
      out->write_validation(checks);
      out->set_status(schema::kStatusCompleted);
      std::printf("# wrote %s (verdict %s)\n", path.c_str(), valid ? "VALID" : "INVALID");
    }
    return wrong > 0 ? 1 : 0;  // a checked result was wrong (summed over ranks, as nccl-tests does)
  } catch (const std::exception& e) {
    if (out) {
      try {
        out->set_status(schema::kStatusFailed, e.what());
      } catch (...) {
      }
    }
    throw;
  }
}

}  // namespace lorabench::app
