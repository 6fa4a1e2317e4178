// lorabench doctor: is this machine (and this job's ranks) ready for lorabench? Checks MPI, the ranks'
// layout, a rendezvous with a deadline, the output directory, parallel HDF5, PAPI, CUDA/NCCL, libtorch's
// threads and which BLAS libtorch's fp32 GEMM really calls.
//
//   mpirun -n 2 lorabench doctor [--json] [--output-dir DIR] [--timeout S] [--strict]
//
// Every rank checks itself; rank 0 prints one report (or one JSON object). Exit 1 when a check fails
// (with --strict also on warnings), 0 otherwise. This is the one lorabench TU outside the model code
// that includes ATen (for the thread counts); it never includes <torch/torch.h>.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <hdf5.h>
#include <link.h>
#include <torch/version.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap.hpp"
#include "commands.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/comm/topology.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/log.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/version.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/device/torch_device.hpp"
#include "lorabench/io/h5.hpp"
#include "lorabench/metrics/papi.hpp"
#include "lorabench/model/gemm.hpp"
#include "lorabench/comm/control.hpp"

namespace lorabench::app {

namespace po = boost::program_options;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Severity, in increasing order (the report's status is the worst one).
enum class Status { kOk = 0, kInfo = 1, kWarn = 2, kFail = 3 };
const char* status_name(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kInfo: return "info";
    case Status::kWarn: return "warn";
    case Status::kFail: return "fail";
  }
  return "?";
}

struct Check {
  explicit Check(std::string n = "") : name(std::move(n)) {}
  std::string name;
  Status status = Status::kOk;
  std::string message;
  json details = json::object();
  std::string ranks;  // "" = every rank agrees; else the ranks this entry describes
};

json to_json(const Check& c) {
  json j = {{"name", c.name}, {"status", status_name(c.status)}, {"message", c.message}, {"details", c.details}};
  if (!c.ranks.empty()) j["ranks"] = c.ranks;
  return j;
}

Check from_json(const json& j) {
  Check c;
  c.name = j.at("name").get<std::string>();
  std::string s = j.at("status").get<std::string>();
  c.status = s == "ok" ? Status::kOk : s == "info" ? Status::kInfo : s == "warn" ? Status::kWarn : Status::kFail;
  c.message = j.at("message").get<std::string>();
  c.details = j.at("details");
  return c;
}


// Waits for `req` until `deadline_s`; false on timeout.
bool wait_until(MPI_Request* req, double deadline_s) {
  for (;;) {
    int done = 0;
    LB_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    if (done) return true;
    if (sys::now_s() > deadline_s) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}


// ---- collective checks -------------------------------------------------------------------------------

Check check_mpi(const MpiSession& mpi) {
  Check c{"mpi"};
  int v = 0, sv = 0;
  MPI_Get_version(&v, &sv);
  std::string lib = MpiSession::library_version();
  c.message = strformat("%s (MPI %d.%d), thread level %s", lib.c_str(), v, sv, MpiSession::thread_level_name(mpi.thread_level()).c_str());
  c.details = {{"library", lib}, {"standard", strformat("%d.%d", v, sv)},
               {"thread_level", MpiSession::thread_level_name(mpi.thread_level())}};
  if (mpi.thread_level() < MPI_THREAD_FUNNELED) {
    c.status = Status::kWarn;
    c.message += " (below MPI_THREAD_FUNNELED: threaded code must not call MPI)";
  }
  return c;
}

Check check_ranks(const comm::Topology& t) {
  Check c{"ranks"};
  std::vector<std::string> hosts;
  std::vector<std::vector<int>> per_host;
  json ranks = json::array();
  for (const auto& r : t.ranks) {
    auto it = std::find(hosts.begin(), hosts.end(), r.host);
    if (it == hosts.end()) {
      hosts.push_back(r.host);
      per_host.emplace_back();
      it = hosts.end() - 1;
    }
    per_host[static_cast<size_t>(it - hosts.begin())].push_back(r.rank);
    ranks.push_back({{"rank", r.rank}, {"host", r.host}, {"local_rank", r.local_rank}, {"node", r.node},
                     {"device", r.device}, {"pid", r.pid}});
  }
  std::vector<std::string> parts;
  for (size_t h = 0; h < hosts.size(); ++h)
    parts.push_back(strformat("%s (ranks %s, local ranks 0-%zu)", hosts[h].c_str(), format_rank_list(per_host[h]).c_str(),
                              per_host[h].size() - 1));
  c.message = strformat("%d rank%s on %zu host%s: %s", t.world_size, t.world_size == 1 ? "" : "s", hosts.size(),
                        hosts.size() == 1 ? "" : "s", join(parts, "; ").c_str());
  c.details = {{"world_size", t.world_size}, {"hosts", hosts}, {"ranks", ranks}};
  return c;
}

// Barrier then allreduce, each with a deadline. A rank that times out cannot gather a report: it prints
// the failure itself and aborts the job.
Check check_rendezvous(MPI_Comm world, int rank, int n, double timeout_s) {
  Check c{"rendezvous"};
  const double t0 = sys::now_s();
  MPI_Request req;
  LB_MPI_CHECK(MPI_Ibarrier(world, &req));
  auto give_up = [&](const char* what) {
    log::error(strformat("doctor: rendezvous FAILED: the %s across %d ranks did not complete within %.0f s. A rank "
                         "is missing or stuck, or the network between hosts is blocked (firewall, wrong "
                         "interface: try OMPI_MCA_btl_tcp_if_include / NCCL_SOCKET_IFNAME).",
                         what, n, timeout_s));
    MpiSession::abort(1);
  };
  if (!wait_until(&req, t0 + timeout_s)) give_up("barrier");
  const double t1 = sys::now_s();
  long long mine = rank, sum = -1;
  LB_MPI_CHECK(MPI_Iallreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, world, &req));
  if (!wait_until(&req, t1 + timeout_s)) give_up("allreduce");
  const double t2 = sys::now_s();
  const long long want = static_cast<long long>(n) * (n - 1) / 2;
  c.details = {{"barrier_ms", (t1 - t0) * 1e3}, {"allreduce_ms", (t2 - t1) * 1e3}, {"timeout_s", timeout_s}};
  if (sum != want) {
    c.status = Status::kFail;
    c.message = strformat("allreduce of the ranks returned %lld, expected %lld", sum, want);
  } else {
    c.message = strformat("barrier %.2f ms and allreduce %.2f ms across %d ranks (deadline %.0f s)", (t1 - t0) * 1e3,
                          (t2 - t1) * 1e3, n, timeout_s);
  }
  return c;
}

// Rank 0 writes run files: it must be able to create the directory and a file in it.
Check check_output_dir(const std::string& dir) {
  Check c{"output_dir"};
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    c.status = Status::kFail;
    c.message = dir + ": cannot create: " + ec.message();
    return c;
  }
  std::string probe = (fs::path(dir) / strformat(".lorabench-doctor-%d.tmp", static_cast<int>(getpid()))).string();
  {
    std::ofstream f(probe);
    f << "lorabench doctor\n";
    f.flush();
    if (!f) {
      c.status = Status::kFail;
      c.message = dir + ": not writable (cannot write " + probe + ")";
      return c;
    }
  }
  fs::remove(probe, ec);
  auto space = fs::space(dir, ec);
  double free_gib = ec ? -1 : double(space.available) / double(1ull << 30);
  c.details = {{"path", fs::absolute(dir).string()}, {"free_GiB", free_gib}};
  c.message = strformat("%s is writable (%.1f GiB free)", fs::absolute(dir).c_str(), free_gib);
  if (free_gib >= 0 && free_gib < 1.0) {
    c.status = Status::kWarn;
    c.message += ": less than 1 GiB free for run files and checkpoints";
  }
  return c;
}

