#include "generic_ops.hpp"

#include <ATen/ATen.h>

namespace lorabench::model::generic {

namespace {
at::Tensor f32(const at::Tensor& t) { return t.to(at::kFloat); }
}  // namespace

at::Tensor swiglu_forward(const at::Tensor& gu) {
  const int64_t I = gu.size(1) / 2;
  return (at::silu(f32(gu.narrow(1, 0, I))) * f32(gu.narrow(1, I, I))).to(gu.scalar_type());
}

at::Tensor swiglu_backward(const at::Tensor& gu, const at::Tensor& da) {
  const int64_t I = gu.size(1) / 2;
  at::Tensor g = f32(gu.narrow(1, 0, I)), u = f32(gu.narrow(1, I, I)), d = f32(da);
  at::Tensor s = at::sigmoid(g);
  return at::cat({d * u * s * (1 + g * (1 - s)), d * g * s}, 1).to(gu.scalar_type());
}

at::Tensor rmsnorm_forward(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd) {
  at::Tensor xf = f32(x);
  at::Tensor r = at::rsqrt(xf.pow(2).mean(-1, true).add_(eps));
  if (rstd) *rstd = r.reshape({-1, 1});
  return w * (xf * r).to(x.scalar_type());
}

at::Tensor rmsnorm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, const at::Tensor& rstd,
                            const at::Tensor& dw_acc, const at::Tensor& residual) {
  const auto dt = x.scalar_type();
  const int64_t D = x.size(-1);
  at::Tensor xf = f32(x).reshape({-1, D}), r = rstd.reshape({-1, 1});
  at::Tensor dyf = f32(dy).reshape({-1, D});
  at::Tensor y = xf * r;  // normalised, fp32
  if (dw_acc.defined()) dw_acc.add_((dyf * f32(y.to(dt))).sum(0));
  at::Tensor dn = f32((dyf * f32(w)).to(dt));  // the unfused path rounds dy * w to the storage type
  at::Tensor dot = (dn * y).mean(-1, true);
  at::Tensor dx = f32(((dn - y * dot) * r).to(dt));
  if (residual.defined()) dx = dx + f32(residual).reshape({-1, D});
  return dx.to(dt).view(x.sizes());
}

void online_softmax_chunk(const at::Tensor& z, at::Tensor& m, at::Tensor& se, at::Tensor& rescale, at::Tensor& p,
                          const at::Tensor& target_local, at::Tensor& zt) {
  const int64_t N = z.size(0), C = z.size(1);
  at::Tensor zf = f32(z);
  at::Tensor m_new = at::maximum(m, zf.amax(1));
  at::Tensor e = at::exp(zf - m_new.unsqueeze(1));
  rescale.copy_(at::exp(m - m_new));
  se.mul_(rescale).add_(e.sum(1));
  m.copy_(m_new);
  if (!p.defined() || p.numel() < N * C || p.scalar_type() != z.scalar_type() || p.device() != z.device())
    p = at::empty({N * C}, z.options());
  p.narrow(0, 0, N * C).view({N, C}).copy_(e);
  at::Tensor in_chunk = (target_local >= 0).logical_and(target_local < C);
  at::Tensor picked = zf.gather(1, target_local.clamp(0, C - 1).unsqueeze(1)).squeeze(1);
  zt.add_(at::where(in_chunk, picked, at::zeros_like(picked)));
}

void rope_qkv(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H,
              int64_t K, int64_t d, bool inverse) {
  const int64_t half = d / 2;
  at::Tensor heads = qkv.view({B, T, H + 2 * K, d}).narrow(2, 0, H + K);  // q and k heads, in place
  at::Tensor x1 = f32(heads.narrow(3, 0, half)), x2 = f32(heads.narrow(3, half, half));
  at::Tensor c = cos.narrow(0, 0, T).view({1, T, 1, half}), s = sin.narrow(0, 0, T).view({1, T, 1, half});
  if (inverse) s = -s;
  // Both halves are computed before either is written (for fp32, x1 and x2 are views of qkv itself).
  at::Tensor o1 = x1 * c - x2 * s, o2 = x2 * c + x1 * s;
  heads.narrow(3, 0, half).copy_(o1);
  heads.narrow(3, half, half).copy_(o2);
}

}  // namespace lorabench::model::generic
