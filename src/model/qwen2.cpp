#include "lorabench/model/qwen2.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <tuple>

#include "lorabench/core/error.hpp"
#include "lorabench/core/hash.hpp"
#include "lorabench/device/torch_device.hpp"
#include "lorabench/model/gemm.hpp"
#include "lorabench/model/weights.hpp"
#include "attention.hpp"
#include "delta_rule.hpp"
#include "kernels.hpp"
#include "profile_scope.hpp"
#include "qwen3_5_ops.hpp"

namespace lorabench::model {

namespace {

// A view of `rows` x `cols` starting at a slot's offset (for packed groups such as q|k|v).
at::Tensor packed_view(const at::Tensor& flat, const Slot& first, int64_t rows, int64_t cols) {
  return flat.narrow(0, first.offset, rows * cols).view({rows, cols});
}

// Inverted-dropout multiplier (0 or 1/(1-p)) of the adapter input, regenerated from its key.
// With tensor parallelism the input of o and down is this rank's columns of the full input: the mask is drawn
// for the full width and its columns taken.
at::Tensor dropout_multiplier(const LayerContext& ctx, Proj p, int64_t rows, int64_t cols) {
  const double prob = ctx.model->lora.dropout;
  uint64_t seed = splitmix64(ctx.dropout.seed ^ splitmix64(uint64_t(ctx.layer) * 131 + uint64_t(p) + 1));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  int64_t c0 = 0, width = cols;
  if (ctx.tp != nullptr && p == Proj::kO) c0 = ctx.tp->o_in_offset, width = ctx.tp->o_in_full;
  if (ctx.tp != nullptr && p == Proj::kDown) c0 = ctx.tp->down_in_offset, width = ctx.tp->down_in_full;
  // Drawn on the CPU on every device, so that a GPU run sees the masks of a CPU run of the same seed; sent
  // to a GPU without the host waiting for the layer's queued work (device::host_tensor).
  at::Tensor keep = device::host_tensor({rows, width}, at::kFloat, ctx.device).bernoulli_(1.0 - prob, gen);
  if (width != cols) keep = keep.narrow(1, c0, cols).contiguous();
  keep.mul_(1.0 / (1.0 - prob));
  return keep.to(ctx.device, /*non_blocking=*/true);
}

bool use_dropout(const LayerContext& ctx) { return ctx.dropout.active && ctx.model->lora.dropout > 0; }

// The projections that read the same input, in packed order; `id` indexes LayerCache::la.
// (A layer is of one kind, so the linear-attention layer's groups reuse the attention's ids.)
struct Group {
  Proj members[4];
  int n;
  int id;
};
constexpr Group kQkv{{Proj::kQ, Proj::kK, Proj::kV, Proj::kQ}, 3, 0};
constexpr Group kOnlyO{{Proj::kO, Proj::kQ, Proj::kQ, Proj::kQ}, 1, 1};
constexpr Group kGateUp{{Proj::kGate, Proj::kUp, Proj::kQ, Proj::kQ}, 2, 2};
constexpr Group kOnlyDown{{Proj::kDown, Proj::kQ, Proj::kQ, Proj::kQ}, 1, 3};
constexpr Group kLinIn{{Proj::kLinQkv, Proj::kLinZ, Proj::kLinB, Proj::kLinA}, 4, 0};
constexpr Group kLinOut{{Proj::kLinOut, Proj::kQ, Proj::kQ, Proj::kQ}, 1, 1};

// Tensor parallelism: o and down (the groups that read this rank's slice of their input) are row-parallel, their
// outputs partial sums; q|k|v and gate|up are column-parallel, their input gradients partial sums.
bool row_parallel(const LayerContext& ctx, const Group& grp) {
  return ctx.tp != nullptr && (grp.id == kOnlyO.id || grp.id == kOnlyDown.id);
}
bool column_parallel(const LayerContext& ctx, const Group& grp) {
  return ctx.tp != nullptr && (grp.id == kQkv.id || grp.id == kGateUp.id);
}
// The sum over the tensor-parallel group, in place (nothing without tensor parallelism).
void tp_sum(const LayerContext& ctx, at::Tensor& t) {
  if (ctx.tp != nullptr) ctx.tp->sum(t);
}

// Column range of projection p inside its group's fused output.
std::pair<int64_t, int64_t> out_range(const ModelShape& s, Proj p) {
  const int64_t conv = s.lin_conv_dim(), vd = s.lin_value_dim(), hv = s.lin_v_heads;
  switch (p) {
    case Proj::kQ: return {0, s.q_proj_dim()};
    case Proj::kK: return {s.q_proj_dim(), s.kv_dim()};
    case Proj::kV: return {s.q_proj_dim() + s.kv_dim(), s.kv_dim()};
    case Proj::kGate: return {0, s.intermediate};
    case Proj::kUp: return {s.intermediate, s.intermediate};
    case Proj::kO:
    case Proj::kDown:
    case Proj::kLinOut: return {0, s.hidden};
    case Proj::kLinQkv: return {0, conv};
    case Proj::kLinZ: return {conv, vd};
    case Proj::kLinB: return {conv + vd, hv};
    case Proj::kLinA: return {conv + vd + hv, hv};
  }
  return {0, 0};
}

// The group's members that carry an adapter, in order: adapter j's columns in la (and d(la)) are j*r .. j*r+r.
std::vector<Proj> group_targets(const LoraSpec& lora, const Group& grp) {
  std::vector<Proj> t;
  if (!lora.enabled) return t;
  for (int i = 0; i < grp.n; ++i)
    if (lora.targets(grp.members[i])) t.push_back(grp.members[i]);
  return t;
}

// out += scaling * B(A(dropout(x))) for the group's adapters: la = dropout(x) A_packed^T (N, n*r) in one
// GEMM, then per adapter out[:, its columns] += scaling * la[:, its r columns] B^T, accumulated in place. (One
// GEMM with the B matrices as a block-diagonal matrix did the same sums, but multiplied the zero blocks too:
// gate|up's took 1.5x as long as the two products.) The adapters' parameters are fp32; the GEMMs run in the
// model dtype (fp32: PEFT's arithmetic; bf16: torch.autocast's, the fp32 weights cast for the GEMM).
// Keeps la in cache->la[grp.id] for the backward.
void lora_forward(const LayerContext& ctx, const LayerWeights& w, const Group& grp, const at::Tensor& packed_a,
                  const at::Tensor& x, at::Tensor& out, LayerCache* cache) {
  const LoraSpec& lora = ctx.model->lora;
  const std::vector<Proj> targets = group_targets(lora, grp);
  if (targets.empty()) return;
  const auto dt = x.scalar_type();
  at::Tensor la;
  if (!use_dropout(ctx) && packed_a.defined()) {
    la = gemm(x, packed_a.to(dt).t());
  } else {
    std::vector<at::Tensor> parts;
    for (Proj p : targets) {
      at::Tensor xin = use_dropout(ctx)
                           ? (x.to(at::kFloat) * dropout_multiplier(ctx, p, x.size(0), x.size(1))).to(dt)
                           : x;
      parts.push_back(gemm(xin, w.lora[static_cast<int>(p)].a.to(dt).t()));
    }
    la = parts.size() == 1 ? parts[0] : at::cat(parts, 1);
  }
  if (row_parallel(ctx, grp)) ctx.tp->sum(la);  // x A^T over the whole input (out was summed by the caller)
  for (int64_t j = 0; j < int64_t(targets.size()); ++j) {
    const Proj p = targets[j];
    auto [c0, cn] = out_range(ctx.model->shape, p);
    at::Tensor cols = out.narrow(1, c0, cn);
    gemm_into(cols, la.narrow(1, j * lora.r, lora.r), w.lora[static_cast<int>(p)].b.to(dt).t(),
              lora.scaling(), 1.0);
  }
  if (cache) cache->la[grp.id] = la;
}

// What lora_backward_b hands to lora_backward_a: d(la) (N, n*r), undefined when the group has no adapter, and
// with dropout each adapter's multiplier (drawn once for both halves).
struct LoraDla {
  at::Tensor dla;
  std::vector<at::Tensor> mult;
};

// Backward of lora_forward, the half that needs no input: accumulates dB (fp32), adds the branch's input
// gradient into dx, and returns d(la) for lora_backward_a.
LoraDla lora_backward_b(const LayerContext& ctx, const LayerWeights& w, const LayerGrads& g, const Group& grp,
                        const at::Tensor& packed_a, const at::Tensor& dout, const LayerCache& cache, at::Tensor& dx) {
  const LoraSpec& lora = ctx.model->lora;
  const std::vector<Proj> targets = group_targets(lora, grp);
  if (targets.empty()) return {};
  const auto dt = dout.scalar_type();
  const double s = lora.scaling();
  const int64_t r = lora.r;
  const at::Tensor& la = cache.la[grp.id];
  at::Tensor dla = at::empty({dout.size(0), la.size(1)}, dout.options());  // (N, n*r): d(la), per adapter
  for (int64_t j = 0; j < int64_t(targets.size()); ++j) {
    const Proj p = targets[j];
    auto [c0, cn] = out_range(ctx.model->shape, p);
    const at::Tensor dout_p = dout.narrow(1, c0, cn);
    at::Tensor dla_p = dla.narrow(1, j * r, r);
    gemm_into(dla_p, dout_p, w.lora[static_cast<int>(p)].b.to(dt), 1.0, 0.0);
    at::Tensor db = gemm(dout_p.t(), la.narrow(1, j * r, r));
    // A key/value head held by several ranks: each has the gradient of its own query heads' share.
    if (ctx.tp != nullptr && ctx.tp->kv_replicas > 1 && (p == Proj::kK || p == Proj::kV)) ctx.tp->kv_sum(db);
    g.lora[static_cast<int>(p)].b.add_(db, s);
  }
  dla.mul_(s);
  LoraDla out{dla, {}};
  if (!use_dropout(ctx) && packed_a.defined()) {
    gemm_into(dx, dla, packed_a.to(dt), 1.0, 1.0);
    if (column_parallel(ctx, grp)) ctx.tp->sum(out.dla);  // after dx took this rank's share: A's whole gradient
    return out;
  }
  for (int64_t j = 0; j < int64_t(targets.size()); ++j) {
    const int pi = static_cast<int>(targets[j]);
    const at::Tensor dla_p = dla.narrow(1, j * r, r);
    if (use_dropout(ctx)) {  // dx has x's shape
      out.mult.push_back(dropout_multiplier(ctx, targets[j], dx.size(0), dx.size(1)));
      dx.add_((gemm(dla_p, w.lora[pi].a.to(dt)).to(at::kFloat) * out.mult.back()).to(dt));
    } else {
      gemm_into(dx, dla_p, w.lora[pi].a.to(dt), 1.0, 1.0);
    }
  }
  if (column_parallel(ctx, grp)) ctx.tp->sum(out.dla);
  return out;
}

// The other half: accumulates dA (fp32) from d(la) and the group's input x (nothing when d.dla is undefined).
void lora_backward_a(const LayerContext& ctx, const LayerGrads& g, const Group& grp, const at::Tensor& packed_a,
                     const at::Tensor& packed_ga, const LoraDla& d, const at::Tensor& x) {
  if (!d.dla.defined()) return;
  const std::vector<Proj> targets = group_targets(ctx.model->lora, grp);
  const int64_t r = ctx.model->lora.r;
  if (!use_dropout(ctx) && packed_a.defined()) {
    packed_ga.add_(gemm(d.dla.t(), x));
    return;
  }
  for (int64_t j = 0; j < int64_t(targets.size()); ++j) {
    const at::Tensor dla_p = d.dla.narrow(1, j * r, r);
    const at::Tensor xin = use_dropout(ctx) ? (x.to(at::kFloat) * d.mult[j]).to(x.scalar_type()) : x;
    g.lora[static_cast<int>(targets[j])].a.add_(gemm(dla_p.t(), xin));
  }
}

// Both halves: dA and dB (fp32) accumulated, the input gradient added into dx.
void lora_backward(const LayerContext& ctx, const LayerWeights& w, const LayerGrads& g, const Group& grp,
                   const at::Tensor& packed_a, const at::Tensor& packed_ga, const at::Tensor& x,
                   const at::Tensor& dout, const LayerCache& cache, at::Tensor& dx) {
  lora_backward_a(ctx, g, grp, packed_a, packed_ga, lora_backward_b(ctx, w, g, grp, packed_a, dout, cache, dx), x);
}

// The model's RMSNorm of the residual stream: Qwen2/Qwen3's (the fused kernel where asked) or Qwen3.5's (1 + w).
at::Tensor norm_forward(const LayerContext& ctx, const at::Tensor& x, const at::Tensor& w, at::Tensor* rstd) {
  const ModelShape& s = ctx.model->shape;
  if (s.zero_centred_norm) return qwen3_5::zc_rmsnorm_forward(ctx.model->kernels.fused, x, w, s.rms_eps, rstd);
  return kernels::rmsnorm_forward(ctx.model->kernels.fused, x, w, s.rms_eps, rstd);
}
at::Tensor norm_backward(const LayerContext& ctx, const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                         const at::Tensor& rstd, const at::Tensor& dw_acc, const at::Tensor& residual) {
  if (ctx.model->shape.zero_centred_norm) return qwen3_5::zc_rmsnorm_backward(ctx.model->kernels.fused, dy, x, w, rstd, dw_acc, residual);
  return kernels::rmsnorm_backward(ctx.model->kernels.fused, dy, x, w, rstd, dw_acc, residual);
}

// Qwen3.5's gated attention output: attn * sigmoid(gate), the sigmoid rounded to the model dtype as transformers'.
at::Tensor gated_output(const at::Tensor& attn, const at::Tensor& gate) {
  return (attn.to(at::kFloat) * at::sigmoid(gate.to(at::kFloat)).to(gate.scalar_type()).to(at::kFloat))
      .to(attn.scalar_type());
}

// Qwen3.5's query heads and output gates: q_proj gives each head its query, then its gate ((N, H, 2d) rows).
// Returns the attention's q|k|v input (N, (H+2K)d) with each q and k head normalised ((1 + w), per head) and
// rotated over its first rope_dim dimensions; keeps the gate and the norms' inputs and statistics in c.
at::Tensor gated_qkv_forward(const LayerContext& ctx, const LayerWeights& w, const at::Tensor& proj, LayerCache& c) {
  const ModelShape& s = ctx.model->shape;
  const int64_t N = proj.size(0), H = s.heads, K = s.kv_heads, d = s.head_dim;
  const at::Tensor qg = proj.narrow(1, 0, 2 * H * d).view({N, H, 2 * d});
  at::Tensor qkv = at::empty({N, (H + 2 * K) * d}, proj.options());
  at::Tensor q = qkv.narrow(1, 0, H * d).view({N, H, d});
  at::Tensor k = qkv.narrow(1, H * d, K * d).view({N, K, d});
  c.q_pre = qg.narrow(2, 0, d).contiguous();
  c.k_pre = proj.narrow(1, 2 * H * d, K * d).view({N, K, d}).contiguous();
  c.gate = qg.narrow(2, d, d).reshape({N, H * d});
  qkv.narrow(1, (H + K) * d, K * d).copy_(proj.narrow(1, 2 * H * d + K * d, K * d));
  q.copy_(qwen3_5::zc_rmsnorm_forward(ctx.model->kernels.fused, c.q_pre, w.q_norm, s.rms_eps, &c.rstd_q));
  k.copy_(qwen3_5::zc_rmsnorm_forward(ctx.model->kernels.fused, c.k_pre, w.k_norm, s.rms_eps, &c.rstd_k));
  qwen3_5::rope_partial(q, ctx.rope->cos, ctx.rope->sin, ctx.batch, ctx.seq, /*inverse=*/false);
  qwen3_5::rope_partial(k, ctx.rope->cos, ctx.rope->sin, ctx.batch, ctx.seq, /*inverse=*/false);
  return qkv;
}

// Its backward: from d(q|k|v) of the attention and d(gate), d(q_proj|k_proj|v_proj) (N, (2H+2K)d).
at::Tensor gated_qkv_backward(const LayerContext& ctx, const LayerWeights& w, const LayerGrads& g, const LayerCache& c,
                              at::Tensor& dqkv, const at::Tensor& dgate) {
  const ModelShape& s = ctx.model->shape;
  const int64_t N = dqkv.size(0), H = s.heads, K = s.kv_heads, d = s.head_dim;
  at::Tensor dq = dqkv.narrow(1, 0, H * d).view({N, H, d});
  at::Tensor dk = dqkv.narrow(1, H * d, K * d).view({N, K, d});
  qwen3_5::rope_partial(dq, ctx.rope->cos, ctx.rope->sin, ctx.batch, ctx.seq, /*inverse=*/true);
  qwen3_5::rope_partial(dk, ctx.rope->cos, ctx.rope->sin, ctx.batch, ctx.seq, /*inverse=*/true);
  at::Tensor dproj = at::empty({N, 2 * (H + K) * d}, dqkv.options());
  at::Tensor dqg = dproj.narrow(1, 0, 2 * H * d).view({N, H, 2 * d});
  dqg.narrow(2, 0, d).copy_(qwen3_5::zc_rmsnorm_backward(ctx.model->kernels.fused, dq, c.q_pre, w.q_norm, c.rstd_q, g.q_norm, at::Tensor()));
  dqg.narrow(2, d, d).copy_(dgate.view({N, H, d}));
  dproj.narrow(1, 2 * H * d, K * d).view({N, K, d}).copy_(
      qwen3_5::zc_rmsnorm_backward(ctx.model->kernels.fused, dk, c.k_pre, w.k_norm, c.rstd_k, g.k_norm, at::Tensor()));
  dproj.narrow(1, 2 * H * d + K * d, K * d).copy_(dqkv.narrow(1, (H + K) * d, K * d));
  return dproj;
}

// The attention half of a full-attention layer: the output projection's output (N, D) from the normalised input.
at::Tensor attention_mixer_forward(const LayerContext& ctx, const LayerWeights& w, at::Tensor h1, LayerCache& c) {
  const ModelShape& s = ctx.model->shape;
  const KernelOptions& k = ctx.model->kernels;
  const int64_t B = ctx.batch, T = ctx.seq;
  const int64_t H = s.heads, K = s.kv_heads, d = s.head_dim;
  ProfileScope proj("lb::projections");
  // (N, (H+2K)d), or with Qwen3.5's output gates (N, (2H+2K)d)
  at::Tensor qkv = w.b_qkv.defined() ? gemm_bias(w.b_qkv, h1, w.w_qkv.t()) : gemm(h1, w.w_qkv.t());
  lora_forward(ctx, w, kQkv, w.a_qkv, h1, qkv, &c);
  h1 = at::Tensor();
  proj.end();
  // Rotary embedding in place: q, k and v stay token-major in the projection output, which the attention
  // reads through strided views. Qwen3 first normalises each query and key head (q_norm, k_norm): one pass
  // that keeps the norms' inputs and statistics for the backward. Qwen3.5 separates queries from gates first.
  if (s.attn_output_gate) {
    qkv = gated_qkv_forward(ctx, w, qkv, c);
  } else if (s.qk_norm) {
    kernels::qk_norm_rope(k.fused, qkv, w.q_norm, w.k_norm, s.rms_eps, ctx.rope->cos, ctx.rope->sin, B, T, H, K, d,
                          &c.q_pre, &c.k_pre, &c.rstd_q, &c.rstd_k);
  }
  ProfileScope attn("lb::attention");
  if (!s.qk_norm) kernels::rope_qkv(k.fused, qkv, ctx.rope->cos, ctx.rope->sin, B, T, H, K, d, /*inverse=*/false);
  c.attn = attention_forward(k, qkv, B, T, H, K, d, &c.lse);  // (N, H*d)
  c.qkv = qkv;
  qkv = at::Tensor();
  attn.end();

  ProfileScope proj2("lb::projections");
  const at::Tensor o_in = c.gate.defined() ? gated_output(c.attn, c.gate) : c.attn;
  at::Tensor ao = gemm(o_in, w.w_o.t());
  tp_sum(ctx, ao);
  lora_forward(ctx, w, kOnlyO, w.lora[int(Proj::kO)].a, o_in, ao, &c);
  return ao;
}

// The linear-attention half of a Qwen3.5 layer (Gated DeltaNet): out_proj's output (N, D).
at::Tensor linear_mixer_forward(const LayerContext& ctx, const LayerWeights& w, at::Tensor h1, LayerCache& c) {
  const ModelShape& s = ctx.model->shape;
  const int64_t B = ctx.batch, T = ctx.seq, N = B * T;
  const int64_t conv = s.lin_conv_dim(), kd = s.lin_key_dim(), vd = s.lin_value_dim(), hv = s.lin_v_heads;
  ProfileScope proj("lb::projections");
  c.proj = gemm(h1, w.w_in.t());  // (N, conv + vd + 2 hv): q|k|v, z, b, a
  lora_forward(ctx, w, kLinIn, w.a_in, h1, c.proj, &c);
  h1 = at::Tensor();
  proj.end();
  ProfileScope mix("lb::linear_attention");
  c.mixed = qwen3_5::conv_silu_forward(ctx.model->kernels.fused, c.proj.narrow(1, 0, conv), w.conv, B, T);
  const qwen3_5::Gates gates =
      qwen3_5::gates_forward(c.proj.narrow(1, conv + vd + hv, hv), c.proj.narrow(1, conv + vd, hv), w.a_log, w.dt_bias);
  c.core = delta_rule::forward(ctx.model->kernels.fused, c.mixed.narrow(1, 0, kd).view({B, T, s.lin_k_heads, s.lin_k_dim}),
                               c.mixed.narrow(1, kd, kd).view({B, T, s.lin_k_heads, s.lin_k_dim}),
                               c.mixed.narrow(1, 2 * kd, vd).view({B, T, hv, s.lin_v_dim}), gates.g.view({B, T, hv}),
                               gates.beta.view({B, T, hv}))
               .view({N, vd});
  const at::Tensor z = c.proj.narrow(1, conv, vd).reshape({N * hv, s.lin_v_dim});
  at::Tensor normed = qwen3_5::gated_norm_forward(ctx.model->kernels.fused, c.core.view({N * hv, s.lin_v_dim}), z, w.gnorm, s.rms_eps, &c.rstd_g)
                          .view({N, vd});
  mix.end();
  ProfileScope proj2("lb::projections");
  at::Tensor out = gemm(normed, w.w_out.t());
  lora_forward(ctx, w, kLinOut, w.lora[int(Proj::kLinOut)].a, normed, out, &c);
  return out;
}

void forward_full(const LayerContext& ctx, const LayerWeights& w, const at::Tensor& x, LayerCache& c,
                  at::Tensor* y_out) {
  const KernelOptions& k = ctx.model->kernels;
  c.x = x;
  at::Tensor h1 = norm_forward(ctx, x, w.ln1, &c.rstd1);
  at::Tensor ao = ctx.model->shape.is_linear(ctx.layer) ? linear_mixer_forward(ctx, w, std::move(h1), c)
                                                        : attention_mixer_forward(ctx, w, std::move(h1), c);
  c.x2 = x + ao;
  ao = at::Tensor();

  at::Tensor h2 = norm_forward(ctx, c.x2, w.ln2, &c.rstd2);
  ProfileScope proj3("lb::projections");
  c.gu = gemm(h2, w.w_gu.t());  // (N, 2I)
  lora_forward(ctx, w, kGateUp, w.a_gu, h2, c.gu, &c);
  h2 = at::Tensor();
  proj3.end();
  at::Tensor a = kernels::swiglu_forward(k.fused, c.gu);  // (N, I)
  ProfileScope proj4("lb::projections");
  at::Tensor dn = gemm(a, w.w_down.t());
  tp_sum(ctx, dn);
  lora_forward(ctx, w, kOnlyDown, w.lora[int(Proj::kDown)].a, a, dn, &c);
  proj4.end();
  c.full = true;
  if (y_out) *y_out = c.x2 + dn;
}

// Backward of attention_mixer_forward: d(h1) from d(its output) dx2.
at::Tensor attention_mixer_backward(const LayerContext& ctx, const LayerWeights& w, const LayerGrads& g, LayerCache& c,
                                    const at::Tensor& dx2) {
  const ModelShape& s = ctx.model->shape;
  const KernelOptions& k = ctx.model->kernels;
  const int64_t B = ctx.batch, T = ctx.seq;
  const int64_t H = s.heads, K = s.kv_heads, d = s.head_dim;
  // ---- x2 = x + o(attn(rope(q), rope(k), v) [* sigmoid(gate)]) ----
  ProfileScope proj3("lb::projections");
  const at::Tensor o_in = c.gate.defined() ? gated_output(c.attn, c.gate) : c.attn;
  at::Tensor dattn = gemm(dx2, w.w_o);  // (N, H*d)
  if (g.w_o.defined()) g.w_o.add_(gemm(dx2.t(), o_in));
  lora_backward(ctx, w, g, kOnlyO, w.lora[int(Proj::kO)].a, g.lora[int(Proj::kO)].a, o_in, dx2, c, dattn);
  at::Tensor dgate;
  if (c.gate.defined()) {  // y = attn * s, s = sigmoid(gate): d attn = dy s, d gate = dy attn s (1 - s)
    at::Tensor sg = at::sigmoid(c.gate.to(at::kFloat)), dyf = dattn.to(at::kFloat);
    dgate = (dyf * c.attn.to(at::kFloat) * sg * (1 - sg)).to(dattn.scalar_type());
    dattn = (dyf * sg).to(dattn.scalar_type());
  }
  proj3.end();
  ProfileScope attn("lb::attention");
  at::Tensor dqkv = attention_backward(k, dattn, c.qkv, c.attn, c.lse, B, T, H, K, d);  // (N, (H+2K)d)
  if (!s.qk_norm) kernels::rope_qkv(k.fused, dqkv, ctx.rope->cos, ctx.rope->sin, B, T, H, K, d, /*inverse=*/true);
  attn.end();
  if (s.attn_output_gate) {
    dqkv = gated_qkv_backward(ctx, w, g, c, dqkv, dgate);  // (N, (2H+2K)d)
  } else if (s.qk_norm) {
    kernels::qk_norm_rope_backward(k.fused, dqkv, w.q_norm, w.k_norm, ctx.rope->cos, ctx.rope->sin, B, T, H, K, d,
                                   c.q_pre, c.k_pre, c.rstd_q, c.rstd_k, g.q_norm, g.k_norm);
  }
  ProfileScope proj4("lb::projections");
  at::Tensor dh1 = gemm(dqkv, w.w_qkv);  // (N, D)
  at::Tensor h1 = norm_forward(ctx, c.x, w.ln1, nullptr);
  if (g.w_qkv.defined()) g.w_qkv.add_(gemm(dqkv.t(), h1));
  if (g.b_qkv.defined()) g.b_qkv.add_(dqkv.to(at::kFloat).sum(0));
  lora_backward(ctx, w, g, kQkv, w.a_qkv, g.a_qkv, h1, dqkv, c, dh1);
  tp_sum(ctx, dh1);
  return dh1;
}

// Backward of linear_mixer_forward: d(h1) from d(its output) dx2.
at::Tensor linear_mixer_backward(const LayerContext& ctx, const LayerWeights& w, const LayerGrads& g, LayerCache& c,
                                 const at::Tensor& dx2) {
  const ModelShape& s = ctx.model->shape;
  const int64_t B = ctx.batch, T = ctx.seq, N = B * T;
  const int64_t conv = s.lin_conv_dim(), kd = s.lin_key_dim(), vd = s.lin_value_dim(), hv = s.lin_v_heads;
  const int64_t dv = s.lin_v_dim;
  const at::Tensor z = c.proj.narrow(1, conv, vd).reshape({N * hv, dv});
  const at::Tensor core = c.core.view({N * hv, dv});
  ProfileScope proj("lb::projections");
  at::Tensor normed = qwen3_5::gated_norm_forward(ctx.model->kernels.fused, core, z, w.gnorm, s.rms_eps, nullptr).view({N, vd});
  at::Tensor dnormed = gemm(dx2, w.w_out);  // (N, vd)
  if (g.w_out.defined()) g.w_out.add_(gemm(dx2.t(), normed));
  lora_backward(ctx, w, g, kLinOut, w.lora[int(Proj::kLinOut)].a, g.lora[int(Proj::kLinOut)].a, normed, dx2, c,
                dnormed);
  normed = at::Tensor();
  proj.end();

  ProfileScope mix("lb::linear_attention");
  at::Tensor dproj = at::empty({N, s.lin_in_dim()}, dx2.options());
  at::Tensor dz;
  at::Tensor dcore = qwen3_5::gated_norm_backward(ctx.model->kernels.fused, dnormed.view({N * hv, dv}), core, z, w.gnorm, c.rstd_g, &dz, g.gnorm);
  dproj.narrow(1, conv, vd).copy_(dz.view({N, vd}));
  const at::Tensor a = c.proj.narrow(1, conv + vd + hv, hv), b = c.proj.narrow(1, conv + vd, hv);
  const qwen3_5::Gates gates = qwen3_5::gates_forward(a, b, w.a_log, w.dt_bias);
  const delta_rule::Grads dr = delta_rule::backward(
      ctx.model->kernels.fused,
      c.mixed.narrow(1, 0, kd).view({B, T, s.lin_k_heads, s.lin_k_dim}),
      c.mixed.narrow(1, kd, kd).view({B, T, s.lin_k_heads, s.lin_k_dim}),
      c.mixed.narrow(1, 2 * kd, vd).view({B, T, hv, dv}), gates.g.view({B, T, hv}), gates.beta.view({B, T, hv}),
      dcore.view({B, T, hv, dv}));
  at::Tensor dmixed = at::cat({dr.dq.view({N, kd}), dr.dk.view({N, kd}), dr.dv.view({N, vd})}, 1);
  dproj.narrow(1, 0, conv).copy_(qwen3_5::conv_silu_backward(ctx.model->kernels.fused, dmixed, c.proj.narrow(1, 0, conv), w.conv, B, T, g.conv));
  at::Tensor da, db;
  qwen3_5::gates_backward(dr.dg.view({N, hv}), dr.dbeta.view({N, hv}), a, b, w.a_log, w.dt_bias, &da, &db, g.a_log,
                          g.dt_bias);
  dproj.narrow(1, conv + vd, hv).copy_(db);
  dproj.narrow(1, conv + vd + hv, hv).copy_(da);
  mix.end();

  ProfileScope proj2("lb::projections");
  at::Tensor dh1 = gemm(dproj, w.w_in);  // (N, D)
  at::Tensor h1 = norm_forward(ctx, c.x, w.ln1, nullptr);
  if (g.w_in.defined()) g.w_in.add_(gemm(dproj.t(), h1));
  lora_backward(ctx, w, g, kLinIn, w.a_in, g.a_in, h1, dproj, c, dh1);
  return dh1;
}

}  // namespace

Rope make_rope(const ModelShape& s, int64_t seq, c10::Device device) {
  // Every micro-step asks for the same tables. On a GPU they are kept, per shape, length and device, so that a
  // step does not compute them on the host and copy them over (two host-to-device copies, each a wait) every
  // time; they are then held between steps (the planner's probe sees them). On the CPU they cost microseconds
  // and are made anew, so that nothing is held beyond the model state. Read only by the kernels; a handful of
  // entries at most (training and evaluation lengths). Never destroyed: a CUDA tensor freed during static
  // destruction may outlive libtorch's allocator.
  using Key = std::tuple<int64_t, double, int64_t, std::string>;
  static auto& cache = *new std::map<Key, Rope>();
  const bool keep = !device.is_cpu();
  const Key key{s.rope_dim(), s.rope_theta, seq, device.str()};
  if (keep)
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  Rope r;
  r.seq = seq;
  const int64_t d = s.rope_dim();  // the whole head but in Qwen3.5 (a quarter of it)
  // transformers: inv_freq = 1 / theta ** (arange(0, d, 2).float() / d); freqs = positions x inv_freq.
  at::Tensor exps = at::arange(0, d, 2, at::kLong).to(at::kFloat) / double(d);
  at::Tensor inv = at::pow(s.rope_theta, exps).reciprocal();
  at::Tensor pos = at::arange(seq, at::kLong).to(at::kFloat);
  at::Tensor f = at::outer(pos, inv);  // (T, d/2)
  r.cos = f.cos().contiguous().to(device);
  r.sin = f.sin().contiguous().to(device);
  if (keep) {
    if (cache.size() >= 16) cache.clear();
    cache.emplace(key, r);
  }
  return r;
}

namespace {

// The adapters of a layer inside a flat buffer with the trainable layout (parameters or gradients).
void bind_lora(const ModelLayout& m, const UnitLayout& u, const at::Tensor& flat, LoraPair* pairs, at::Tensor* a_qkv,
               at::Tensor* a_gu, at::Tensor* a_in) {
  const ModelShape& s = m.shape;
  const int64_t r = m.lora.r;
  for (int i = 0; i < kNumProj; ++i) {
    Proj p = static_cast<Proj>(i);
    if (!m.lora.targets(p) || !layer_has_proj(s, u.layer, p)) continue;
    pairs[i].a = slot_view(flat, *u.find_trainable(lora_tensor_name(u.layer, p, true)));
    pairs[i].b = slot_view(flat, *u.find_trainable(lora_tensor_name(u.layer, p, false)));
  }
  auto packed_a = [&](const Group& grp, int64_t in) {
    int count = 0;
    const Slot* first = nullptr;
    for (int i = 0; i < grp.n; ++i) {
      if (!m.lora.targets(grp.members[i]) || !layer_has_proj(s, u.layer, grp.members[i])) continue;
      if (!first) first = u.find_trainable(lora_tensor_name(u.layer, grp.members[i], true));
      ++count;
    }
    return first ? packed_view(flat, *first, count * r, in) : at::Tensor();
  };
  if (s.is_linear(u.layer)) {
    *a_in = packed_a(kLinIn, s.hidden);
  } else {
    *a_qkv = packed_a(kQkv, s.hidden);
  }
  *a_gu = packed_a(kGateUp, s.hidden);
}

}  // namespace

LayerWeights bind_layer_weights(const ModelLayout& m, const UnitLayout& u, const at::Tensor& compute_flat,
                                const at::Tensor& trainable_flat) {
  const ModelShape& s = m.shape;
  LayerWeights w;
  auto n = [&](const char* suffix) { return layer_tensor_name(u.layer, suffix); };
  auto view = [&](const char* suffix) { return slot_view(compute_flat, u.compute_slot(n(suffix))); };
  w.ln1 = view("input_layernorm.weight");
  if (s.is_linear(u.layer)) {
    w.w_in = packed_view(compute_flat, u.compute_slot(n("linear_attn.in_proj_qkv.weight")), s.lin_in_dim(), s.hidden);
    w.conv = view("linear_attn.conv1d.weight").view({s.lin_conv_dim(), s.conv_kernel});
    w.dt_bias = view("linear_attn.dt_bias");
    w.a_log = view("linear_attn.A_log");
    w.gnorm = view("linear_attn.norm.weight");
    w.w_out = view("linear_attn.out_proj.weight");
  } else {
    w.w_qkv = packed_view(compute_flat, u.compute_slot(n("self_attn.q_proj.weight")), s.q_proj_dim() + 2 * s.kv_dim(),
                          s.hidden);
    if (s.qkv_bias)
      w.b_qkv = compute_flat.narrow(0, u.compute_slot(n("self_attn.q_proj.bias")).offset, s.q_dim() + 2 * s.kv_dim());
    if (s.qk_norm) {
      w.q_norm = view("self_attn.q_norm.weight");
      w.k_norm = view("self_attn.k_norm.weight");
    }
    w.w_o = view("self_attn.o_proj.weight");
  }
  w.ln2 = view("post_attention_layernorm.weight");
  w.w_gu = packed_view(compute_flat, u.compute_slot(n("mlp.gate_proj.weight")), 2 * s.intermediate, s.hidden);
  w.w_down = view("mlp.down_proj.weight");
  if (m.lora.enabled) bind_lora(m, u, trainable_flat, w.lora, &w.a_qkv, &w.a_gu, &w.a_in);
  return w;
}

LayerGrads bind_layer_grads(const ModelLayout& m, const UnitLayout& u, const at::Tensor& grad_flat) {
  LayerGrads g;
  if (m.full_finetune) {
    // The gradient buffer has the compute layout, so the weights' binding gives the gradients' views.
    LayerWeights w = bind_layer_weights(m, u, grad_flat, at::Tensor());
    g.ln1 = w.ln1;
    g.w_qkv = w.w_qkv;
    g.b_qkv = w.b_qkv;
    g.q_norm = w.q_norm;
    g.k_norm = w.k_norm;
    g.w_o = w.w_o;
    g.w_in = w.w_in;
    g.conv = w.conv;
    g.dt_bias = w.dt_bias;
    g.a_log = w.a_log;
    g.gnorm = w.gnorm;
    g.w_out = w.w_out;
    g.ln2 = w.ln2;
    g.w_gu = w.w_gu;
    g.w_down = w.w_down;
  } else {
    bind_lora(m, u, grad_flat, g.lora, &g.a_qkv, &g.a_gu, &g.a_in);
  }
  return g;
}

at::Tensor rmsnorm_forward(const KernelOptions& k, const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd,
                           bool zero_centred) {
  if (zero_centred) return qwen3_5::zc_rmsnorm_forward(k.fused, x, w, eps, rstd);
  return kernels::rmsnorm_forward(k.fused, x, w, eps, rstd);
}

at::Tensor rmsnorm_backward(const KernelOptions& k, const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& rstd, const at::Tensor& dw_acc, bool zero_centred) {
  if (zero_centred) return qwen3_5::zc_rmsnorm_backward(k.fused, dy, x, w, rstd, dw_acc, at::Tensor());
  return kernels::rmsnorm_backward(k.fused, dy, x, w, rstd, dw_acc, at::Tensor());
}

at::Tensor rmsnorm_forward_reference(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd) {
  ProfileScope scope("lb::norm");
  at::Tensor xf = x.to(at::kFloat);
  // sum * (1/D) rather than mean: with grad mode on, libtorch 1.13's mean(-1, true) kept its whole input
  // alive for backward; sum does not (docs/model.md).
  at::Tensor r = at::rsqrt(xf.pow(2).sum(-1, true).mul_(1.0 / double(x.size(-1))).add_(eps));
  if (rstd) *rstd = r;
  return w * (xf * r).to(x.scalar_type());
}

at::Tensor rmsnorm_backward_reference(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                      const at::Tensor& rstd, const at::Tensor& dw_acc) {
  ProfileScope scope("lb::norm");
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor y = xf * rstd;  // normalised, fp32
  if (dw_acc.defined()) dw_acc.add_((dy.to(at::kFloat) * y.to(x.scalar_type()).to(at::kFloat)).sum(0));
  at::Tensor dn = (dy * w).to(at::kFloat);
  at::Tensor dot = (dn * y).sum(-1, true).mul_(1.0 / double(x.size(-1)));
  return ((dn - y * dot) * rstd).to(x.scalar_type());
}

at::Tensor layer_forward(const LayerContext& ctx, const LayerWeights& w, const at::Tensor& x, LayerCache* cache,
                         bool keep_only_input) {
  LayerCache local;
  LayerCache& c = (cache != nullptr && !keep_only_input) ? *cache : local;
  c = LayerCache();
  at::Tensor y;
  forward_full(ctx, w, x, c, &y);
  if (cache != nullptr && keep_only_input) {
    *cache = LayerCache();
    cache->x = x;
  }
  return y;
}

at::Tensor layer_backward(const LayerContext& ctx, const LayerWeights& w, const LayerGrads& g, LayerCache& c,
                          const at::Tensor& dy) {
  if (!c.full) {  // activation checkpointing: recompute this layer's forward from its input
    at::Tensor x = c.x;
    forward_full(ctx, w, x, c, nullptr);
  }
  const KernelOptions& k = ctx.model->kernels;

  // ---- MLP: y = x2 + down(silu(gate) * up) ----
  // The down projection's input a is recomputed by SwiGLU's backward (the forward does not keep it), so its
  // weight gradients come after that, the input gradient da before.
  ProfileScope proj("lb::projections");
  at::Tensor da = gemm(dy, w.w_down);  // (N, I)
  const at::Tensor& down_a = w.lora[int(Proj::kDown)].a;
  const LoraDla dla_down = lora_backward_b(ctx, w, g, kOnlyDown, down_a, dy, c, da);
  proj.end();
  at::Tensor a;                                             // (N, I)
  at::Tensor dgu = kernels::swiglu_backward(k.fused, c.gu, da, &a);  // (N, 2I)
  ProfileScope proj2("lb::projections");
  if (g.w_down.defined()) g.w_down.add_(gemm(dy.t(), a));
  lora_backward_a(ctx, g, kOnlyDown, down_a, g.lora[int(Proj::kDown)].a, dla_down, a);
  a = at::Tensor();
  at::Tensor dh2 = gemm(dgu, w.w_gu);  // (N, D)
  // The norms' outputs are recomputed (cheaper than keeping them): the gate/up input.
  at::Tensor h2 = norm_forward(ctx, c.x2, w.ln2, nullptr);
  if (g.w_gu.defined()) g.w_gu.add_(gemm(dgu.t(), h2));
  lora_backward(ctx, w, g, kGateUp, w.a_gu, g.a_gu, h2, dgu, c, dh2);
  tp_sum(ctx, dh2);
  proj2.end();
  at::Tensor dx2 = norm_backward(ctx, dh2, c.x2, w.ln2, c.rstd2, g.ln2, dy);

  // ---- the token mixer: x2 = x + mixer(norm(x)) ----
  at::Tensor dh1 = ctx.model->shape.is_linear(ctx.layer) ? linear_mixer_backward(ctx, w, g, c, dx2)
                                                         : attention_mixer_backward(ctx, w, g, c, dx2);
  return norm_backward(ctx, dh1, c.x, w.ln1, c.rstd1, g.ln1, dx2);
}

at::Tensor shift_targets(const at::Tensor& labels) {
  at::Tensor t = at::full_like(labels, -100);
  const int64_t T = labels.size(1);
  if (T > 1) t.narrow(1, 0, T - 1).copy_(labels.narrow(1, 1, T - 1));
  return t;
}

HeadPartial head_partial(const KernelOptions& k, const at::Tensor& h, const at::Tensor& emb_rows, int64_t row0,
                         const at::Tensor& targets, int64_t chunk) {
  const int64_t N = h.size(0), V = emb_rows.size(0);
  const auto f32 = h.options().dtype(at::kFloat);
  HeadPartial hp;
  hp.m = at::full({N}, -std::numeric_limits<float>::infinity(), f32);
  hp.se = at::zeros({N}, f32);
  hp.zt = at::zeros({N}, f32);
  hp.U = at::zeros({N, h.size(1)}, f32);
  at::Tensor rescale = at::empty({N}, f32);
  at::Tensor p;  // exp(z - m) of a chunk, reused
  at::Tensor local_all = (targets - row0).contiguous();  // target row relative to emb_rows
  for (int64_t v0 = 0; v0 < V; v0 += chunk) {
    const int64_t cn = std::min(chunk, V - v0);
    at::Tensor e = emb_rows.narrow(0, v0, cn);
    at::Tensor z = gemm(h, e.t());  // (N, cn) logits, model dtype
    at::Tensor local = local_all - v0;
    kernels::online_softmax_chunk(k.fused, z, hp.m, hp.se, rescale, p, local, hp.zt);
    at::Tensor pv = p.narrow(0, 0, N * cn).view({N, cn});
    hp.U.mul_(rescale.view({N, 1})).add_(gemm(pv, e));
  }
  hp.m = hp.m.view({N, 1});
  hp.se = hp.se.view({N, 1});
  return hp;
}

void head_weight_grad(const at::Tensor& h, const at::Tensor& emb_rows, int64_t row0, const at::Tensor& targets,
                      const at::Tensor& lse, const at::Tensor& token_scale, const at::Tensor& dE_rows, int64_t chunk) {
  const int64_t N = h.size(0), V = emb_rows.size(0);
  const auto dt = h.scalar_type();
  at::Tensor local_all = targets - row0;
  at::Tensor scale = token_scale.view({N, 1});
  for (int64_t v0 = 0; v0 < V; v0 += chunk) {
    const int64_t cn = std::min(chunk, V - v0);
    at::Tensor e = emb_rows.narrow(0, v0, cn);
    at::Tensor pz = (gemm(h, e.t()).to(at::kFloat) - lse).exp_();  // softmax columns of this chunk
    at::Tensor in_chunk = local_all.ge(v0).logical_and_(local_all.lt(v0 + cn));
    at::Tensor local = (local_all - v0).clamp_(0, cn - 1).view({N, 1});
    pz.scatter_add_(1, local, -in_chunk.to(at::kFloat).view({N, 1}));
    pz.mul_(scale);
    dE_rows.narrow(0, v0, cn).add_(gemm(pz.to(dt).t(), h));
  }
}

HeadLoss head_loss(const KernelOptions& k, const at::Tensor& h, const at::Tensor& emb, const at::Tensor& targets,
                   double grad_scale, const at::Tensor& dE_acc, int64_t chunk) {
  ProfileScope scope("lb::head_loss");
  at::Tensor valid = targets.ne(-100);
  at::Tensor tgt = targets.clamp_min(0);
  // One pass: online log-sum-exp, the target logits, and U = sum_c exp(z_c - m) E_c, so that
  // dh = (U / sumexp - E[target]) * scale needs no second pass when the head is frozen.
  HeadPartial hp = head_partial(k, h, emb, 0, tgt, chunk);
  HeadTerms t = head_terms(hp, at::Tensor(), hp.m, hp.se, hp.zt, emb, 0, tgt, valid, grad_scale);
  HeadLoss out;
  out.counted = valid.sum();
  out.loss_sum = t.losses.to(at::kDouble).sum();
  out.dh = t.d.to(h.scalar_type());
  // A trainable head (full fine-tuning) needs softmax - onehot per column: a second pass with the final lse.
  if (dE_acc.defined()) head_weight_grad(h, emb, 0, tgt, t.lse, t.token_scale, dE_acc, chunk);
  return out;
}

at::Tensor head_rescale(const HeadPartial& hp, const at::Tensor& M) { return (hp.m - M).exp_(); }

HeadTerms sharded_head_terms(const KernelOptions& k, const at::Tensor& h_all, const at::Tensor& emb_rows, int64_t row0,
                             const at::Tensor& targets, const at::Tensor& valid, double grad_scale, int64_t chunk,
                             const HeadReductions& across_ranks) {
  HeadPartial hp = head_partial(k, h_all, emb_rows, row0, targets, chunk);
  // A common max, then sums; head_terms does the rest.
  at::Tensor M = hp.m.clone();
  across_ranks.max(M);
  at::Tensor f = head_rescale(hp, M);  // 0 where this caller has no rows
  const int64_t WN = h_all.size(0);
  at::Tensor sums = at::cat({hp.se.mul(f).view({WN}), hp.zt});  // (2*W*N)
  across_ranks.sum(sums);
  return head_terms(hp, f, M, sums.narrow(0, 0, WN).view({WN, 1}), sums.narrow(0, WN, WN), emb_rows, row0, targets,
                    valid, grad_scale);
}

HeadTerms head_terms(const HeadPartial& hp, const at::Tensor& f, const at::Tensor& M, const at::Tensor& se,
                     const at::Tensor& zt, const at::Tensor& emb_rows, int64_t row0, const at::Tensor& targets,
                     const at::Tensor& valid, double grad_scale) {
  const int64_t N = targets.size(0), rows = emb_rows.size(0);
  HeadTerms t;
  t.lse = M + se.log();
  t.losses = (t.lse.view({N}) - zt).mul_(valid);
  t.token_scale = valid.to(at::kFloat).mul_(grad_scale);
  at::Tensor local = targets - row0;
  at::Tensor e_t = emb_rows.index_select(0, local.clamp(0, std::max<int64_t>(rows - 1, 0))).to(at::kFloat);
  e_t.mul_(local.ge(0).logical_and_(local.lt(rows)).view({N, 1}));  // targets in another rank's rows: 0
  at::Tensor u = f.defined() ? hp.U * f : hp.U;
  t.d = (u / se - e_t) * t.token_scale.view({N, 1});
  return t;
}

HeadLoss head_loss_reference(const at::Tensor& h, const at::Tensor& emb, const at::Tensor& targets,
                             double grad_scale, const at::Tensor& dE_acc) {
  ProfileScope scope("lb::head_loss");
  const int64_t N = h.size(0);
  const auto dt = h.scalar_type();
  at::Tensor valid = targets.ne(-100);
  at::Tensor tgt = targets.clamp_min(0).view({N, 1});
  at::Tensor logits = gemm(h, emb.t()).to(at::kFloat);  // (N, V)
  at::Tensor logp = at::log_softmax(logits, 1);
  HeadLoss out;
  out.counted = valid.sum();
  out.loss_sum = (-logp.gather(1, tgt).view({N}) * valid).to(at::kDouble).sum();
  at::Tensor dz = logp.exp();
  dz.scatter_add_(1, tgt, -at::ones({N, 1}, dz.options()));
  dz.mul_(valid.to(at::kFloat).mul(grad_scale).view({N, 1}));
  at::Tensor dz_dt = dz.to(dt);
  out.dh = gemm(dz_dt, emb);
  if (dE_acc.defined()) dE_acc.add_(gemm(dz_dt.t(), h));
  return out;
}

at::Tensor head_logits(const at::Tensor& h, const at::Tensor& emb) { return gemm(h, emb.t()).to(at::kFloat); }

}  // namespace lorabench::model