// Collective: create, write (one element per rank, collective transfer), close, reopen, read back.
std::string hdf5_probe(const std::string& path, MPI_Comm comm, int rank, int n) {
  h5::silence_errors();
  h5::Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  if (H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) < 0) return "H5Pset_fapl_mpio failed";
  h5::Handle dxpl(H5Pcreate(H5P_DATASET_XFER));
  if (H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE) < 0) return "H5Pset_dxpl_mpio failed";
  hsize_t dims = static_cast<hsize_t>(n), start = static_cast<hsize_t>(rank), one = 1;
  {
    h5::Handle f(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl));
    if (!f.valid()) return "collective H5Fcreate (MPI-IO driver) failed for " + path;
    h5::Handle space(H5Screate_simple(1, &dims, nullptr));
    h5::Handle d(H5Dcreate2(f, "ranks", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!d.valid()) return "H5Dcreate2 failed";
    h5::Handle fspace(H5Dget_space(d));
    H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, nullptr, &one, nullptr);
    h5::Handle mspace(H5Screate_simple(1, &one, nullptr));
    int64_t v = 1000 + rank;
    if (H5Dwrite(d, H5T_NATIVE_INT64, mspace, fspace, dxpl, &v) < 0) return "collective H5Dwrite failed";
  }
  h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
  if (!f.valid()) return "collective H5Fopen failed for " + path;
  h5::Handle d(H5Dopen2(f, "ranks", H5P_DEFAULT));
  std::vector<int64_t> all(static_cast<size_t>(n), -1);
  if (!d.valid() || H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, dxpl, all.data()) < 0)
    return "collective H5Dread failed";
  for (int r = 0; r < n; ++r)
    if (all[static_cast<size_t>(r)] != 1000 + r)
      return strformat("read back %lld for rank %d, expected %d", static_cast<long long>(all[static_cast<size_t>(r)]),
                       r, 1000 + r);
  return "";
}

