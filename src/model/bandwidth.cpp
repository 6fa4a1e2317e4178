#include "lorabench/model/bandwidth.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <fstream>

#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/device/torch_device.hpp"

namespace lorabench::model {

namespace {

// The largest data or unified cache of cpu0 that sysfs lists (its "size" as "32768K"), 0 when none is.
int64_t largest_cpu_cache_bytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (!(f >> s) || s.empty()) continue;
    int64_t v = 0;
    size_t k = 0;
    while (k < s.size() && s[k] >= '0' && s[k] <= '9') v = v * 10 + (s[k++] - '0');
    if (k < s.size() && (s[k] == 'K' || s[k] == 'k')) v <<= 10;
    else if (k < s.size() && (s[k] == 'M' || s[k] == 'm')) v <<= 20;
    best = std::max(best, v);
  }
  return best;
}

}  // namespace

int64_t default_triad_array_bytes(const device::Device& dev) {
  if (dev.is_cuda()) return int64_t(1) << 30;
  const int64_t llc = largest_cpu_cache_bytes();
  if (llc <= 0) return int64_t(128) << 20;
  return std::max<int64_t>(int64_t(64) << 20, 4 * llc);
}

metrics::MemoryBandwidth measure_triad_bandwidth(int threads, device::Device& dev, int64_t array_bytes, int repeats,
                                                 double min_seconds) {
  if (array_bytes <= 0) array_bytes = default_triad_array_bytes(dev);
  const int64_t n = std::max<int64_t>(1, array_bytes / int64_t(sizeof(float)));
  const auto on = at::TensorOptions().dtype(at::kFloat).device(device::torch_device(dev));
  at::Tensor b = at::full({n}, 1.0f, on), c = at::full({n}, 2.0f, on), a = at::empty({n}, on);
  at::add_out(a, b, c, 3.0);  // first touch of a's pages
  dev.synchronize();
  double best = 1e30;
  const double start = sys::now_s();
  int done = 0;
  for (; done < std::max(repeats, 1) || (sys::now_s() - start < min_seconds && done < 100); ++done) {
    const double t0 = sys::now_s();
    at::add_out(a, b, c, 3.0);
    dev.synchronize();
    best = std::min(best, sys::now_s() - t0);
  }
  a = at::Tensor();
  b = at::Tensor();
  c = at::Tensor();
  dev.release_cached();  // a GPU's caching allocator would keep the arrays reserved through the run
  // On a CPU the stores to a are ordinary ones: each line of a is read before it is written (write-allocate),
  // so memory moves four arrays' bytes; a GPU writes whole sectors without reading them.
  const int arrays = dev.is_cuda() ? 3 : 4;
  metrics::MemoryBandwidth m;
  const double bytes = double(arrays) * double(n) * double(sizeof(float));
  m.bytes_per_s = bytes / best;
  m.source = "measured";
  m.detail = strformat("STREAM-style triad a = b + 3c, fp32, 3 arrays of %s on %s, %d thread%s, best of %d, "
                       "bytes = %d x array (%s)",
                       format_bytes(double(n) * sizeof(float)).c_str(), dev.str().c_str(), threads,
                       threads == 1 ? "" : "s", done, arrays,
                       dev.is_cuda() ? "b, c read, a written" : "b, c read, a read for ownership and written");
  return m;
}

}  // namespace lorabench::model
