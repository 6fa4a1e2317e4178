// What the machine and the process look like: CPU model, memory, environment, clocks.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lorabench::sys {

std::string cpu_model();               // /proc/cpuinfo "model name", or "unknown"
std::vector<std::string> cpu_flags();  // /proc/cpuinfo "flags" of the first CPU
int online_cpus();
// Memory this process could still get, bytes: /proc/meminfo MemAvailable, lowered to the cgroup's
// remaining memory.max (v2) or memory.limit_in_bytes (v1) when one is set; -1 when unknown.
int64_t memory_available_bytes();
// CPUs this process may run on (its affinity mask), at least 1.
int usable_cpus();
std::string kernel_release();          // uname -r
std::string utc_now_iso8601();         // "2026-11-30T11:02:03Z"

// Resident set size of this process, bytes. peak_rss() is VmHWM since start or since the last
// reset_peak_rss() (which writes 5 to /proc/self/clear_refs; returns false where that is refused).
int64_t current_rss();
int64_t peak_rss();
bool reset_peak_rss();

// Environment variables relevant to provenance (threads, MPI and its MCA/UCX network settings, Slurm, NCCL,
// CUDA, BLAS), sorted.
std::vector<std::pair<std::string, std::string>> relevant_environment();
std::string getenv_or(const char* name, const std::string& fallback);

// Monotonic wall clock in seconds (steady_clock).
double now_s();

// Training allocates and frees the same activation sizes every step. glibc returns blocks above its mmap
// threshold to the kernel on free, and the next step page-faults them in again (measured: ~15% of a 0.5B
// step in the kernel). This keeps freed memory in the heap instead: lorabench's main sets it, and so must
// any benchmark that times parts of a step (else it times page faults the step does not have).
void keep_freed_memory_in_heap();

// The BLAS behind libtorch's fp32 GEMM: the library that provides sgemm_ to the process (on Debian,
// libblas.so.3 is an alternative that points at OpenBLAS when libopenblas0-pthread is installed, at the
// slow reference BLAS otherwise).
struct BlasInfo {
  std::string provider;  // the object that defines sgemm_ ("" when none does)
  std::string resolved;  // its real path (symlinks and alternatives followed)
  std::string kind;      // "OpenBLAS", "Intel MKL", "BLIS", "ATLAS", "FlexiBLAS", "reference BLAS", "unknown", "none"
  std::vector<std::pair<std::string, std::string>> loaded;  // every loaded BLAS-like object: name, real path
};
BlasInfo blas_info();

// The real paths of the shared objects loaded into this process whose file name starts with `prefix`
// (e.g. "libnccl."), without duplicates: one entry means one copy of that library in the process.
std::vector<std::string> loaded_objects(const std::string& prefix);

}  // namespace lorabench::sys
