// Where a rank runs and how it talks to the others, decided in one place for every subcommand that needs
// it (the training run, `lorabench plan`, `comm` and `doctor`). docs/gpu.md, "Which device".
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lorabench/comm/communicator.hpp"
#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/comm/topology.hpp"
#include "lorabench/config/run_config.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/train/plan.hpp"

namespace lorabench::app {

// What a subcommand asks for.
struct BootstrapRequest {
  std::string device = "auto";   // auto | cpu | cuda
  std::string backend = "auto";  // auto | mpi | nccl
  // The settings' names in errors (device::ChoiceInputs); `origin` (the input file) prefixes them.
  std::string device_key = "parallel.device", backend_key = "parallel.backend", origin;
  int emulate_nodes = 0;  // parallel.emulate_nodes
  // Ranks of one host that share a GPU cannot use NCCL. false (training, plan, comm): backend nccl or auto
  // there is a ConfigError naming backend_key, never silently another backend. true (doctor, which reports
  // it): auto takes MPI, staged through host memory, and says so in choice.reason.
  bool shared_gpu_takes_mpi = false;
};

// parallel.device, parallel.backend and parallel.emulate_nodes of an input file.
BootstrapRequest bootstrap_request(const RunConfig& cfg);

struct RankContext {
  comm::Topology topo;                  // the job's ranks, hosts, and the device each rank uses
  device::Choice choice;                // this rank's device kind, index, backend, and why
  std::unique_ptr<device::Device> gpu;  // the CUDA device when choice.kind is CUDA
  int ranks_on_device = 1;              // ranks of this host on this rank's device (its host's ranks on CPU)
  std::vector<std::pair<int, int>> shared_gpus;  // CUDA: pairs of ranks of one host on one GPU

  device::Device& device() const { return gpu ? *gpu : device::cpu_device(); }
};

// Collective. Every rank resolves its device (device::choose on its place in the host), opens it, and the
// ranks agree: one kind and backend for all (else a ConfigError on every rank naming the key), GPUs shared
// only with the mpi backend (unless shared_gpu_takes_mpi).
RankContext bootstrap(MPI_Comm world, const BootstrapRequest& req);

// Collective. The data plane of the chosen device and backend: NCCL on the GPUs, or MPI (staging device
// buffers through pinned host memory on a GPU). delay_s > 0 delays every collective (fault.comm_delay_ms).
struct DataPlaneOptions {
  double delay_s = 0;
  comm::NcclOptions nccl;
};
std::unique_ptr<comm::Communicator> make_data_plane(MPI_Comm world, const RankContext& rc,
                                                    const DataPlaneOptions& o = {});

// The planner's view of the ranks' device: on a GPU, each rank's memory is its GPU's (this one's available
// memory, the node's visible GPUs, shared by ranks only with the mpi backend); on CPU, nothing to set.
void plan_on_device(train::PlanOptions& o, const RankContext& rc);

}  // namespace lorabench::app
