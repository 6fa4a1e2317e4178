// The NCCL entry points of a build without NCCL (CMake did not resolve LORABENCH_HAVE_NCCL).
#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/core/error.hpp"

namespace lorabench::comm {

namespace {
[[noreturn]] void no_nccl(const char* what) {
  throw CommError(std::string(what) +
                  ": this build of lorabench has no NCCL backend (configure with -DLORABENCH_WITH_NCCL=ON where the "
                  "CUDA toolkit and NCCL are installed)");
}
}  // namespace

bool nccl_built() { return false; }
std::string nccl_version() { return ""; }
int cuda_device_count() { return 0; }

NcclUniqueIdBytes nccl_unique_id_broadcast(MPI_Comm, int) { no_nccl("nccl_unique_id_broadcast"); }
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, int, const NcclOptions&) {
  no_nccl("make_nccl_communicator");
}
void* cuda_malloc(int, size_t) { no_nccl("cuda_malloc"); }
void cuda_free(void*) {}
void cuda_copy_to_device(void*, const void*, size_t) { no_nccl("cuda_copy_to_device"); }
void cuda_copy_to_host(void*, const void*, size_t) { no_nccl("cuda_copy_to_host"); }
void cuda_copy_device_to_device(void*, const void*, size_t) { no_nccl("cuda_copy_device_to_device"); }

}  // namespace lorabench::comm
