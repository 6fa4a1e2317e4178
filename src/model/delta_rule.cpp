#include "delta_rule.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "lorabench/core/error.hpp"
#include "profile_scope.hpp"

namespace lorabench::model::delta_rule {

namespace {

constexpr double kL2Eps = 1e-6;  // flash-linear-attention's (and transformers') eps of the q/k L2 norm

// x (B, T, H, d) -> fp32, L2-normalised over d; rstd (B, T, H, 1) when asked.
at::Tensor l2norm(const at::Tensor& x, at::Tensor* rstd) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor r = at::rsqrt(xf.square().sum(-1, true).add_(kL2Eps));
  if (rstd) *rstd = r;
  return xf * r;
}

// (B, T, H, ...) fp32 -> (B, Hv, NC, C, ...) zero-padded to NC * C tokens, heads repeated `rep` times each.
at::Tensor to_chunks(const at::Tensor& x, int64_t rep, int64_t chunk) {
  at::Tensor y = rep > 1 ? x.repeat_interleave(rep, 2) : x;
  y = y.transpose(1, 2);  // (B, H, T, ...)
  const int64_t T = y.size(2);
  const int64_t pad = (chunk - T % chunk) % chunk;
  std::vector<int64_t> shape = y.sizes().vec();
  if (pad) {
    shape[2] = pad;
    y = at::cat({y, at::zeros(shape, y.options())}, 2);
  }
  shape = y.sizes().vec();
  std::vector<int64_t> out{shape[0], shape[1], (T + pad) / chunk, chunk};
  for (size_t i = 3; i < shape.size(); ++i) out.push_back(shape[i]);
  return y.contiguous().view(out);
}

// The inverse of to_chunks: (B, H, NC, C, ...) -> (B, T, H / rep, ...), summing each key head's repeats.
at::Tensor from_chunks(const at::Tensor& x, int64_t T, int64_t rep) {
  std::vector<int64_t> shape = x.sizes().vec();
  std::vector<int64_t> flat{shape[0], shape[1], shape[2] * shape[3]};
  for (size_t i = 4; i < shape.size(); ++i) flat.push_back(shape[i]);
  at::Tensor y = x.reshape(flat).narrow(2, 0, T).transpose(1, 2);  // (B, T, H, ...)
  if (rep > 1) {
    std::vector<int64_t> grouped{y.size(0), y.size(1), y.size(2) / rep, rep};
    for (int64_t i = 3; i < y.dim(); ++i) grouped.push_back(y.size(i));
    y = y.reshape(grouped).sum(3);
  }
  return y.contiguous();
}

void check_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                  const at::Tensor& beta) {
  const bool ok = q.dim() == 4 && k.sizes() == q.sizes() && v.dim() == 4 && v.size(0) == q.size(0) &&
                  v.size(1) == q.size(1) && v.size(2) % q.size(2) == 0 && g.dim() == 3 &&
                  g.size(0) == v.size(0) && g.size(1) == v.size(1) && g.size(2) == v.size(2) &&
                  beta.sizes() == g.sizes();
  if (!ok) throw Error("delta_rule: inconsistent shapes of q, k, v, g, beta");
}

// Everything of a chunk that does not depend on the state entering it, for all chunks at once.
struct Chunks {
  int64_t B = 0, T = 0, H = 0, rep = 1, NC = 0, C = 0;
  at::Tensor qn, kn, rq, rk;  // the L2-normalised q and k (B, T, Hk, d) and their rstd
  at::Tensor q, k, v, beta;   // (B, H, NC, C, d) fp32, q scaled; beta (B, H, NC, C)
  at::Tensor G, E, F, eC;     // cumulative log decay, exp(G), exp(G_C - G), exp(G_C) (B, H, NC)
  at::Tensor D;               // (B, H, NC, C, C): exp(G_i - G_j), 0 above the diagonal
  at::Tensor A;               // Kb K^T * D: its strictly lower part is L - I
  at::Tensor U, W;            // L^-1 diag(beta) V, L^-1 diag(E) Kb
  at::Tensor Qe, Kd, P;       // diag(E) Q, diag(F) K, Q K^T * D
  double scale = 1;
};