Check check_hdf5(const std::string& dir, bool dir_ok, MPI_Comm world, int rank, int n) {
  Check c{"hdf5"};
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  const std::string version = strformat("%u.%u.%u", maj, min, rel);
  c.details = {{"version", version}};
  if (!dir_ok) {
    c.status = Status::kInfo;
    c.message = "HDF5 " + version + ": collective test skipped (the output directory is not usable)";
    return c;
  }
  // A fresh directory under the output directory (which is where run files go, and the one that must be
  // shared between hosts for collective HDF5 I/O; /tmp is not shared).
  std::string tmp;
  if (rank == 0) {
    tmp = (fs::path(dir) / strformat(".lorabench-doctor-%d-%lld", static_cast<int>(getpid()),
                                     static_cast<long long>(std::time(nullptr))))
              .string();
    std::error_code ec;
    fs::create_directories(tmp, ec);
  }
  tmp = comm::broadcast_string(world, tmp);
  int visible = fs::is_directory(tmp) ? 1 : 0;
  std::vector<int> vis(static_cast<size_t>(n));
  LB_MPI_CHECK(MPI_Allgather(&visible, 1, MPI_INT, vis.data(), 1, MPI_INT, world));
  std::vector<int> blind;
  for (int r = 0; r < n; ++r)
    if (!vis[static_cast<size_t>(r)]) blind.push_back(r);
  const std::string file = (fs::path(tmp) / "probe.h5").string();
  if (!blind.empty()) {
    c.status = Status::kWarn;
    c.message = "HDF5 " + version + ": " + fs::absolute(dir).string() + " is not visible from rank(s) " +
                format_rank_list(blind) +
                " (not a shared file system): collective HDF5 across hosts cannot work there; run files (written "
                "by rank 0 alone) still do";
  } else {
    std::string err;
    try {
      err = hdf5_probe(file, world, rank, n);
    } catch (const std::exception& e) {
      err = e.what();
    }
    int ok = err.empty() ? 1 : 0, all_ok = 0;
    LB_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world));
    if (all_ok) {
      c.message = strformat("parallel HDF5 %s: %d ranks created, wrote and read back a file collectively (MPI-IO) "
                            "in %s",
                            version.c_str(), n, fs::absolute(dir).c_str());
    } else {
      int me = ok ? n : rank, first = n;
      LB_MPI_CHECK(MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, world));
      std::string msg = comm::broadcast_string(world, err, first);
      c.status = Status::kFail;
      c.message = strformat("parallel HDF5 %s: the collective file test failed on rank %d: %s", version.c_str(),
                            first, msg.c_str());
    }
  }
  LB_MPI_CHECK(MPI_Barrier(world));
  if (rank == 0) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }
  return c;
}

