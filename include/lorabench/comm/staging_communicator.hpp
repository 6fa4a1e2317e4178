// A decorator that lets a host-memory backend (MPI) take device buffers: each collective copies its
// device inputs into pinned host buffers, runs on those, and copies the results back to the device when
// the collective completes (in wait(), or in the test() that first sees it done). Host pointers pass
// through unstaged. This is how several ranks share one GPU (NCCL refuses two ranks of a communicator on
// one device) and how the strategies run on CUDA tensors with parallel.backend = mpi. Torch-free: the
// device side (what is device memory, the copies, pinned allocations) comes in a DeviceCopier, which the
// device layer implements with the CUDA runtime (device/device.hpp: make_staging_communicator) and the
// unit tests with host memory that pretends to be a device.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "lorabench/comm/communicator.hpp"

namespace lorabench::comm {

struct DeviceCopier {
  std::function<bool(const void*)> is_device;                          // true for device memory
  std::function<void(void* host, const void* dev, size_t bytes)> to_host;  // complete when it returns
  std::function<void(void* dev, const void* host, size_t bytes)> to_device;
  std::function<void*(size_t bytes)> alloc_host;  // pinned host memory (plain malloc is fine for tests)
  std::function<void(void*)> free_host;
};

// Takes ownership of `inner` (a host-memory backend). device_buffers() is true; backend_name() is inner's.
// Staging buffers are pooled by size and reused. REQUIRES: every member of `copier` set.
std::unique_ptr<Communicator> make_staging_communicator(std::unique_ptr<Communicator> inner, DeviceCopier copier);

}  // namespace lorabench::comm
