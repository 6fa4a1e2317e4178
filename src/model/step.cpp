#include "lorabench/model/step.hpp"

#include <ATen/ATen.h>

#include "lorabench/core/error.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/model/weights.hpp"

namespace lorabench::model {

double MicroResult::loss() const { return loss_sum.item<double>(); }
int64_t MicroResult::tokens() const { return counted.item<int64_t>(); }

at::Tensor embedding_of(const ModelLayout& m, const at::Tensor& c) {
  return slot_view(c, m.units.front().compute_slot("model.embed_tokens.weight"));
}
at::Tensor final_norm_of(const ModelLayout& m, const at::Tensor& c) {
  return slot_view(c, m.units[m.final_unit()].compute_slot("model.norm.weight"));
}
at::Tensor head_of(const ModelLayout& m, const at::Tensor& c) {
  return m.shape.tie_embeddings ? embedding_of(m, c)
                                : slot_view(c, m.units[m.head_unit()].compute_slot("lm_head.weight"));
}

at::Tensor embed_rows_lookup(const at::Tensor& rows, int64_t row0, const at::Tensor& ids) {
  const int64_t n = rows.size(0);
  at::Tensor local = ids - row0;
  at::Tensor own = local.ge(0).logical_and_(local.lt(n));
  return rows.index_select(0, local.clamp(0, n - 1)).mul_(own.view({-1, 1}).to(rows.scalar_type()));
}

at::Tensor UnitProvider::embed_lookup(const ModelLayout& m, const at::Tensor& ids) {
  at::Tensor x = embedding_of(m, compute(0, Pass::kForward)).index_select(0, ids);
  release(0, Pass::kForward);
  return x;
}

HeadLoss UnitProvider::lm_head_loss(const ModelLayout& m, const at::Tensor& hn, const at::Tensor& targets,
                                    double grad_scale, int64_t chunk) {
  const int u = m.head_unit();
  at::Tensor dE = m.full_finetune ? head_of(m, grad(u)) : at::Tensor();
  at::Tensor emb = head_of(m, compute(u, Pass::kForward));
  HeadLoss hl = chunk > 0 ? head_loss(m.kernels, hn, emb, targets, grad_scale, dE, chunk)
                          : head_loss_reference(hn, emb, targets, grad_scale, dE);
  release(u, Pass::kForward);
  return hl;
}

void UnitProvider::embed_backward(const ModelLayout& m, const at::Tensor& ids, const at::Tensor& dx) {
  embedding_of(m, grad(0)).index_add_(0, ids, dx.to(at::kFloat));
}

namespace {

// One micro-batch: the forward pass, and the backward pass when `train` (else no activations are kept and
// nothing is accumulated: evaluation).
MicroResult run_micro(const ModelLayout& m, UnitProvider& p, const MicroBatch& mb, const StepOptions& opt, bool train) {
  const int64_t B = mb.ids.size(0), T = mb.ids.size(1), N = B * T;
  const int L = static_cast<int>(m.shape.layers);
  const int kEmbed = 0, kFinal = m.final_unit(), kHead = m.head_unit();
  MicroResult res;
  Rope rope = make_rope(m.shape, T, mb.ids.device());
  at::Tensor ids = mb.ids.reshape({N});
  at::Tensor targets = mb.targets.reshape({N});
  auto note = [&](int unit, Pass pass, double t0) {
    if (opt.on_unit) opt.on_unit(m.units[unit].name, pass, t0, sys::now_s());
  };

  auto pass_edge = [&](Pass pass, bool begin) {
    if (opt.on_pass) opt.on_pass(pass, begin, sys::now_s());
  };

  // ---- forward ----
  pass_edge(Pass::kForward, true);
  double t0 = sys::now_s();
  at::Tensor x = p.embed_lookup(m, ids);  // (N, D)
  note(kEmbed, Pass::kForward, t0);

  std::vector<LayerCache> caches(static_cast<size_t>(L));
  LayerContext ctx;
  ctx.model = &m;
  ctx.rope = &rope;
  ctx.batch = B;
  ctx.seq = T;
  ctx.dropout = DropoutKey{mb.dropout_seed, mb.dropout};
  ctx.device = mb.ids.device();
  ctx.tp = p.tensor_parallel();
  for (int l = 0; l < L; ++l) {
    const int u = 1 + l;
    t0 = sys::now_s();
    ctx.layer = l;
    LayerWeights w = bind_layer_weights(m, m.units[u], p.compute(u, Pass::kForward), p.trainable(u, Pass::kForward));
    x = layer_forward(ctx, w, x, train ? &caches[l] : nullptr, opt.activation_checkpointing);
    w = LayerWeights();
    p.release(u, Pass::kForward);
    note(u, Pass::kForward, t0);
  }

  t0 = sys::now_s();
  at::Tensor norm_w = final_norm_of(m, p.compute(kFinal, Pass::kForward));
  at::Tensor rstd;
  at::Tensor hn = rmsnorm_forward(m.kernels, x, norm_w, m.shape.rms_eps, &rstd, m.shape.zero_centred_norm);
  HeadLoss hl = p.lm_head_loss(m, hn, targets, mb.grad_scale, opt.head_chunk);
  hn = at::Tensor();
  res.loss_sum = hl.loss_sum;
  res.counted = hl.counted;
  pass_edge(Pass::kForward, false);
  if (!train) {
    norm_w = at::Tensor();
    p.release(kFinal, Pass::kForward);
    return res;
  }

  // ---- backward ----
  pass_edge(Pass::kBackward, true);
  if (kHead != kEmbed) p.backward_done(kHead);
  at::Tensor norm_grad = m.full_finetune ? final_norm_of(m, p.grad(kFinal)) : at::Tensor();
  at::Tensor dx = rmsnorm_backward(m.kernels, hl.dh, x, norm_w, rstd, norm_grad, m.shape.zero_centred_norm);
  norm_w = at::Tensor();
  p.release(kFinal, Pass::kForward);
  p.backward_done(kFinal);
  note(kFinal, Pass::kBackward, t0);

  for (int l = L - 1; l >= 0; --l) {
    const int u = 1 + l;
    t0 = sys::now_s();
    ctx.layer = l;
    LayerWeights w =
        bind_layer_weights(m, m.units[u], p.compute(u, Pass::kBackward), p.trainable(u, Pass::kBackward));
    LayerGrads g = bind_layer_grads(m, m.units[u], p.grad(u));
    dx = layer_backward(ctx, w, g, caches[l], dx);
    caches[l] = LayerCache();
    w = LayerWeights();
    g = LayerGrads();
    p.release(u, Pass::kBackward);
    p.backward_done(u);
    note(u, Pass::kBackward, t0);
  }

  t0 = sys::now_s();
  if (m.full_finetune) p.embed_backward(m, ids, dx);
  p.backward_done(kEmbed);
  note(kEmbed, Pass::kBackward, t0);
  pass_edge(Pass::kBackward, false);
  return res;
}

}  // namespace

MicroResult forward_backward(const ModelLayout& m, UnitProvider& p, const MicroBatch& mb, const StepOptions& opt) {
  return run_micro(m, p, mb, opt, true);
}

MicroResult forward_loss(const ModelLayout& m, UnitProvider& p, const MicroBatch& mb, const StepOptions& opt) {
  MicroBatch eval = mb;
  eval.grad_scale = 0;
  eval.dropout = false;
  return run_micro(m, p, eval, opt, false);
}

at::Tensor forward_logits(const ModelLayout& m, UnitProvider& p, const at::Tensor& ids,
                          std::vector<at::Tensor>* hidden) {
  const int64_t B = ids.size(0), T = ids.size(1), N = B * T;
  const int L = static_cast<int>(m.shape.layers);
  Rope rope = make_rope(m.shape, T, ids.device());
  at::Tensor x = p.embed_lookup(m, ids.reshape({N}));
  LayerContext ctx;
  ctx.model = &m;
  ctx.rope = &rope;
  ctx.batch = B;
  ctx.seq = T;
  ctx.device = ids.device();
  LB_CHECK(p.tensor_parallel() == nullptr, "forward_logits: the logits of a tensor-parallel model are not gathered");
  for (int l = 0; l < L; ++l) {
    if (hidden) hidden->push_back(x.view({B, T, -1}).to(at::kFloat));
    ctx.layer = l;
    LayerWeights w = bind_layer_weights(m, m.units[1 + l], p.compute(1 + l, Pass::kForward),
                                        p.trainable(1 + l, Pass::kForward));
    x = layer_forward(ctx, w, x, nullptr);
    p.release(1 + l, Pass::kForward);
  }
  const int kFinal = m.final_unit(), kHead = m.head_unit();
  at::Tensor hn = rmsnorm_forward(m.kernels, x, final_norm_of(m, p.compute(kFinal, Pass::kForward)), m.shape.rms_eps, nullptr,
                                  m.shape.zero_centred_norm);
  p.release(kFinal, Pass::kForward);
  if (hidden) hidden->push_back(hn.view({B, T, -1}).to(at::kFloat));
  at::Tensor logits = head_logits(hn, head_of(m, p.compute(kHead, Pass::kForward))).view({B, T, -1});
  p.release(kHead, Pass::kForward);
  return logits;
}

}  // namespace lorabench::model
