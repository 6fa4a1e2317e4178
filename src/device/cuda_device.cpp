// The CUDA implementation of the device layer (compiled only in CUDA builds: LORABENCH_TORCH_CUDA).
// Memory: the CUDA caching allocator's statistics of this device. Timers: CUDA events (timing enabled)
// recorded on the current stream, pooled and reused every step, placed on the host clock by an anchor. Copies for the staging communicator:
// cudaMemcpyAsync on the current stream, then a wait on that stream only.
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/comm/staging_communicator.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/device/device.hpp"

namespace lorabench::device {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(std::string("CUDA: ") + what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

std::string version_string(int v) {  // 12040 -> "12.4"
  return v <= 0 ? std::string("unknown") : strformat("%d.%d", v / 1000, (v % 1000) / 10);
}

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index) : index_(index) {
    const int n = cuda_visible_devices();
    if (index < 0 || index >= n)
      throw ConfigError(strformat("parallel.device: CUDA device %d requested but this process sees %d", index, n));
    check(cudaSetDevice(index), "cudaSetDevice");
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
    check(cudaGetDeviceProperties(&props_, index), "cudaGetDeviceProperties");
    // libtorch sets up CUDA (and its caching allocator) when the first CUDA tensor is made; before that the
    // allocator's statistics throw ("did you call init?"). memory() and memory_available() are read before
    // any tensor exists (the fit check, the planner), so set it up here.
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  }

  Kind kind() const override { return Kind::kCuda; }
  int index() const override { return index_; }
  std::string str() const override { return "cuda:" + std::to_string(index_); }

  void synchronize() override { check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize"); }

  MemoryStats memory() const override {
    const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(dev());
    const size_t agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    MemoryStats m;
    m.current = st.allocated_bytes[agg].current;
    m.peak = std::max(saved_peak_, st.allocated_bytes[agg].peak);
    m.reserved = st.reserved_bytes[agg].current;
    m.reserved_peak = std::max(saved_reserved_peak_, st.reserved_bytes[agg].peak);
    return m;
  }
  void reset_peak() override {
    saved_peak_ = saved_reserved_peak_ = 0;
    c10::cuda::CUDACachingAllocator::resetPeakStats(dev());
  }
  // The allocator keeps one peak: a window folds the step's peak so far into saved_peak_ and restarts it.
  int64_t window_peak() const override {
    const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(dev());
    return st.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
  void reset_window_peak() override {
    const MemoryStats m = memory();
    saved_peak_ = m.peak;
    saved_reserved_peak_ = m.reserved_peak;
    c10::cuda::CUDACachingAllocator::resetPeakStats(dev());
  }
  bool memory_tracked() const override { return true; }
  int64_t memory_available() const override {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return -1;
    const MemoryStats m = memory();
    return static_cast<int64_t>(free) + std::max<int64_t>(0, m.reserved - m.current);
  }

  void release_cached() override {
    synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

  std::unique_ptr<comm::SyncTimer> make_sync_timer() override;

  std::vector<std::pair<std::string, std::string>> describe() const override {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    long cudnn = 0;
    try {
      cudnn = at::detail::getCUDAHooks().versionCuDNN();
    } catch (const std::exception&) {
      cudnn = 0;  // libtorch without cuDNN: reported as unknown
    }
    return {{"device", str()},
            {"gpu_name", props_.name},
            {"gpu_memory_bytes", std::to_string(props_.totalGlobalMem)},
            {"gpu_uuid", uuid()},
            {"gpu_capability", strformat("%d.%d", props_.major, props_.minor)},
            {"gpu_multiprocessors", std::to_string(props_.multiProcessorCount)},
            {"cuda_driver", version_string(driver)},
            {"cuda_runtime", version_string(runtime)},
            {"cudnn", cudnn > 0 ? std::to_string(cudnn) : std::string("unknown")},
            {"nccl", comm::nccl_built() ? comm::nccl_version() : std::string("not built")}};
  }
  std::string uuid() const override {
    std::string s = "GPU-";
    const auto* b = reinterpret_cast<const unsigned char*>(props_.uuid.bytes);
    for (int i = 0; i < 16; ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
      s += strformat("%02x", b[i]);
    }
    return s;
  }

 private:
  c10::DeviceIndex dev() const { return static_cast<c10::DeviceIndex>(index_); }
  cudaStream_t stream() const { return c10::cuda::getCurrentCUDAStream(dev()).stream(); }

  int index_;
  cudaDeviceProp props_{};
  int64_t saved_peak_ = 0, saved_reserved_peak_ = 0;
};

// Events on the compute stream, placed on the host clock: t(e) = anchor_host + elapsed(anchor_event, e),
// where the anchor event was recorded on an idle stream at host time anchor_host.
class CudaSyncTimer final : public comm::SyncTimer {
 public:
  explicit CudaSyncTimer(c10::DeviceIndex dev) : dev_(dev) {
    check(cudaEventCreate(&anchor_), "cudaEventCreate");
    anchor();
  }
  ~CudaSyncTimer() override {
    cudaEventDestroy(anchor_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  CudaSyncTimer(const CudaSyncTimer&) = delete;
  CudaSyncTimer& operator=(const CudaSyncTimer&) = delete;

  int64_t mark() override {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreate(&e), "cudaEventCreate");
      events_.push_back(e);
    }
    check(cudaEventRecord(events_[used_], stream()), "cudaEventRecord");
    return int64_t(used_++);
  }

  std::vector<double> resolve() override {
    std::vector<double> out;
    if (used_ > 0) check(cudaEventSynchronize(events_[used_ - 1]), "cudaEventSynchronize");
    for (size_t i = 0; i < used_; ++i) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, anchor_, events_[i]), "cudaEventElapsedTime");
      out.push_back(anchor_host_ + double(ms) / 1e3);
    }
    used_ = 0;
    anchor();
    return out;
  }

