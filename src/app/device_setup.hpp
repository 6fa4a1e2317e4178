// The device and communicator of a rank (parallel.device, parallel.backend), chosen the same way by the
// training run and by `lorabench plan`. docs/gpu.md.
#pragma once

#include <mpi.h>

#include <memory>

#include "lorabench/comm/communicator.hpp"
#include "lorabench/comm/topology.hpp"
#include "lorabench/config/run_config.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/train/plan.hpp"

namespace lorabench::app {

// Collective: this rank's device (parallel.device, parallel.backend; docs/gpu.md), the CUDA device opened
// in `gpu` when it is one. Every rank gets the same kind and backend, and two ranks of one host share a GPU
// only with the mpi backend (NCCL refuses two ranks of a communicator on one device); anything else is a
// ConfigError on every rank, naming the key. `sharing` is how many ranks of this host use this rank's device
// (its host's ranks on CPU, the ranks with its GPU's UUID on CUDA).
device::Choice choose_device(MPI_Comm world, const RunConfig& cfg, const comm::Topology& topo,
                             std::unique_ptr<device::Device>& gpu, int& sharing);

// The data plane: NCCL on the GPU, or MPI (staging device buffers through pinned host memory on a GPU).
std::unique_ptr<comm::Communicator> make_data_plane(MPI_Comm world, const device::Choice& choice, device::Device& dev);

// The planner's view of the ranks' device: on a GPU, each rank's memory is its GPU's (this one's available
// memory, the node's visible GPUs, shared by ranks only with the mpi backend); on CPU, nothing to set.
void plan_on_device(train::PlanOptions& o, const device::Choice& choice, const device::Device& dev);

}  // namespace lorabench::app