// ---- per-rank checks ---------------------------------------------------------------------------------

Check check_papi() {
  Check c{"papi"};
  if (!metrics::built_with_papi()) {
    c.status = Status::kInfo;
    c.message = "built without PAPI: no hardware or software counters are recorded";
    return c;
  }
  const std::vector<std::string> events = {"PAPI_TOT_INS", "PAPI_TOT_CYC", "perf::TASK-CLOCK", "perf::PAGE-FAULTS",
                                           "perf::CONTEXT-SWITCHES"};
  std::vector<std::string> counted, counted_names, missing;
  json per_event = json::object();
  for (const auto& e : events) {
    try {
      auto src = metrics::open_counter_source({e}, {});
      if (src->counted_events().empty()) {
        std::string why = src->unavailable_events().empty() ? "not counted" : src->unavailable_events()[0].reason;
        missing.push_back(e + " (" + why + ")");
        per_event[e] = {{"counted", false}, {"reason", why}};
        continue;
      }
      int64_t v0 = 0, v1 = 0;
      src->read(&v0);
      std::vector<char> touch(1 << 20);  // some work and a few page faults between the reads
      for (size_t i = 0; i < touch.size(); i += 4096) touch[i] = static_cast<char>(i);
      src->read(&v1);
      const std::string via = src->counted_via().at(0);
      counted.push_back(via == "papi" ? e : e + " (via " + via + ")");
      counted_names.push_back(e);
      per_event[e] = {{"counted", true}, {"via", via}, {"delta", v1 - v0}};
    } catch (const std::exception& ex) {
      missing.push_back(e + " (" + ex.what() + ")");
      per_event[e] = {{"counted", false}, {"reason", ex.what()}};
    }
  }
  std::string paranoid = "?";
  {
    std::ifstream p("/proc/sys/kernel/perf_event_paranoid");
    std::getline(p, paranoid);
  }
  c.details = {{"events", per_event}, {"perf_event_paranoid", trim(paranoid)}};
  c.message = (counted.empty() ? "nothing can be counted" : "countable: " + join(counted, ", ")) +
              (missing.empty() ? "" : "; unavailable: " + join(missing, ", "));
  if (counted.empty()) {
    c.status = Status::kWarn;
    c.message += strformat(" (perf_event_paranoid = %s; 2 or less lets a user count its own processes)",
                           trim(paranoid).c_str());
  } else if (std::find(counted_names.begin(), counted_names.end(), "PAPI_TOT_INS") == counted_names.end()) {
    c.status = Status::kInfo;
    c.message += " (no hardware PMU, typical of VMs: instruction and cycle counts are unavailable)";
  }
  return c;
}

