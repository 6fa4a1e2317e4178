#include "lorabench/optim/adamw.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include "lorabench/core/cpu_isa.hpp"

#include <algorithm>
#include <cmath>

namespace lorabench::optim {

namespace {

// AdamW on a flat range in torch.optim.AdamW's operation order and with the rounding of libtorch's
// vectorised CPU kernels (add_ with alpha and addcmul_ end in a fused multiply-add; addcdiv_ computes
// (value * t1) / t2), so the result matches torch's to the last bit where libtorch's AVX2 kernels run.
LB_FORCE_INLINE void adamw_range(float* p, const float* g, float* m, float* v, int64_t n, float b1, float b2,
                                 float one_b1, float one_b2, float bc2_sqrt, float eps, float neg_step) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = std::fma(gi, one_b1, m[i] * b1);        // exp_avg.mul_(b1).add_(g, alpha = 1 - b1)
    const float vi = std::fma(one_b2 * gi, gi, v[i] * b2);   // exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;      // (sqrt(v) / sqrt(bc2)).add_(eps)
    p[i] = p[i] + (neg_step * mi) / denom;                   // p.addcdiv_(m, denom, value = -step_size)
    m[i] = mi;
    v[i] = vi;
  }
}
#define LB_ADAMW_ARGS float *p, const float *g, float *m, float *v, int64_t n, float b1, float b2, float ob1, \
                      float ob2, float bs, float e, float ns
LB_TARGET_AVX512 void adamw_avx512(LB_ADAMW_ARGS) { adamw_range(p, g, m, v, n, b1, b2, ob1, ob2, bs, e, ns); }
LB_TARGET_AVX2 void adamw_avx2(LB_ADAMW_ARGS) { adamw_range(p, g, m, v, n, b1, b2, ob1, ob2, bs, e, ns); }
void adamw_base(LB_ADAMW_ARGS) { adamw_range(p, g, m, v, n, b1, b2, ob1, ob2, bs, e, ns); }
#undef LB_ADAMW_ARGS

void adamw_fused(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, double lr, const AdamWConfig& c,
                 int64_t step) {
  const double bc1 = 1.0 - std::pow(c.beta1, double(step)), bc2 = 1.0 - std::pow(c.beta2, double(step));
  const float b1 = float(c.beta1), b2 = float(c.beta2), ob1 = float(1.0 - c.beta1), ob2 = float(1.0 - c.beta2);
  const float bs = float(std::sqrt(bc2)), e = float(c.eps), ns = float(-(lr / bc1));
  float *pp = p.data_ptr<float>(), *mp = m.data_ptr<float>(), *vp = v.data_ptr<float>();
  const float* gp = g.data_ptr<float>();
  const Isa isa = cpu_isa();
  at::parallel_for(0, p.numel(), 16384, [&](int64_t b, int64_t en) {
    const int64_t n = en - b;
    if (isa == Isa::kAvx512) adamw_avx512(pp + b, gp + b, mp + b, vp + b, n, b1, b2, ob1, ob2, bs, e, ns);
    else if (isa == Isa::kAvx2) adamw_avx2(pp + b, gp + b, mp + b, vp + b, n, b1, b2, ob1, ob2, bs, e, ns);
    else adamw_base(pp + b, gp + b, mp + b, vp + b, n, b1, b2, ob1, ob2, bs, e, ns);
  });
}

}  // namespace

void adamw_update(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, int64_t step, double lr,
                  const AdamWConfig& c, const Ranges& decay_ranges) {
  at::RecordFunction scope(at::RecordScope::USER_SCOPE);
  if (scope.isActive()) scope.before("lb::optimizer");
  if (c.weight_decay != 0) {
    for (const auto& [b, n] : decay_ranges) p.narrow(0, b, n).mul_(1.0 - lr * c.weight_decay);
  }
  if (p.device().is_cpu() && p.is_contiguous() && g.is_contiguous() && m.is_contiguous() && v.is_contiguous() &&
      p.scalar_type() == at::kFloat && g.scalar_type() == at::kFloat) {
    adamw_fused(p, g, m, v, lr, c, step);  // one pass over memory, the same arithmetic as below
    return;
  }
  if (p.device().is_cuda()) {
    // libtorch's fused multi-tensor AdamW kernel (torch.optim.AdamW(fused=True)); weight decay was applied
    // above on the decayed ranges only, so the kernel's own is 0. It reads the step count from a tensor.
    at::Tensor steps = at::full({}, double(step), p.options().dtype(at::kFloat));
    at::_fused_adamw_({p}, {g}, {m}, {v}, {}, {steps}, lr, c.beta1, c.beta2, 0.0, c.eps, false, false);
    return;
  }
  m.mul_(c.beta1).add_(g, 1.0 - c.beta1);
  v.mul_(c.beta2).addcmul_(g, g, 1.0 - c.beta2);
  const double bc1 = 1.0 - std::pow(c.beta1, double(step));
  const double bc2 = 1.0 - std::pow(c.beta2, double(step));
  const double step_size = lr / bc1;
  at::Tensor denom = (v.sqrt() / std::sqrt(bc2)).add_(c.eps);
  p.addcdiv_(m, denom, -step_size);
}

Ranges intersect(const Ranges& ranges, int64_t lo, int64_t n) {
  Ranges out;
  for (const auto& [b, len] : ranges) {
    int64_t s = std::max(b, lo), e = std::min(b + len, lo + n);
    if (e > s) out.emplace_back(s - lo, e - s);
  }
  return out;
}

}  // namespace lorabench::optim
