// The device layer: where a rank's tensors live and how their work is measured. One small interface with
// a CPU and a CUDA implementation; the model, the strategies and the trainer talk to it instead of asking
// "is this a GPU?" themselves. It owns:
//   - the device (cpu, or cuda:N chosen from the rank's place on its host: choose()),
//   - memory statistics (CPU: the counting allocator of metrics/memory.hpp; CUDA: the caching allocator's
//     allocated and reserved bytes), with a per-step peak and a second peak for windows inside a step,
//   - timers of the compute stream's order (comm::SyncTimer; CPU: the host clock; CUDA: events recorded
//     on the current stream, read back once per step and placed on the host's steady clock),
//   - synchronisation with the compute stream, and the provenance of the device (name, memory, driver,
//     CUDA runtime, cuDNN, NCCL).
// Torch-free header: libtorch stays in src/device and in device/torch_device.hpp. docs/gpu.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lorabench/comm/timeline.hpp"

namespace lorabench::comm {
class Communicator;
}

namespace lorabench::device {

enum class Kind { kCpu, kCuda };
const char* kind_name(Kind k);  // "cpu", "cuda"

// What decides a rank's device (parallel.device and parallel.backend, and what this process sees).
struct ChoiceInputs {
  std::string requested = "auto";  // parallel.device: auto | cpu | cuda
  std::string backend = "auto";    // parallel.backend: auto | mpi | nccl
  bool cuda_built = false;         // this binary has the CUDA path
  bool nccl_built = false;         // this binary has the NCCL backend
  int visible = 0;                 // CUDA devices this process sees (after CUDA_VISIBLE_DEVICES / Slurm binding)
  int local_rank = 0;              // rank within its host
  int local_size = 1;              // ranks on its host
  // The settings' names in errors and reasons (`lorabench comm` has --backend and no device key).
  std::string device_key = "parallel.device", backend_key = "parallel.backend";
};

struct Choice {
  Kind kind = Kind::kCpu;
  int index = -1;           // CUDA ordinal among the visible devices; -1 on CPU
  std::string backend;      // the communicator: "mpi" or "nccl" (auto resolved)
  std::string reason;       // one line: why this device (for the log and provenance)
  int gpus_on_host = 0;     // CUDA: gpus_on_host() of this rank's host, set once the ranks' UUIDs are known
};

// Resolves parallel.device and parallel.backend for one rank. auto = CUDA when the build has it and the
// process sees a GPU, else CPU. A CUDA rank takes visible device local_rank, or device 0 when it sees
// exactly one (Slurm's per-task binding, --gpus-per-task=1). Whether two ranks of a host then share one
// physical GPU is decided by comparing device UUIDs (require_own_gpus). backend auto = nccl on CUDA when
// built, else mpi. Throws ConfigError naming the key: cuda asked for without a CUDA build or without a
// visible GPU, nccl on CPU, more ranks on the host than visible GPUs with nccl.
Choice choose(const ChoiceInputs& in);

// This process's inputs: what the build has, the CUDA devices it sees, and the rank's place on its host.
ChoiceInputs this_process_inputs(const std::string& requested, const std::string& backend, int local_rank,
                                 int local_size);

// Pairs of ranks (a < b) on one host that would share a physical GPU (same UUID): empty when each has its
// own. `uuids` and `hosts` are per rank ("" uuid for CPU ranks).
std::vector<std::pair<int, int>> shared_gpus(const std::vector<std::string>& uuids,
                                             const std::vector<std::string>& hosts);
// The GPUs the ranks of `host` may use: the distinct device UUIDs among them, or `visible` (the devices one
// process sees) when that is more. Under Slurm's per-task binding (--gpus-per-task=1) each rank sees one
// GPU while the host's ranks hold as many as there are ranks; with every GPU visible to every rank, or a
// single process, it is what a process sees.
int gpus_on_host(const std::vector<std::string>& uuids, const std::vector<std::string>& hosts,
                 const std::string& host, int visible);

// Tensor memory of the device, bytes.
struct MemoryStats {
  int64_t current = 0;        // in live tensors now
  int64_t peak = 0;           // highest since reset_peak()
  int64_t reserved = 0;       // held from the system by the allocator (CUDA's caching allocator; CPU: = current)
  int64_t reserved_peak = 0;  // highest reserved since reset_peak()
};

class Device {
 public:
  virtual ~Device() = default;
  virtual Kind kind() const = 0;
  bool is_cuda() const { return kind() == Kind::kCuda; }
  virtual int index() const { return -1; }
  virtual std::string str() const = 0;  // what torch prints: "cpu", "cuda:0"