Check check_cuda(const comm::Topology& t) {
  Check c{"cuda"};
  const int devices = device::cuda_visible_devices();
  const bool nccl = comm::nccl_built();
  // One NCCL in the process: the communicator must use the copy libtorch loads (a second copy would keep
  // its own communicators, cache and environment). Linked, not dlopen'ed: the list is complete at start.
  const std::vector<std::string> nccl_libs = sys::loaded_objects("libnccl.");
  c.details = {{"devices", devices}, {"nccl_built", nccl}, {"nccl_version", comm::nccl_version()},
               {"nccl_libraries", nccl_libs}, {"ranks_on_host", t.host_local_size}};
  std::string nccl_text = nccl ? "NCCL " + comm::nccl_version() + " built" : "built without NCCL";
  if (nccl_libs.size() > 1) {
    c.status = Status::kFail;
    c.message = strformat("%zu copies of NCCL are loaded (%s): build against the NCCL libtorch loads (NCCL_HOME)",
                          nccl_libs.size(), join(nccl_libs, ", ").c_str());
  } else if (devices == 0) {
    c.status = Status::kInfo;
    c.message = "no CUDA device visible; " + nccl_text + (nccl_libs.empty() ? "" : " (" + nccl_libs[0] + ")") +
                " (the MPI backend runs on CPUs)";
  } else if (!nccl) {
    c.status = Status::kWarn;
    c.message = strformat("%d CUDA device(s) visible but %s: rebuild with -DLORABENCH_WITH_NCCL=ON against a CUDA "
                          "libtorch to use them",
                          devices, nccl_text.c_str());
  } else if (devices > 1 && t.host_local_size > devices) {
    // Each rank takes the device of its local rank: the ranks beyond the visible devices have none.
    c.status = Status::kWarn;
    c.message = strformat("%d ranks on this host but each sees %d CUDA devices: launch one rank per GPU "
                          "(srun --gpus-per-task=1)", t.host_local_size, devices);
  } else if (devices == 1 && t.host_local_size > 1) {
    // Slurm's per-task binding (a GPU each) or one GPU for all: gpu_collective compares their UUIDs.
    c.message = strformat("each of the %d ranks on this host sees one CUDA device, %s; this rank uses %s (own "
                          "GPUs or a shared one: see gpu_collective)", t.host_local_size, nccl_text.c_str(),
                          t.device.c_str());
  } else {
    c.message = strformat("%d CUDA device(s), %s; this rank uses %s", devices, nccl_text.c_str(), t.device.c_str());
  }
  return c;
}

// Collective: the device each rank trains on with parallel.device = auto (the one bootstrap path, which
// here lets ranks that share a GPU take MPI, staged, and says so), and a 4 MiB all-reduce of device memory
// among all ranks over that backend. Not run (INFO) unless every rank sees a GPU.
Check check_gpu_collective(MPI_Comm world, int n) {
  Check c{"gpu_collective"};
  const int visible = device::cuda_visible_devices();
  int mine = device::cuda_built() && visible > 0 ? 1 : 0, all = 0;
  LB_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, world));
  if (!all) {
    c.status = Status::kInfo;
    c.message = device::cuda_built() ? "not run: a rank sees no CUDA device (training runs on CPUs)"
                                     : "not run: this build has no CUDA path";
    return c;
  }
  BootstrapRequest req;
  req.shared_gpu_takes_mpi = true;
  RankContext rc;
  std::string err;
  try {
    rc = bootstrap(world, req);  // collective; a failure is every rank's
  } catch (const ConfigError& e) {
    c.status = Status::kFail;
    c.message = e.what();
    return c;
  }
  device::Device& dev = rc.device();
  try {
    DataPlaneOptions dp;
    dp.nccl.timeout_s = 60;
    std::unique_ptr<comm::Communicator> cm = make_data_plane(world, rc, dp);
    const double mine_value = double(cm->rank() + 1);
    at::Tensor x = at::full({1 << 20}, mine_value, at::TensorOptions().dtype(at::kFloat).device(device::torch_device(dev)));
    cm->all_reduce(x.data_ptr(), size_t(x.numel()), comm::DataType::kFloat32, comm::ReduceOp::kSum);  // warm-up
    x.fill_(mine_value);
    dev.synchronize();
    const double t0 = sys::now_s();
    cm->all_reduce(x.data_ptr(), size_t(x.numel()), comm::DataType::kFloat32, comm::ReduceOp::kSum);
    dev.synchronize();
    const double ms = (sys::now_s() - t0) * 1e3;
    const bool right = x.eq(double(n) * (n + 1) / 2).all().item<bool>();
    c.details = {{"device", dev.str()}, {"backend", rc.choice.backend}, {"allreduce_ms", ms}};
    if (!right) throw Error("the all-reduce returned wrong values on " + dev.str());
    c.message = strformat("%s on %s: 4 MiB all-reduce across %d ranks in %.2f ms, correct", rc.choice.backend.c_str(),
                          dev.str().c_str(), n, ms);
    if (!rc.shared_gpus.empty()) {  // works staged, but NCCL (the default on GPUs) would refuse these ranks
      const auto [a, b] = rc.shared_gpus.front();
      c.status = Status::kWarn;
      c.message += strformat("; ranks %d and %d share a GPU, so training needs parallel.backend = mpi (NCCL "
                             "needs one GPU per rank: srun --gpus-per-task=1)", a, b);
    }
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (!comm::agree_status(world, err.empty(), err)) {
    c.status = Status::kFail;
    c.message = err;
  }
  return c;
}

