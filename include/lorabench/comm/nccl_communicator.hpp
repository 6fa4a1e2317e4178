// The NCCL backend (GPU buffers) and the CUDA facts the rest of lorabench needs, without nccl.h or
// cuda_runtime.h: this header is the same in every build. When CMake does not resolve
// LORABENCH_HAVE_NCCL, nccl_unavailable.cpp implements it: nccl_built() is false, cuda_device_count() is
// 0 and the factories throw CommError saying this build has no NCCL.
#pragma once

#include <mpi.h>

#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include "lorabench/comm/communicator.hpp"

namespace lorabench::comm {

// True when this binary contains the NCCL backend (config validation: "nccl was asked for but this build
// has none").
bool nccl_built();
// "2.28.9" (the library actually loaded), or "" when not built.
std::string nccl_version();
// CUDA devices visible to this process: 0 without CUDA support in the build, without a driver or without
// a GPU. Never throws.
int cuda_device_count();

struct NcclOptions {
  // Seconds Work::wait() waits before it declares the collective hung, aborts the NCCL communicator
  // (ncclCommAbort) and throws CommError. 0 = no limit. Default: 600.
  double timeout_s = 600;
};

// Collective over `comm`. Bootstrap: rank 0 creates the NCCL unique id, MPI_Bcast sends its 128 bytes to
// every rank, each rank calls ncclCommInitRank on `cuda_device` (normally Topology's device: local rank
// within the host modulo the visible devices). The communicator owns its CUDA stream; it orders itself
// after work already queued on the legacy default stream (libtorch's default) when a collective is
// issued; each Work records a CUDA event, and wait() blocks the host until the event completed (polling
// ncclCommGetAsyncError; on an error or after options.timeout_s it calls ncclCommAbort and throws
// CommError; the communicator is then unusable). Buffers are device memory on `cuda_device`.
// Throws CommError when the build has no NCCL, `cuda_device` is not a visible device, or NCCL fails.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int cuda_device, const NcclOptions& options = {});

// The bootstrap step alone (testable without a GPU: ncclGetUniqueId needs none). Collective over `comm`:
// `root` creates a unique id and broadcasts it; every rank returns the same 128 bytes.
constexpr size_t kNcclUniqueIdBytes = 128;
using NcclUniqueIdBytes = std::array<unsigned char, kNcclUniqueIdBytes>;
NcclUniqueIdBytes nccl_unique_id_broadcast(MPI_Comm comm, int root = 0);

// Device memory for torch-free users of the NCCL backend (lorabench comm, tests). Each throws CommError
// on failure (or when the build has no CUDA). cuda_free(nullptr) is a no-op and never throws.
void* cuda_malloc(int cuda_device, size_t bytes);
void cuda_free(void* ptr);
void cuda_copy_to_device(void* dst, const void* src, size_t bytes);
void cuda_copy_to_host(void* dst, const void* src, size_t bytes);
void cuda_copy_device_to_device(void* dst, const void* src, size_t bytes);  // synchronous

}  // namespace lorabench::comm
