#include "lorabench/model/gemm.hpp"

#include <ATen/ATen.h>

#include <algorithm>

#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"

namespace lorabench::model {

at::Tensor gemm(const at::Tensor& a, const at::Tensor& b) { return at::mm(a, b); }

void gemm_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, double alpha, double beta) {
  c.addmm_(a, b, beta, alpha);
}

at::Tensor gemm_bias(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b) { return at::addmm(bias, a, b); }

std::string fp32_gemm_engine() {
  return at::hasMKL() ? "ATen (MKL inside libtorch)" : "ATen (libtorch's BLAS)";
}

metrics::PeakFlops calibrate_gemm_peak(at::ScalarType dtype, int threads, int64_t n, int repeats) {
  at::Tensor a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
  at::Tensor c = gemm(a, b);  // warm-up: kernel selection, JIT, first touch of the output
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = sys::now_s();
    gemm_into(c, a, b, 1.0, 0.0);
    best = std::min(best, sys::now_s() - t0);
  }
  metrics::PeakFlops p;
  p.flops_per_s = 2.0 * double(n) * double(n) * double(n) / best;
  p.source = "calibrated";
  p.detail = strformat("%s GEMM %lldx%lldx%lld via %s, best of %d, %d thread%s", c10::toString(dtype),
                       (long long)n, (long long)n, (long long)n,
                       dtype == at::kFloat ? fp32_gemm_engine().c_str() : "ATen (oneDNN)", repeats, threads,
                       threads == 1 ? "" : "s");
  return p;
}

}  // namespace lorabench::model
