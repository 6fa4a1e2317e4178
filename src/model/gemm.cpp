#include "lorabench/model/gemm.hpp"

#include <ATen/ATen.h>

#include <algorithm>

#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "sgemm.hpp"

namespace lorabench::model {

namespace {

bool g_engine_enabled = true;

// Row-major operand description for sgemm: transposed or not, and its leading dimension.
struct Operand {
  char trans = 'N';
  int64_t ld = 0;
  bool ok = false;
};

Operand describe(const at::Tensor& t) {
  Operand o;
  if (t.stride(1) == 1 && t.stride(0) >= std::max<int64_t>(1, t.size(1))) {
    o = {'N', t.stride(0), true};
  } else if (t.stride(0) == 1 && t.stride(1) >= std::max<int64_t>(1, t.size(0))) {
    o = {'T', t.stride(1), true};
  }
  return o;
}

// c = beta c + alpha a b through the fast sgemm, when every operand is an fp32 CPU matrix it can take.
bool try_sgemm(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, double alpha, double beta) {
  if (!g_engine_enabled || !sgemm_available()) return false;
  if (a.scalar_type() != at::kFloat || b.scalar_type() != at::kFloat || c.scalar_type() != at::kFloat) return false;
  if (a.dim() != 2 || b.dim() != 2 || c.dim() != 2 || !a.device().is_cpu()) return false;
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (M == 0 || N == 0 || K == 0) return false;
  Operand oa = describe(a), ob = describe(b);
  if (!oa.ok || !ob.ok || c.stride(1) != 1 || c.stride(0) < N) return false;
  return sgemm(oa.trans, ob.trans, M, N, K, float(alpha), a.data_ptr<float>(), oa.ld, b.data_ptr<float>(), ob.ld,
               float(beta), c.data_ptr<float>(), c.stride(0));
}

}  // namespace

at::Tensor gemm(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() == at::kFloat) {
    at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
    if (try_sgemm(c, a, b, 1.0, 0.0)) return c;
  }
  return at::mm(a, b);
}

void gemm_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, double alpha, double beta) {
  if (try_sgemm(c, a, b, alpha, beta)) return;
  c.addmm_(a, b, beta, alpha);
}

at::Tensor gemm_bias(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() == at::kFloat && sgemm_available() && g_engine_enabled) {
    at::Tensor c = bias.view({1, -1}).expand({a.size(0), b.size(1)}).contiguous();
    if (try_sgemm(c, a, b, 1.0, 1.0)) return c;
  }
  return at::addmm(bias, a, b);
}

std::string fp32_gemm_engine() {
  return sgemm_available() && g_engine_enabled ? "oneDNN sgemm" : "ATen (libtorch's BLAS)";
}

void set_fp32_gemm_engine_enabled(bool enabled) { g_engine_enabled = enabled; }

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
