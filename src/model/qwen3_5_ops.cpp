#include "qwen3_5_ops.hpp"

#include <ATen/ATen.h>

#include "profile_scope.hpp"

namespace lorabench::model::qwen3_5 {

namespace {

at::Tensor silu_grad(const at::Tensor& x) {  // d silu(x) / dx = s (1 + x (1 - s)), s = sigmoid(x); fp32
  at::Tensor s = at::sigmoid(x);
  return s * (1 + x * (1 - s));
}

// x / rms(x) over the last dimension, fp32, and its rstd.
at::Tensor normalise(const at::Tensor& x, double eps, at::Tensor* rstd) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor r = at::rsqrt(xf.square().sum(-1, true).mul_(1.0 / double(x.size(-1))).add_(eps));
  if (rstd) *rstd = r;
  return xf * r;
}

// The input gradient of y = n(x) * scale with n = x * rstd: rstd (dn - n mean(dn n)), dn = dy * scale (fp32).
at::Tensor norm_input_grad(const at::Tensor& dn, const at::Tensor& n, const at::Tensor& rstd) {
  at::Tensor dot = (dn * n).sum(-1, true).mul_(1.0 / double(n.size(-1)));
  return (dn - n * dot).mul_(rstd);
}

}  // namespace

at::Tensor zc_rmsnorm_forward(bool fused, const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd) {
  if (fused && x.device().is_cpu()) return cpu::zc_rmsnorm_forward(x, w, eps, rstd);
  ProfileScope scope("lb::norm");
  return normalise(x, eps, rstd).mul_(w.to(at::kFloat) + 1).to(x.scalar_type());
}

at::Tensor zc_rmsnorm_backward(bool fused, const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                               const at::Tensor& rstd, const at::Tensor& dw_acc, const at::Tensor& residual) {
  if (fused && x.device().is_cpu()) return cpu::zc_rmsnorm_backward(dy, x, w, rstd, dw_acc, residual);
  ProfileScope scope("lb::norm");
  at::Tensor n = x.to(at::kFloat) * rstd;
  at::Tensor dyf = dy.to(at::kFloat);
  if (dw_acc.defined()) dw_acc.add_((dyf * n).reshape({-1, n.size(-1)}).sum(0));
  at::Tensor dx = norm_input_grad(dyf * (w.to(at::kFloat) + 1), n, rstd);
  if (residual.defined()) dx.add_(residual.to(at::kFloat));
  return dx.to(x.scalar_type());
}

void rope_partial(const at::Tensor& heads, const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T,
                  bool inverse) {
  ProfileScope scope("lb::rope");
  const int64_t half = cos.size(1), n = heads.size(1), d = heads.size(2);
  at::Tensor h = heads.view({B, T, n, d});
  at::Tensor x1 = h.narrow(3, 0, half), x2 = h.narrow(3, half, half);
  at::Tensor c = cos.view({1, T, 1, half}), s = sin.view({1, T, 1, half});
  if (inverse) s = -s;
  // Copies (also in fp32, where to() would return the views themselves): both halves are overwritten.
  at::Tensor a = x1.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  at::Tensor b = x2.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  const auto dt = heads.scalar_type();
  if (dt == at::kFloat) {
    x1.copy_(a * c - b * s);
    x2.copy_(b * c + a * s);
    return;
  }
  // In bf16, transformers' rounding points: the tables in the model dtype, each product and the sum rounded.
  auto r = [&](const at::Tensor& t) { return t.to(dt).to(at::kFloat); };
  c = r(c);
  s = r(s);
  x1.copy_(r(a * c) - r(b * s));
  x2.copy_(r(b * c) + r(a * s));
}

// The convolution before SiLU, in fp32 and rounded to x's dtype as transformers rounds it, (B, T, C) as fp32.
static at::Tensor conv_pre(const at::Tensor& xf, const at::Tensor& wf, int64_t T, at::ScalarType dt) {
  const int64_t C = xf.size(2), K = wf.size(1);
  at::Tensor pre = at::zeros_like(xf);
  for (int64_t j = 0; j < K; ++j) {
    const int64_t shift = K - 1 - j;  // tap j reads the token `shift` places back
    if (shift >= T) continue;
    pre.narrow(1, shift, T - shift).addcmul_(xf.narrow(1, 0, T - shift), wf.select(1, j).view({1, 1, C}));
  }
  return pre.to(dt).to(at::kFloat);
}

at::Tensor conv_silu_forward(bool fused, const at::Tensor& x, const at::Tensor& w, int64_t B, int64_t T) {
  if (fused && x.device().is_cpu()) return cpu::conv_silu_forward(x, w, B, T);
  ProfileScope scope("lb::conv");
  const int64_t C = x.size(1);
  const at::Tensor p = conv_pre(x.reshape({B, T, C}).to(at::kFloat), w.to(at::kFloat), T, x.scalar_type());
  return at::silu(p).to(x.scalar_type()).view({B * T, C});
}

