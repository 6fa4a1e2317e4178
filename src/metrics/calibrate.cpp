#include "lorabench/metrics/calibrate.hpp"

#include <ATen/ATen.h>

#include <algorithm>

#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"

namespace lorabench::metrics {

PeakFlops calibrate_peak_flops(at::ScalarType dtype, int threads, int64_t n, int repeats) {
  at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  at::Tensor c = at::mm(a, b);  // warm-up: kernel selection, JIT, first-touch of the output
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    double t0 = sys::now_s();
    at::mm_out(c, a, b);
    best = std::min(best, sys::now_s() - t0);
  }
  PeakFlops p;
  p.flops_per_s = 2.0 * double(n) * double(n) * double(n) / best;
  p.source = "calibrated";
  p.detail = strformat("%s GEMM %lldx%lldx%lld, best of %d, %d thread%s", c10::toString(dtype), (long long)n,
                       (long long)n, (long long)n, repeats, threads, threads == 1 ? "" : "s");
  return p;
}

}  // namespace lorabench::metrics