Chunks make_chunks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                   const at::Tensor& beta, int64_t chunk, bool keep_norms) {
  check_shapes(q, k, v, g, beta);
  Chunks c;
  c.B = q.size(0);
  c.T = q.size(1);
  c.H = v.size(2);
  c.rep = c.H / q.size(2);
  c.C = chunk;
  c.scale = 1.0 / std::sqrt(double(q.size(3)));
  c.qn = l2norm(q, keep_norms ? &c.rq : nullptr);
  c.kn = l2norm(k, keep_norms ? &c.rk : nullptr);
  c.q = to_chunks(c.qn * c.scale, c.rep, chunk);
  c.k = to_chunks(c.kn, c.rep, chunk);
  c.v = to_chunks(v.to(at::kFloat), 1, chunk);
  c.beta = to_chunks(beta.to(at::kFloat), 1, chunk);
  at::Tensor gc = to_chunks(g.to(at::kFloat), 1, chunk);
  c.NC = c.q.size(2);
  if (!keep_norms) c.qn = c.kn = at::Tensor();

  c.G = gc.cumsum(-1);
  c.E = c.G.exp();
  at::Tensor last = c.G.narrow(-1, chunk - 1, 1);  // (B, H, NC, 1)
  c.F = (last - c.G).exp();
  c.eC = last.squeeze(-1).exp();
  const auto opts = c.G.options();
  at::Tensor upper = at::ones({chunk, chunk}, opts.dtype(at::kBool)).triu(1);
  c.D = (c.G.unsqueeze(-1) - c.G.unsqueeze(-2)).masked_fill_(upper, -std::numeric_limits<float>::infinity()).exp_();

  at::Tensor kb = c.k * c.beta.unsqueeze(-1);
  c.A = at::matmul(kb, c.k.transpose(-1, -2)).mul_(c.D);
  c.U = at::linalg_solve_triangular(c.A, c.v * c.beta.unsqueeze(-1), /*upper=*/false, /*left=*/true,
                                    /*unitriangular=*/true);
  c.W = at::linalg_solve_triangular(c.A, kb * c.E.unsqueeze(-1), false, true, true);
  c.Qe = c.q * c.E.unsqueeze(-1);
  c.Kd = c.k * c.F.unsqueeze(-1);
  c.P = at::matmul(c.q, c.k.transpose(-1, -2)).mul_(c.D);
  return c;
}

// The scan over chunks: the output of every chunk, and (when asked) the state entering each chunk and the new
// values, which the backward needs.
at::Tensor scan(const Chunks& c, at::Tensor* states, at::Tensor* new_values) {
  const int64_t dk = c.k.size(-1), dv = c.v.size(-1);
  at::Tensor S = at::zeros({c.B, c.H, dk, dv}, c.q.options());
  at::Tensor O = at::empty_like(c.v);
  at::Tensor Vn = at::empty_like(c.v);
  if (states) *states = at::empty({c.B, c.H, c.NC, dk, dv}, c.q.options());
  for (int64_t i = 0; i < c.NC; ++i) {
    if (states) states->select(2, i).copy_(S);
    at::Tensor vn = c.U.select(2, i) - at::matmul(c.W.select(2, i), S);
    at::Tensor o = O.select(2, i);
    at::matmul_out(o, c.Qe.select(2, i), S);
    o.add_(at::matmul(c.P.select(2, i), vn));
    S = S * c.eC.select(2, i).view({c.B, c.H, 1, 1}) + at::matmul(c.Kd.select(2, i).transpose(-1, -2), vn);
    Vn.select(2, i).copy_(vn);
  }
  if (new_values) *new_values = Vn;
  return O;
}

// d(x / |x|) for x L2-normalised to xn with rstd r: r (dxn - xn (xn . dxn)).
at::Tensor l2norm_backward(const at::Tensor& dxn, const at::Tensor& xn, const at::Tensor& r) {
  return (dxn - xn * (xn * dxn).sum(-1, true)).mul_(r);
}

}  // namespace

namespace generic {

at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                   const at::Tensor& beta, int64_t chunk) {
  ProfileScope scope("lb::delta_rule");
  const Chunks c = make_chunks(q, k, v, g, beta, chunk, /*keep_norms=*/false);
  return from_chunks(scan(c, nullptr, nullptr), c.T, 1).to(v.scalar_type());
}

