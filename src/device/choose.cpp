// parallel.device and parallel.backend resolved for one rank (torch-free logic, unit-tested on CPU).
#include <algorithm>
#include <set>
#include <string>

#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/device/device.hpp"

namespace lorabench::device {

const char* kind_name(Kind k) { return k == Kind::kCuda ? "cuda" : "cpu"; }

Choice choose(const ChoiceInputs& in) {
  Choice c;
  const std::string visible = std::to_string(in.visible) + " CUDA device" + (in.visible == 1 ? "" : "s");
  if (in.requested == "cpu") {
    c.kind = Kind::kCpu;
    c.reason = in.device_key + " = cpu";
  } else if (in.requested == "cuda" || in.requested == "auto") {
    const bool want = in.requested == "cuda";
    if (!in.cuda_built) {
      if (want)
        throw ConfigError(in.device_key + ": cuda was asked for but this build has no CUDA path (build against a "
                          "CUDA libtorch with the CUDA toolkit, see docs/build.md, or use cpu)");
      c.reason = "auto: this build has no CUDA path";
    } else if (in.visible == 0) {
      if (want)
        throw ConfigError(in.device_key + ": cuda was asked for but this process sees no CUDA device (check "
                          "nvidia-smi, CUDA_VISIBLE_DEVICES and the job's --gpus / --gpus-per-task)");
      c.reason = "auto: no CUDA device visible";
    } else {
      c.kind = Kind::kCuda;
    }
  } else {
    throw ConfigError(in.device_key + ": unknown value '" + in.requested + "' (auto, cpu or cuda)");
  }

  if (c.kind == Kind::kCuda) {
    if (in.visible >= in.local_size) {
      c.index = in.local_rank;
      c.reason = "local rank " + std::to_string(in.local_rank) + " of " + std::to_string(in.local_size) +
                 " on its host, " + visible + " visible";
    } else if (in.visible == 1) {
      // Each task bound to its own GPU (srun --gpus-per-task=1), or several ranks on one GPU: the UUID
      // exchange (shared_gpus) tells which.
      c.index = 0;
      c.reason = "the one CUDA device this process sees (local rank " + std::to_string(in.local_rank) + " of " +
                 std::to_string(in.local_size) + ")";
    } else {
      throw ConfigError(in.device_key + ": " + std::to_string(in.local_size) + " ranks on this host but it sees " +
                        visible + ": launch one rank per GPU (srun --ntasks-per-node=" + std::to_string(in.visible) +
                        " --gpus-per-task=1), or make each rank see one GPU");
    }
  }

  if (in.backend == "nccl") {
    if (c.kind != Kind::kCuda)
      throw ConfigError(in.backend_key + ": nccl needs CUDA devices, but this rank runs on the CPU (" + c.reason +
                        "); use mpi" + (in.device_key.empty() ? "" : " or " + in.device_key + " = cuda"));
    if (!in.nccl_built)
      throw ConfigError(in.backend_key + ": nccl was asked for but this build has no NCCL backend (rebuild with "
                        "-DLORABENCH_WITH_NCCL=ON against a CUDA libtorch, or use mpi)");
    c.backend = "nccl";
  } else if (in.backend == "mpi") {
    c.backend = "mpi";
  } else if (in.backend == "auto") {
    c.backend = c.kind == Kind::kCuda && in.nccl_built ? "nccl" : "mpi";
  } else {
    throw ConfigError(in.backend_key + ": unknown value '" + in.backend + "' (auto, mpi or nccl)");
  }
  return c;
}

ChoiceInputs this_process_inputs(const std::string& requested, const std::string& backend, int local_rank,
                                 int local_size) {
  ChoiceInputs in;
  in.requested = requested;
  in.backend = backend;
  in.cuda_built = cuda_built();
  in.nccl_built = comm::nccl_built();
  in.visible = cuda_visible_devices();
  in.local_rank = local_rank;
  in.local_size = local_size;
  return in;
}

std::vector<std::pair<int, int>> shared_gpus(const std::vector<std::string>& uuids,
                                             const std::vector<std::string>& hosts) {
  std::vector<std::pair<int, int>> out;
  for (size_t i = 0; i < uuids.size(); ++i) {
    if (uuids[i].empty()) continue;
    for (size_t j = i + 1; j < uuids.size(); ++j)
      if (uuids[j] == uuids[i] && hosts[j] == hosts[i]) out.emplace_back(int(i), int(j));
  }
  return out;
}

int gpus_on_host(const std::vector<std::string>& uuids, const std::vector<std::string>& hosts,
                 const std::string& host, int visible) {
  std::set<std::string> mine;
  for (size_t i = 0; i < uuids.size() && i < hosts.size(); ++i)
    if (hosts[i] == host && !uuids[i].empty()) mine.insert(uuids[i]);
  return std::max(visible, static_cast<int>(mine.size()));
}

}  // namespace lorabench::device
