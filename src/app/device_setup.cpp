// The device and communicator of a rank, shared by training and the planner (docs/gpu.md).
#include "device_setup.hpp"

#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/train/control.hpp"

namespace lorabench::app {

// Collective: this rank's device (parallel.device, parallel.backend; docs/gpu.md), the CUDA device opened
// in `gpu` when it is one. Every rank gets the same kind and backend, and two ranks of one host share a GPU
// only with the mpi backend (NCCL refuses two ranks of a communicator on one device); anything else is a
// ConfigError on every rank, naming the key. `sharing` is how many ranks of this host use this rank's device
// (its host's ranks on CPU, the ranks with its GPU's UUID on CUDA).
device::Choice choose_device(MPI_Comm world, const RunConfig& cfg, const comm::Topology& topo,
                             std::unique_ptr<device::Device>& gpu, int& sharing) {
  const device::ChoiceInputs in = device::this_process_inputs(cfg.parallel.device, cfg.parallel.backend,
                                                               topo.host_local_rank, topo.host_local_size);
  device::Choice ch;
  bool ok = true;
  std::string err;
  try {
    ch = device::choose(in);
    if (ch.kind == device::Kind::kCuda) gpu = device::make_device(ch);
  } catch (const Error& e) {
    ok = false;
    err = e.what();
  }
  if (!train::agree_status(world, ok, err)) throw ConfigError(cfg.input_path + ": " + err);

  const std::vector<std::string> kinds = train::allgather_strings(world, device::kind_name(ch.kind) + (":" + ch.backend));
  for (size_t r = 1; r < kinds.size(); ++r)
    if (kinds[r] != kinds[0])
      throw ConfigError(cfg.input_path + ": parallel.device: rank 0 runs on " + kinds[0] + " but rank " +
                        std::to_string(r) + " on " + kinds[r] + " (device:backend; nodes with and without GPUs in "
                        "one job): set parallel.device and parallel.backend explicitly");
  sharing = topo.host_local_size;
  if (ch.kind == device::Kind::kCuda) {
    std::vector<std::string> hosts;
    for (const auto& r : topo.ranks) hosts.push_back(r.host);
    const std::vector<std::string> uuids = train::allgather_strings(world, gpu->uuid());
    const size_t me = size_t(topo.rank);
    sharing = 0;
    for (size_t r = 0; r < uuids.size(); ++r)
      sharing += hosts[r] == hosts[me] && uuids[r] == uuids[me] ? 1 : 0;
    ch.gpus_on_host = device::gpus_on_host(uuids, hosts, hosts[me], device::cuda_visible_devices());
    const auto shared = device::shared_gpus(uuids, hosts);
    if (!shared.empty() && ch.backend != "mpi") {
      const auto [a, b] = shared.front();
      throw ConfigError(cfg.input_path + ": parallel.backend: ranks " + std::to_string(a) + " and " +
                        std::to_string(b) + " on " + hosts[size_t(a)] + " share " + uuids[size_t(a)] +
                        ", and NCCL needs one GPU per rank: launch one rank per GPU (srun --gpus-per-task=1), "
                        "or set parallel.backend = mpi to share the GPU (buffers staged through host memory)");
    }
  }
  return ch;
}

std::unique_ptr<comm::Communicator> make_data_plane(MPI_Comm world, const device::Choice& choice, device::Device& dev) {
  return choice.backend == "nccl" ? comm::make_nccl_communicator(world, dev.index())
                                  : device::make_staging_communicator(comm::make_mpi_communicator(world), dev);
}

void plan_on_device(train::PlanOptions& o, const device::Choice& choice, const device::Device& dev) {
  if (!dev.is_cuda()) return;
  o.gpu = true;
  o.gpus_per_node = choice.gpus_on_host;  // the host's GPUs: under --gpus-per-task=1 each rank sees one
  o.share_gpus = choice.backend == "mpi";
  o.gpu_available = dev.memory_available();  // the whole GPU's: make_plan splits it over its ranks
  o.gpu_name = dev.str();
  for (const auto& [k, v] : dev.describe())
    if (k == "gpu_name") o.gpu_name += " (" + v + ")";
}

}  // namespace lorabench::app