Check check_libtorch(const comm::Topology& t) {
  Check c{"libtorch"};
  const int intra = at::get_num_threads();
  const int inter = at::get_num_interop_threads();
  const int cpus = sys::online_cpus();
  c.details = {{"version", TORCH_VERSION}, {"intra_op_threads", intra}, {"inter_op_threads", inter},
               {"online_cpus", cpus}, {"ranks_on_host", t.host_local_size}};
  c.message = strformat("libtorch %s: %d intra-op thread%s per rank, %d inter-op", TORCH_VERSION, intra,
                        intra == 1 ? "" : "s", inter);
  if (intra * t.host_local_size > cpus) {
    c.status = Status::kWarn;
    c.message += strformat(": %d ranks x %d threads oversubscribe the %d CPUs of this host (set "
                           "parallel.threads_per_rank / OMP_NUM_THREADS)",
                           t.host_local_size, intra, cpus);
  }
  return c;
}

// Which library libtorch's fp32 GEMM calls: the one that provides sgemm_ in the global scope (on Debian
// libblas.so.3 is an alternative; OpenBLAS when libopenblas0-pthread is installed).
Check check_blas(const comm::Topology& t) {
  Check c{"blas"};
  const sys::BlasInfo b = sys::blas_info();
  json loaded = json::array();
  for (const auto& [name, resolved] : b.loaded) loaded.push_back({{"name", name}, {"resolved", resolved}});
  const std::string provider = b.provider, provider_real = b.resolved, kind = b.kind;
  const std::string threads = sys::getenv_or("OPENBLAS_NUM_THREADS", "");
  c.details = {{"sgemm_provider", provider}, {"resolved", provider_real}, {"kind", kind}, {"loaded", loaded},
               {"OPENBLAS_NUM_THREADS", threads}, {"bf16_gemm_cpu", model::bf16_gemm_engine()}};
  if (provider.empty()) {
    c.status = Status::kWarn;
    c.message = "no library provides sgemm_: libtorch uses its own fallback GEMM (slow) or a BLAS this check "
                "cannot see";
    return c;
  }
  c.message = kind + ": sgemm_ from " + provider + (provider_real != provider ? " -> " + provider_real : "");
  if (kind == "reference BLAS") {
    c.status = Status::kWarn;
    c.message = "REFERENCE BLAS: libtorch's fp32 GEMM runs on the unoptimised netlib BLAS (" + provider_real +
                "), ~5 GFLOP/s instead of ~140 per core: every fp32 benchmark is wrong by ~30x. Install OpenBLAS "
                "(apt-get install libopenblas0-pthread) or select it: update-alternatives --config "
                "libblas.so.3-x86_64-linux-gnu";
    log::warn("doctor: " + c.message);
  } else if (kind == "unknown" || kind == "FlexiBLAS") {
    c.status = Status::kWarn;
    c.message += " (could not tell whether this BLAS is optimised)";
  } else if (kind == "OpenBLAS" && threads.empty() && t.host_local_size == 1) {
    c.status = Status::kInfo;
    c.message += "; OPENBLAS_NUM_THREADS is unset (OpenBLAS then starts one thread per CPU and ignores "
                 "torch::set_num_threads: set it explicitly)";
  } else if (kind == "OpenBLAS" && threads.empty()) {
    c.status = Status::kWarn;
    c.message += strformat("; OPENBLAS_NUM_THREADS is unset: each of the %d ranks on this host may start %d "
                           "threads (oversubscription); set it explicitly",
                           t.host_local_size, sys::online_cpus());
  } else if (!threads.empty()) {
    c.message += ", OPENBLAS_NUM_THREADS=" + threads;
  }
  if (model::cpu_bf16_gemm() == model::CpuBf16Gemm::kViaFp32)
    c.message += "; bf16 GEMMs: " + model::bf16_gemm_engine();
  return c;
}

