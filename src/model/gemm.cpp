#include "lorabench/model/gemm.hpp"

#include <ATen/ATen.h>

#include <algorithm>

#include "lorabench/core/cpu_isa.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/device/torch_device.hpp"

namespace lorabench::model {

namespace {

// A reduced-precision GEMM on the CPU that the route sends through fp32.
bool widen(const at::Tensor& a, CpuBf16Gemm route) {
  return route == CpuBf16Gemm::kViaFp32 && a.device().is_cpu() && a.scalar_type() == at::kBFloat16;
}

at::Tensor f32(const at::Tensor& t) { return t.to(at::kFloat); }

// a @ b in fp32 from bf16 (or any) a and b, widened a block of b at a time where that pays: a whole widened
// weight (the gate|up projection's is 35 MB in fp32) goes to memory and back before the GEMM reads it, while a
// block of about 1-2 MB is still in cache (bench/bf16_gemm_routes.py; docs/performance.md, "bf16 on CPUs
// without AVX-512"; measured at 51cfda9, git show 51cfda9:docs/results.md: widened whole, the gate|up forward
// and the head's GEMMs took 1.4-1.5x as long as the plain fp32 GEMM; in blocks, within the noise of it; the
// shapes left whole gained nothing from blocks).
// - b a transposed row-major weight (x @ W^T) with N >= 4K: blocks of W's rows, i.e. of the output's columns;
//   each output element is the same sum as unblocked.
// - b row-major (p @ E) with K >= 4N: blocks of K, accumulated in fp32 (a sum in another order).
at::Tensor mm_widened(const at::Tensor& a, const at::Tensor& b) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const at::Tensor a32 = f32(a);
  if (b.stride(0) == 1 && N >= 4 * K) {
    const int64_t rows = std::max<int64_t>(256, (int64_t(1) << 18) / std::max<int64_t>(K, 1));
    at::Tensor out = at::empty({M, N}, a32.options());
    for (int64_t j = 0; j < N; j += rows) {
      const int64_t n = std::min(rows, N - j);
      at::Tensor slice = out.narrow(1, j, n);
      at::mm_out(slice, a32, f32(b.narrow(1, j, n)));
    }
    return out;
  }
  if (b.stride(1) == 1 && K >= 4 * N) {
    const int64_t rows = std::max<int64_t>(256, (int64_t(1) << 19) / std::max<int64_t>(N, 1));
    at::Tensor out = at::zeros({M, N}, a32.options());
    for (int64_t k = 0; k < K; k += rows) {
      const int64_t n = std::min(rows, K - k);
      out.addmm_(a32.narrow(1, k, n), f32(b.narrow(0, k, n)));
    }
    return out;
  }
  return at::mm(a32, f32(b));
}

}  // namespace

CpuBf16Gemm cpu_bf16_gemm() {
  // libtorch's own test for oneDNN's bf16 GEMM is AVX-512 BW, VL and DQ: the features of Isa::kAvx512.
  return cpu_isa() == Isa::kAvx512 ? CpuBf16Gemm::kNative : CpuBf16Gemm::kViaFp32;
}

std::string bf16_gemm_engine() {
  return cpu_bf16_gemm() == CpuBf16Gemm::kNative
             ? "ATen (oneDNN)"
             : "fp32 " + fp32_gemm_engine() + " on inputs widened from bf16 (no AVX-512: no oneDNN bf16 GEMM)";
}

at::Tensor gemm(const at::Tensor& a, const at::Tensor& b, CpuBf16Gemm route) {
  if (widen(a, route)) return mm_widened(a, b).to(a.scalar_type());
  return at::mm(a, b);
}

void gemm_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, double alpha, double beta,
               CpuBf16Gemm route) {
  if (widen(c, route)) {
    at::Tensor r = mm_widened(a, b).mul_(alpha);
    if (beta != 0) r.add_(f32(c), beta);
    c.copy_(r);
    return;
  }
  c.addmm_(a, b, beta, alpha);
}

at::Tensor gemm_bias(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b, CpuBf16Gemm route) {
  if (widen(a, route)) return mm_widened(a, b).add_(f32(bias)).to(a.scalar_type());
  return at::addmm(bias, a, b);
}

at::Tensor gemm(const at::Tensor& a, const at::Tensor& b) { return gemm(a, b, cpu_bf16_gemm()); }

void gemm_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, double alpha, double beta) {
  gemm_into(c, a, b, alpha, beta, cpu_bf16_gemm());
}

at::Tensor gemm_bias(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b) {
  return gemm_bias(bias, a, b, cpu_bf16_gemm());
}

std::string fp32_gemm_engine() {
  return at::hasMKL() ? "ATen (MKL inside libtorch)" : "ATen (libtorch's BLAS)";
}

int64_t gemm_weight_copy_bytes(at::ScalarType dtype, const device::Device& dev) {
  if (dev.is_cuda() || dtype != at::kBFloat16 || cpu_bf16_gemm() != CpuBf16Gemm::kNative) return 0;
  return 2 * int64_t(at::elementSize(dtype));
}

metrics::PeakFlops calibrate_gemm_peak(at::ScalarType dtype, int threads, device::Device& dev, int64_t n, int repeats,
                                       double min_seconds) {
  if (n <= 0) n = dev.is_cuda() ? 8192 : 2048;
  if (dev.is_cuda()) repeats = std::max(repeats, 10);
  const auto on = at::TensorOptions().dtype(dtype).device(device::torch_device(dev));
  at::Tensor a = at::randn({n, n}).to(on), b = at::randn({n, n}).to(on);
  at::Tensor c = gemm(a, b);  // warm-up: kernel selection, JIT, first touch of the output
  dev.synchronize();
  // At least `repeats` GEMMs and `min_seconds` of them (at most 200): on a shared host a burst of
  // interference can slow every one of a few GEMMs, and the best of a longer window escapes it.
  double best = 1e30;
  const double start = sys::now_s();
  int done = 0;
  for (; done < std::max(repeats, 1) || (sys::now_s() - start < min_seconds && done < 200); ++done) {
    const double t0 = sys::now_s();
    gemm_into(c, a, b, 1.0, 0.0);
    dev.synchronize();
    best = std::min(best, sys::now_s() - t0);
  }
  repeats = done;
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
                       dtype == at::kFloat ? fp32_gemm_engine().c_str() : bf16_gemm_engine().c_str(), repeats, threads,
                       threads == 1 ? "" : "s");
  return p;
}

}  // namespace lorabench::model