 private:
  cudaStream_t stream() const { return c10::cuda::getCurrentCUDAStream(dev_).stream(); }
  void anchor() {
    check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
    anchor_host_ = sys::now_s();
    check(cudaEventRecord(anchor_, stream()), "cudaEventRecord");
  }
  c10::DeviceIndex dev_;
  cudaEvent_t anchor_ = nullptr;
  double anchor_host_ = 0;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

std::unique_ptr<comm::SyncTimer> CudaDevice::make_sync_timer() { return std::make_unique<CudaSyncTimer>(dev()); }

}  // namespace

bool cuda_built() { return true; }

int cuda_visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no GPU: clear the error so later CUDA calls start clean
    return 0;
  }
  return n;
}

std::unique_ptr<Device> make_device(const Choice& c) {
  if (c.kind == Kind::kCpu) throw Error("make_device: the CPU device is cpu_device()");
  return std::make_unique<CudaDevice>(c.index);
}

std::unique_ptr<comm::Communicator> make_staging_communicator(std::unique_ptr<comm::Communicator> host, Device& dev) {
  if (!dev.is_cuda()) return host;
  const c10::DeviceIndex index = static_cast<c10::DeviceIndex>(dev.index());
  auto stream = [index] { return c10::cuda::getCurrentCUDAStream(index).stream(); };
  comm::DeviceCopier c;
  c.is_device = [](const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  };
  c.to_host = [stream](void* h, const void* d, size_t n) {
    cudaStream_t s = stream();
    check(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (device to host)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  };
  c.to_device = [stream](void* d, const void* h, size_t n) {
    cudaStream_t s = stream();
    check(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (host to device)");
    // The host buffer goes back to the pool when this returns: the copy must have read it.
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  };
  c.alloc_host = [](size_t n) {
    void* p = nullptr;
    check(cudaHostAlloc(&p, n, cudaHostAllocDefault), "cudaHostAlloc");
    return p;
  };
  c.free_host = [](void* p) { cudaFreeHost(p); };
  return comm::make_staging_communicator(std::move(host), std::move(c));
}

}  // namespace lorabench::device