// Per-rank checks become one entry when every rank agrees, else one entry per group of ranks.
std::vector<Check> merge_rank_checks(const std::vector<std::string>& per_rank_json) {
  std::vector<std::vector<Check>> per_rank;
  for (const auto& s : per_rank_json) {
    std::vector<Check> v;
    for (const auto& j : json::parse(s)) v.push_back(from_json(j));
    per_rank.push_back(v);
  }
  std::vector<Check> out;
  if (per_rank.empty()) return out;
  for (size_t i = 0; i < per_rank[0].size(); ++i) {
    std::vector<std::pair<Check, std::vector<int>>> groups;
    for (size_t r = 0; r < per_rank.size(); ++r) {
      const Check& c = per_rank[r].at(i);
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
        return g.first.status == c.status && g.first.message == c.message;
      });
      if (it == groups.end()) {
        groups.push_back({c, {static_cast<int>(r)}});
      } else {
        it->second.push_back(static_cast<int>(r));
      }
    }
    for (auto& [c, ranks] : groups) {
      Check x = c;
      if (groups.size() > 1) x.ranks = format_rank_list(ranks);
      out.push_back(x);
    }
  }
  return out;
}

struct DoctorArgs {
  bool help = false, as_json = false, strict = false;
  std::string dir;
  double timeout_s = 30;
};

DoctorArgs parse_doctor_args(MpiSession& mpi, int argc, char** argv) {
  po::options_description desc("lorabench doctor [options]");
  desc.add_options()("help,h", "this text")("json", "print one JSON object instead of the report")(
      "output-dir", po::value<std::string>()->default_value("outputs"), "where run files go (checked for writing)")(
      "timeout", po::value<double>()->default_value(30.0), "seconds the rendezvous may take")(
      "strict", "exit 1 on warnings too");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(std::string("doctor: ") + e.what() + " (lorabench doctor --help)");
  }
  DoctorArgs a;
  a.help = vm.count("help") > 0;
  if (a.help && mpi.rank() == 0) {
    std::ostringstream ss;
    ss << desc;
    std::printf("Checks that this machine and job can run lorabench (docs/comm.md).\n\n%s\n", ss.str().c_str());
  }
  a.as_json = vm.count("json") > 0;
  a.strict = vm.count("strict") > 0;
  a.dir = vm["output-dir"].as<std::string>();
  a.timeout_s = vm["timeout"].as<double>();
  if (!(a.timeout_s > 0)) throw ConfigError("doctor: --timeout must be > 0");
  return a;
}

// The directories that the output_dir check creates only to try them: removed again when empty, so that a
// doctor run leaves no outputs/ behind (rank 0).
class TriedDirs {
 public:
  explicit TriedDirs(const std::string& dir) {
    std::error_code ec;
    for (fs::path p = fs::absolute(dir, ec); !ec && !p.empty() && !fs::exists(p, ec) && p != p.parent_path();
         p = p.parent_path())
      missing_.push_back(p);
  }
  ~TriedDirs() {
    std::error_code ec;
    for (const auto& p : missing_)  // innermost first; one that is not empty stays, with its parents
      if (!fs::remove(p, ec)) break;
  }
  TriedDirs(const TriedDirs&) = delete;
  TriedDirs& operator=(const TriedDirs&) = delete;

 private:
  std::vector<fs::path> missing_;
};