Grads backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
               const at::Tensor& beta, const at::Tensor& dout, int64_t chunk) {
  ProfileScope scope("lb::delta_rule");
  const Chunks c = make_chunks(q, k, v, g, beta, chunk, /*keep_norms=*/true);
  at::Tensor S0, Vn;  // the state entering each chunk, the new values
  scan(c, &S0, &Vn);
  const at::Tensor dO = to_chunks(dout.to(at::kFloat), 1, chunk);

  // The reverse scan: the state's gradient dS enters chunk i from chunk i + 1.
  const int64_t dk = c.k.size(-1), dv = c.v.size(-1);
  at::Tensor dS = at::zeros({c.B, c.H, dk, dv}, c.q.options());
  at::Tensor dVn = at::empty_like(Vn);
  at::Tensor dKd = at::empty_like(c.k);
  at::Tensor deC = at::empty_like(c.eC);
  for (int64_t i = c.NC - 1; i >= 0; --i) {
    const at::Tensor dOi = dO.select(2, i);
    at::Tensor dvn = dVn.select(2, i);
    at::matmul_out(dvn, c.P.select(2, i).transpose(-1, -2), dOi);
    dvn.add_(at::matmul(c.Kd.select(2, i), dS));
    dKd.select(2, i).copy_(at::matmul(Vn.select(2, i), dS.transpose(-1, -2)));
    deC.select(2, i).copy_((S0.select(2, i) * dS).sum({-1, -2}));
    dS = at::matmul(c.Qe.select(2, i).transpose(-1, -2), dOi) +
         dS * c.eC.select(2, i).view({c.B, c.H, 1, 1}) - at::matmul(c.W.select(2, i).transpose(-1, -2), dvn);
  }

  // Everything else chunk by chunk at once.
  const at::Tensor S0t = S0.transpose(-1, -2);
  at::Tensor dQe = at::matmul(dO, S0t);                             // (.., C, dk)
  at::Tensor dP = at::matmul(dO, Vn.transpose(-1, -2)).mul_(c.D);   // d(QK^T), lower incl. the diagonal
  at::Tensor dW = -at::matmul(dVn, S0t);
  const at::Tensor At = c.A.transpose(-1, -2);
  at::Tensor dVb = at::linalg_solve_triangular(At, dVn, /*upper=*/true, /*left=*/true, /*unitriangular=*/true);
  at::Tensor dXw = at::linalg_solve_triangular(At, dW, true, true, true);
  at::Tensor kb = c.k * c.beta.unsqueeze(-1);
  // dL = -(dVb U^T + dXw W^T); only its strictly lower part reaches A.
  at::Tensor strict = at::ones({chunk, chunk}, c.q.options().dtype(at::kBool)).tril(-1);
  at::Tensor dM = (at::matmul(dVb, c.U.transpose(-1, -2)) + at::matmul(dXw, c.W.transpose(-1, -2)))
                      .neg_()
                      .mul_(strict);
  at::Tensor dMD = dM * c.D;
  at::Tensor dKb = at::matmul(dMD, c.k) + dXw * c.E.unsqueeze(-1);
  at::Tensor dq = at::matmul(dP, c.k) + dQe * c.E.unsqueeze(-1);
  at::Tensor dkk = at::matmul(dMD.transpose(-1, -2), kb) + at::matmul(dP.transpose(-1, -2), c.q) +
                   dKd * c.F.unsqueeze(-1) + dKb * c.beta.unsqueeze(-1);
  at::Tensor dv_ = dVb * c.beta.unsqueeze(-1);
  at::Tensor dbeta = (dVb * c.v).sum(-1) + (dKb * c.k).sum(-1);

  // The log decays: through E, F, exp(G_C) and D (rows + , columns -), then the cumulative sum's adjoint.
  at::Tensor dG = (dXw * kb).sum(-1).add_((dQe * c.q).sum(-1)).mul_(c.E);
  at::Tensor viaF = (dKd * c.k).sum(-1).mul_(c.F);
  dG.sub_(viaF);
  at::Tensor to_last = viaF.sum(-1).add_(deC * c.eC);  // (B, H, NC)
  dG.select(-1, chunk - 1).add_(to_last);
  at::Tensor QK = at::matmul(c.q, c.k.transpose(-1, -2));
  at::Tensor KbK = at::matmul(kb, c.k.transpose(-1, -2));
  // dP already carries the factor D; dM does not.
  at::Tensor Gd = (dP * QK).add_(dMD * KbK);
  dG.add_(Gd.sum(-1)).sub_(Gd.sum(-2));
  at::Tensor dg = dG.flip(-1).cumsum(-1).flip(-1);

  Grads out;
  at::Tensor dqn = from_chunks(dq, c.T, c.rep).mul_(c.scale);
  at::Tensor dkn = from_chunks(dkk, c.T, c.rep);
  out.dq = l2norm_backward(dqn, c.qn, c.rq).to(q.scalar_type());
  out.dk = l2norm_backward(dkn, c.kn, c.rk).to(k.scalar_type());
  out.dv = from_chunks(dv_, c.T, 1).to(v.scalar_type());
  out.dg = from_chunks(dg, c.T, 1).to(g.scalar_type());
  out.dbeta = from_chunks(dbeta, c.T, 1).to(beta.scalar_type());
  return out;
}

}  // namespace generic

at::Tensor forward(bool fused, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                   const at::Tensor& beta, int64_t chunk) {
  if (fused && q.device().is_cpu()) return cpu::forward(q, k, v, g, beta, chunk);
  return generic::forward(q, k, v, g, beta, chunk);
}

Grads backward(bool fused, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
               const at::Tensor& beta, const at::Tensor& dout, int64_t chunk) {
  if (fused && q.device().is_cpu()) return cpu::backward(q, k, v, g, beta, dout, chunk);
  return generic::backward(q, k, v, g, beta, dout, chunk);
}

}  // namespace lorabench::model::delta_rule
