// The trainer: one driver that owns the loop, the timing and the output. It reads the RunConfig, builds
// the model layout, the strategy and the data source, runs run.repeat trials of run.steps optimizer
// steps, and records every step of every rank in the run file.
//
// One step reads top to bottom:
//   data      build this rank's micro-batches; one allreduce of the loss-token count (the loss is the
//             mean over the global batch's counted tokens, so gradients are pre-scaled and summed)
//   forward + backward per micro-step through the strategy (which reduces gradients as it goes)
//   check     one allreduce of (loss, non-finite flag): every rank sees a NaN in the same step
//   optimizer global gradient norm, clipping, AdamW, LR schedule
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "lorabench/comm/communicator.hpp"
#include "lorabench/comm/mesh.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/comm/topology.hpp"
#include "lorabench/config/run_config.hpp"
#include "lorabench/io/run_file.hpp"

namespace lorabench::train {

struct TrainEnv {
  const RunConfig* cfg = nullptr;
  MPI_Comm world = MPI_COMM_NULL;         // the control plane (metrics, flags)
  comm::Communicator* comm = nullptr;     // the data plane (gradients, weights)
  const comm::MeshComms* mesh = nullptr;  // hsdp: the mesh's communicators, split from `comm`
  device::Device* device = nullptr;       // where this rank's tensors live (nullptr: device::cpu_device())
  const comm::Topology* topo = nullptr;
  io::RunFileWriter* run = nullptr;       // rank 0 only; nullptr elsewhere
  std::string run_dir;                    // outputs/<name>
  std::string resume_from;                // checkpoint to resume from ("" = start at step 0)
};

// Runs the configured training. Returns the process exit code: 0 on success, 3 when training stopped
// on a non-finite loss or gradient (the run file says status = failed and why). Other failures throw.
int run_training(const TrainEnv& env);

}  // namespace lorabench::train