// Collective: every check; rank 0 gets them all (the per-rank checks merged), the others none.
std::vector<Check> run_checks(MpiSession& mpi, const DoctorArgs& a) {
  const int rank = mpi.rank(), n = mpi.size();
  MPI_Comm world = mpi.world();
  // Collective checks, in dependency order (the rendezvous first: the rest needs every rank).
  std::vector<Check> checks;
  checks.push_back(check_mpi(mpi));
  checks.push_back(check_rendezvous(world, rank, n, a.timeout_s));
  const comm::Topology topo = comm::discover_topology(world, 0, device::cuda_visible_devices());
  checks.push_back(check_ranks(topo));
  Check out_dir;
  std::optional<TriedDirs> tried;
  if (rank == 0) tried.emplace(a.dir);
  if (rank == 0) out_dir = check_output_dir(a.dir);
  out_dir = from_json(json::parse(comm::broadcast_string(world, rank == 0 ? to_json(out_dir).dump() : "")));
  checks.push_back(out_dir);
  checks.push_back(check_hdf5(a.dir, out_dir.status != Status::kFail, world, rank, n));
  checks.push_back(check_gpu_collective(world, n));
  // Per-rank checks, merged on rank 0.
  json mine = json::array();
  for (const auto& c : {check_papi(), check_cuda(topo), check_libtorch(topo), check_blas(topo)}) mine.push_back(to_json(c));
  const std::vector<std::string> all = comm::allgather_strings(world, mine.dump());
  if (rank != 0) return {};
  for (auto& c : merge_rank_checks(all)) checks.push_back(c);
  return checks;
}

// Rank 0: the report (text or JSON); returns the exit code (1 on a failure, or a warning with --strict).
int report(const std::vector<Check>& checks, const DoctorArgs& a, int n) {
  Status worst = Status::kOk;
  int warnings = 0, failures = 0;
  for (const auto& c : checks) {
    worst = std::max(worst, c.status);
    warnings += c.status == Status::kWarn;
    failures += c.status == Status::kFail;
  }
  const int code = failures > 0 || (a.strict && warnings > 0) ? 1 : 0;
  if (a.as_json) {
    json j = {{"lorabench_doctor", 1}, {"version", program_version()}, {"commit", git_commit()},
              {"libtorch_version", TORCH_VERSION}, {"ok", code == 0}, {"status", status_name(worst)}, {"world_size", n},
              {"failures", failures}, {"warnings", warnings}, {"checks", json::array()}};
    for (const auto& c : checks) j["checks"].push_back(to_json(c));
    std::printf("%s\n", j.dump(2).c_str());
    return code;
  }
  std::printf("lorabench doctor (%d rank%s)\n", n, n == 1 ? "" : "s");
  for (const auto& c : checks) {
    std::string tag = c.status == Status::kOk ? "OK" : c.status == Status::kInfo ? "INFO"
                                                      : c.status == Status::kWarn ? "WARN" : "FAIL";
    std::string who = c.ranks.empty() ? "" : " [ranks " + c.ranks + "]";
    std::printf("  %-5s %-11s %s%s\n", tag.c_str(), c.name.c_str(), c.message.c_str(), who.c_str());
  }
  if (failures > 0) {
    std::printf("lorabench doctor: %d check%s FAILED, %d warning%s\n", failures, failures == 1 ? "" : "s", warnings,
                warnings == 1 ? "" : "s");
  } else {
    std::printf("lorabench doctor: ready%s\n",
                warnings ? strformat(" (%d warning%s%s)", warnings, warnings == 1 ? "" : "s",
                                     a.strict ? ": --strict makes them fatal" : "")
                               .c_str()
                         : "");
  }
  return code;
}

}  // namespace

int doctor_main(MpiSession& mpi, int argc, char** argv) {
  const DoctorArgs args = parse_doctor_args(mpi, argc, argv);
  if (args.help) return 0;
  const std::vector<Check> checks = run_checks(mpi, args);
  if (mpi.rank() != 0) return 0;  // rank 0 decides the exit code; mpirun reports the worst one
  const int code = report(checks, args, mpi.size());
  std::fflush(stdout);
  return code;
}

}  // namespace lorabench::app
