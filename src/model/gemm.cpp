#include "lorabench/model/gemm.hpp"

#include <ATen/ATen.h>

#include <algorithm>

#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/device/torch_device.hpp"

namespace lorabench::model {

at::Tensor gemm(const at::Tensor& a, const at::Tensor& b) { return at::mm(a, b); }

void gemm_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, double alpha, double beta) {
  c.addmm_(a, b, beta, alpha);
}

at::Tensor gemm_bias(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b) { return at::addmm(bias, a, b); }

std::string fp32_gemm_engine() {
  return at::hasMKL() ? "ATen (MKL inside libtorch)" : "ATen (libtorch's BLAS)";
}

metrics::PeakFlops calibrate_gemm_peak(at::ScalarType dtype, int threads, device::Device& dev, int64_t n, int repeats) {
  if (n <= 0) n = dev.is_cuda() ? 8192 : 2048;
  if (dev.is_cuda()) repeats = std::max(repeats, 10);
  const auto on = at::TensorOptions().dtype(dtype).device(device::torch_device(dev));
  at::Tensor a = at::randn({n, n}).to(on), b = at::randn({n, n}).to(on);
  at::Tensor c = gemm(a, b);  // warm-up: kernel selection, JIT, first touch of the output
  dev.synchronize();
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = sys::now_s();
    gemm_into(c, a, b, 1.0, 0.0);
    dev.synchronize();
    best = std::min(best, sys::now_s() - t0);
  }
  metrics::PeakFlops p;
  p.flops_per_s = 2.0 * double(n) * double(n) * double(n) / best;
  p.source = "calibrated";
  if (dev.is_cuda()) {
    p.detail = strformat("%s GEMM %lldx%lldx%lld on %s via cuBLAS, best of %d", c10::toString(dtype), (long long)n,
                         (long long)n, (long long)n, dev.str().c_str(), repeats);
    return p;
  }
  p.detail = strformat("%s GEMM %lldx%lldx%lld via %s, best of %d, %d thread%s", c10::toString(dtype),
                       (long long)n, (long long)n, (long long)n,
                       dtype == at::kFloat ? fp32_gemm_engine().c_str() : "ATen (oneDNN)", repeats, threads,
                       threads == 1 ? "" : "s");
  return p;
}

}  // namespace lorabench::model