  // Blocks the host until the work queued on the compute stream has finished (CPU: returns at once).
  virtual void synchronize() = 0;

  // ---- memory ----
  virtual MemoryStats memory() const = 0;
  virtual void reset_peak() = 0;  // start of a step: peaks := current
  // A second peak with its own reset, for measuring within a step (FSDP's prefetch bound) without
  // disturbing the step's peak.
  virtual int64_t window_peak() const = 0;
  virtual void reset_window_peak() = 0;
  // False where memory() would not see the tensors (CPU without the counting allocator installed).
  virtual bool memory_tracked() const = 0;
  // Bytes a run could still allocate here, or -1 when unknown: CPU, the node's MemAvailable (lowered to the
  // cgroup's remaining limit); CUDA, the device's free memory plus what this process's caching allocator
  // holds unused. What the start-of-training check (train::check_fits_or_throw) compares with.
  virtual int64_t memory_available() const = 0;
  // Returns what the allocator holds unused to the system (CUDA: the caching allocator's emptyCache; CPU:
  // nothing to do), e.g. after the planner's probe, so that a run's reserved peak is its own.
  virtual void release_cached() {}

  // ---- timing on the compute stream ----
  // A timer whose marks are points in the compute stream's order: CPU, the host clock when mark() is
  // called; CUDA, an event recorded on the current stream (when the work queued before it has finished),
  // which resolve() waits for and places on the host's steady clock (sys::now_s()): it anchors itself
  // with an event recorded while the stream is idle (at creation and at the end of every resolve()). A
  // mark on an idle stream therefore reads the host clock, and a mark behind queued kernels the time
  // they finish. mark() never blocks; resolve() does on CUDA (once per step, outside timed regions).
  virtual std::unique_ptr<comm::SyncTimer> make_sync_timer() = 0;

  // ---- what it is ----
  // Provenance rows: device, gpu_name, gpu_memory_bytes, gpu_uuid, gpu_capability, cuda_driver, cuda_runtime,
  // cudnn, nccl (only what applies).
  virtual std::vector<std::pair<std::string, std::string>> describe() const = 0;
  virtual std::string uuid() const { return ""; }
};

// The CPU device (the counting allocator's memory, the host clock): one per process, for the CPU path,
// tests, tools and the planner's probe.
Device& cpu_device();

// The device of a choice. CUDA: sets it as the current device of this thread. Throws Error when the
// build has no CUDA path.
std::unique_ptr<Device> make_device(const Choice& c);

bool cuda_built();        // this binary was built against a CUDA libtorch with the CUDA toolkit
int cuda_visible_devices();  // devices this process sees; 0 without CUDA, a driver or a GPU. Never throws.

// The MPI backend with device buffers: every collective stages its buffers through pinned host memory
// (device -> host before the operation, host -> device when it completes), so that the strategies hand
// it CUDA tensors as they would to NCCL, and several ranks can share one GPU. Host pointers pass
// through unchanged. On a CPU device it returns `host` itself.
std::unique_ptr<comm::Communicator> make_staging_communicator(std::unique_ptr<comm::Communicator> host, Device& dev);

}  // namespace lorabench::device
