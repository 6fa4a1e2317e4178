#include "bootstrap.hpp"

#include "lorabench/comm/control.hpp"
#include "lorabench/comm/delayed_communicator.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/core/error.hpp"

namespace lorabench::app {

namespace {

std::string prefixed(const BootstrapRequest& req, const std::string& what) {
  return req.origin.empty() ? what : req.origin + ": " + what;
}

// Collective: this rank's choice and, on CUDA, its opened device; a failure on any rank is every rank's.
device::Choice choose_and_open(MPI_Comm world, const BootstrapRequest& req, const comm::Topology& topo,
                               std::unique_ptr<device::Device>& gpu) {
  device::ChoiceInputs in = device::this_process_inputs(req.device, req.backend, topo.host_local_rank,
                                                        topo.host_local_size);
  in.device_key = req.device_key;
  in.backend_key = req.backend_key;
  device::Choice ch;
  std::string err;
  try {
    ch = device::choose(in);
    if (ch.kind == device::Kind::kCuda) gpu = device::make_device(ch);
  } catch (const Error& e) {
    err = e.what();
  }
  if (!comm::agree_status(world, err.empty(), err)) throw ConfigError(prefixed(req, err));
  return ch;
}

// Every rank runs on one kind of device with one backend: nodes with and without GPUs in one job must say so.
void require_one_kind(MPI_Comm world, const BootstrapRequest& req, const device::Choice& ch) {
  const std::vector<std::string> kinds = comm::allgather_strings(world, device::kind_name(ch.kind) + (":" + ch.backend));
  for (size_t r = 1; r < kinds.size(); ++r)
    if (kinds[r] != kinds[0])
      throw ConfigError(prefixed(req, req.device_key + ": rank 0 runs on " + kinds[0] + " but rank " + std::to_string(r) +
                                          " on " + kinds[r] + " (device:backend; nodes with and without GPUs in one "
                                          "job): set " + req.device_key + " and " + req.backend_key + " explicitly"));
}

// CUDA: which ranks share this rank's GPU (by UUID), the host's GPUs, and NCCL only with a GPU per rank.
void place_on_gpus(MPI_Comm world, const BootstrapRequest& req, RankContext& rc) {
  std::vector<std::string> hosts;
  for (const auto& r : rc.topo.ranks) hosts.push_back(r.host);
  const std::vector<std::string> uuids = comm::allgather_strings(world, rc.gpu->uuid());
  const size_t me = size_t(rc.topo.rank);
  rc.ranks_on_device = 0;
  for (size_t r = 0; r < uuids.size(); ++r) rc.ranks_on_device += hosts[r] == hosts[me] && uuids[r] == uuids[me] ? 1 : 0;
  rc.choice.gpus_on_host = device::gpus_on_host(uuids, hosts, hosts[me], device::cuda_visible_devices());
  rc.shared_gpus = device::shared_gpus(uuids, hosts);
  if (rc.shared_gpus.empty() || rc.choice.backend == "mpi") return;
  const auto [a, b] = rc.shared_gpus.front();
  if (req.shared_gpu_takes_mpi && req.backend == "auto") {
    rc.choice.backend = "mpi";
    rc.choice.reason += "; backend auto: mpi, staged, since ranks " + std::to_string(a) + " and " + std::to_string(b) +
                        " share a GPU";
    return;
  }
  throw ConfigError(prefixed(req, req.backend_key + ": ranks " + std::to_string(a) + " and " + std::to_string(b) + " on " +
                                      hosts[size_t(a)] + " share " + uuids[size_t(a)] +
                                      ", and NCCL needs one GPU per rank: launch one rank per GPU (srun "
                                      "--gpus-per-task=1), or set " + req.backend_key +
                                      " = mpi to share the GPU (buffers staged through host memory)"));
}

}  // namespace

BootstrapRequest bootstrap_request(const RunConfig& cfg) {
  BootstrapRequest req;
  req.device = cfg.parallel.device;
  req.backend = cfg.parallel.backend;
  req.origin = cfg.input_path;
  req.emulate_nodes = cfg.parallel.emulate_nodes;
  return req;
}

RankContext bootstrap(MPI_Comm world, const BootstrapRequest& req) {
  RankContext rc;
  rc.topo = comm::discover_topology(world, req.emulate_nodes, 0);
  rc.choice = choose_and_open(world, req, rc.topo, rc.gpu);
  require_one_kind(world, req, rc.choice);
  rc.ranks_on_device = rc.topo.host_local_size;
  if (rc.choice.kind != device::Kind::kCuda) return rc;
  // Again with the devices: each rank's row names the GPU it uses.
  rc.topo = comm::discover_topology(world, req.emulate_nodes, device::cuda_visible_devices());
  place_on_gpus(world, req, rc);
  return rc;
}

std::unique_ptr<comm::Communicator> make_data_plane(MPI_Comm world, const RankContext& rc, const DataPlaneOptions& o) {
  std::unique_ptr<comm::Communicator> c =
      rc.choice.backend == "nccl" ? comm::make_nccl_communicator(world, rc.device().index(), o.nccl)
                                  : device::make_staging_communicator(comm::make_mpi_communicator(world), rc.device());
  if (o.delay_s > 0) c = comm::make_delayed_communicator(std::move(c), o.delay_s);
  return c;
}

void plan_on_device(train::PlanOptions& o, const RankContext& rc) {
  const device::Device& dev = rc.device();
  if (!dev.is_cuda()) return;
  o.gpu = true;
  o.gpus_per_node = rc.choice.gpus_on_host;  // the host's GPUs: under --gpus-per-task=1 each rank sees one
  o.share_gpus = rc.choice.backend == "mpi";
  o.gpu_available = dev.memory_available();  // the whole GPU's: make_plan splits it over its ranks
  o.gpu_name = dev.str();
  for (const auto& [k, v] : dev.describe())
    if (k == "gpu_name") o.gpu_name += " (" + v + ")";
}

}  // namespace lorabench::app
