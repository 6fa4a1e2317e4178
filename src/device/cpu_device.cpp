// The CPU implementation of the device layer: the counting allocator's memory and the host clock.
#include <vector>

#include "lorabench/core/error.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/metrics/memory.hpp"

namespace lorabench::device {

namespace {

class CpuDevice final : public Device {
 public:
  Kind kind() const override { return Kind::kCpu; }
  std::string str() const override { return "cpu"; }
  void synchronize() override {}

  MemoryStats memory() const override {
    MemoryStats m;
    m.current = m.reserved = metrics::tensor_bytes_current();
    m.peak = m.reserved_peak = metrics::tensor_bytes_peak();
    return m;
  }
  void reset_peak() override { metrics::reset_tensor_peak(); }
  int64_t window_peak() const override { return metrics::tensor_bytes_window_peak(); }
  void reset_window_peak() override { metrics::reset_tensor_window_peak(); }
  bool memory_tracked() const override { return metrics::memory_counter_installed(); }
  int64_t memory_available() const override { return sys::memory_available_bytes(); }

  std::unique_ptr<comm::SyncTimer> make_sync_timer() override { return comm::make_host_sync_timer(); }

  std::vector<std::pair<std::string, std::string>> describe() const override { return {{"device", "cpu"}}; }
};

}  // namespace

Device& cpu_device() {
  static CpuDevice* d = new CpuDevice();  // never destroyed: used until the end of main
  return *d;
}

}  // namespace lorabench::device