at::Tensor conv_silu_backward(bool fused, const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, int64_t B,
                              int64_t T, const at::Tensor& dw_acc) {
  if (fused && x.device().is_cpu()) return cpu::conv_silu_backward(dy, x, w, B, T, dw_acc);
  ProfileScope scope("lb::conv");
  const int64_t C = x.size(1), K = w.size(1);
  const at::Tensor xf = x.reshape({B, T, C}).to(at::kFloat), wf = w.to(at::kFloat);
  at::Tensor dpre = dy.reshape({B, T, C}).to(at::kFloat).mul_(silu_grad(conv_pre(xf, wf, T, x.scalar_type())));
  at::Tensor dx = at::zeros({B, T, C}, xf.options());
  for (int64_t j = 0; j < K; ++j) {
    const int64_t shift = K - 1 - j;
    if (shift >= T) continue;
    const at::Tensor dp = dpre.narrow(1, shift, T - shift);
    dx.narrow(1, 0, T - shift).addcmul_(dp, wf.select(1, j).view({1, 1, C}));
    if (dw_acc.defined()) dw_acc.select(1, j).add_((dp * xf.narrow(1, 0, T - shift)).sum({0, 1}));
  }
  return dx.view({B * T, C}).to(x.scalar_type());
}

Gates gates_forward(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_log, const at::Tensor& dt_bias) {
  Gates out;
  out.beta = at::sigmoid(b);  // in dt, as transformers
  at::Tensor x = a.to(at::kFloat) + dt_bias.to(at::kFloat);
  out.g = at::softplus(x).mul_(a_log.to(at::kFloat).exp().neg_());
  return out;
}

void gates_backward(const at::Tensor& dg, const at::Tensor& dbeta, const at::Tensor& a, const at::Tensor& b,
                    const at::Tensor& a_log, const at::Tensor& dt_bias, at::Tensor* da, at::Tensor* db,
                    const at::Tensor& da_log_acc, const at::Tensor& ddt_bias_acc) {
  at::Tensor beta = at::sigmoid(b).to(at::kFloat);
  *db = (dbeta.to(at::kFloat) * beta * (1 - beta)).to(b.scalar_type());
  at::Tensor x = a.to(at::kFloat) + dt_bias.to(at::kFloat);
  at::Tensor e = a_log.to(at::kFloat).exp();
  // softplus' derivative, with torch's threshold (softplus(x) = x above 20).
  at::Tensor dsp = at::where(x > 20, at::ones_like(x), at::sigmoid(x));
  at::Tensor dx = (dg * dsp).mul_(e.neg());
  *da = dx.to(a.scalar_type());
  if (ddt_bias_acc.defined()) ddt_bias_acc.add_(dx.sum(0));
  if (da_log_acc.defined()) da_log_acc.add_((dg * at::softplus(x)).sum(0).mul_(e.neg()));
}

at::Tensor gated_norm_forward(bool fused, const at::Tensor& core, const at::Tensor& z, const at::Tensor& w, double eps,
                              at::Tensor* rstd) {
  if (fused && core.device().is_cpu()) return cpu::gated_norm_forward(core, z, w, eps, rstd);
  ProfileScope scope("lb::norm");
  const auto dt = core.scalar_type();
  // transformers: (w * n.to(dt)) in dt, then times silu(z) in fp32, rounded to dt.
  at::Tensor y = (w * normalise(core, eps, rstd).to(dt)).to(at::kFloat);
  return y.mul_(at::silu(z.to(at::kFloat))).to(dt);
}

at::Tensor gated_norm_backward(bool fused, const at::Tensor& dy, const at::Tensor& core, const at::Tensor& z,
                               const at::Tensor& w, const at::Tensor& rstd, at::Tensor* dz, const at::Tensor& dw_acc) {
  if (fused && core.device().is_cpu()) return cpu::gated_norm_backward(dy, core, z, w, rstd, dz, dw_acc);
  ProfileScope scope("lb::norm");
  const auto dt = core.scalar_type();
  at::Tensor n = core.to(at::kFloat) * rstd;
  at::Tensor nr = n.to(dt).to(at::kFloat);  // the rounded normalised value the weight multiplied
  at::Tensor zf = z.to(at::kFloat), wf = w.to(at::kFloat), dyf = dy.to(at::kFloat);
  *dz = (dyf * (w * n.to(dt)).to(at::kFloat) * silu_grad(zf)).to(z.scalar_type());
  at::Tensor dnw = dyf.mul(at::silu(zf));  // d(w * n)
  if (dw_acc.defined()) dw_acc.add_((dnw * nr).sum(0));
  return norm_input_grad(dnw.mul_(wf), n, rstd).to(dt);
}

}  // namespace lorabench::model::qwen3_5
