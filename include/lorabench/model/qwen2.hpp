// The Qwen2 decoder with LoRA, forward and backward written out by hand (llm.c style) on ATen ops.
//
// The math is transformers' Qwen2ForCausalLM + PEFT LoRA (tests/unit/test_model_reference.cpp checks it
// against their outputs): RMSNorm in fp32, cast back, scaled by the weight; q/k/v with bias, o/gate/up/
// down without; rotary embedding (rotate-half) with theta from the config; grouped-query attention
// (query head h uses KV head h / (heads / kv_heads)); causal softmax in fp32; SwiGLU; final norm; the
// LM head tied to the embedding or separate; causal-LM loss (shift by one, ignore -100, mean over
// counted tokens). LoRA: y = base(x) + scaling * B(A(dropout(x))), A and B in fp32, the branch computed
// in fp32 and added before rounding to the model dtype.
//
// Why by hand instead of autograd: the training strategies (FSDP gathers and frees a layer's weights
// around its forward and its backward, DDP starts a bucket's all-reduce the moment its layers finished
// backward, activation checkpointing recomputes one layer) need exactly these seams, frozen weights need
// no weight-gradient GEMMs, and the saved activations are chosen, not whatever autograd keeps.
//
// Shapes: B sequences x T tokens, N = B*T rows; D hidden, H heads, K kv heads, G = H/K, d head dim,
// I intermediate, V vocabulary. Activations are 2-d (N, features) in the model dtype `dt`.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lorabench/model/layout.hpp"

namespace lorabench::model {

// Rotary tables for positions 0..T-1: cos and sin of (T, r/2), fp32, computed as transformers does (r: the rotated
// dimensions of a head, ModelShape::rope_dim).
struct Rope {
  int64_t seq = 0;
  at::Tensor cos, sin;
};
// Computed on the CPU (the same values on every device), then moved to `device`.
Rope make_rope(const ModelShape& s, int64_t seq, c10::Device device = c10::Device(c10::DeviceType::CPU));

struct LoraPair {
  at::Tensor a, b;  // a (r, in), b (out, r); undefined when the projection has no adapter
};

// Views of one decoder layer's full weights. Base weights are in the model dtype; LoRA in fp32.
// A full-attention layer has the attention's members, a linear-attention layer (Qwen3.5, ModelShape::is_linear)
// the linear ones; both have the norms and the MLP.
struct LayerWeights {
  at::Tensor ln1, w_qkv, b_qkv, w_o, ln2, w_gu, w_down;  // w_qkv ((H+2K)d, D), w_gu (2I, D); b_qkv: Qwen2 only
                                                          // (Qwen3.5: q_proj's rows are each head's query, then
                                                          // its output gate: w_qkv ((2H+2K)d, D))
  at::Tensor q_norm, k_norm;                              // (d): Qwen3, Qwen3.5 (ModelShape::qk_norm)
  // Linear attention: in_proj_qkv|z|b|a packed (lin_in_dim, D), the depthwise convolution (conv_dim, kernel),
  // dt_bias and A_log (Hv), the gated norm's weight (dv), out_proj (D, Hv*dv).
  at::Tensor w_in, conv, dt_bias, a_log, gnorm, w_out;
  LoraPair lora[kNumProj];
  at::Tensor a_qkv, a_gu, a_in;  // the A matrices of the targeted q/k/v (gate/up, in_proj_*), packed: (n*r, in)
};

// Views into an fp32 gradient buffer; undefined members are not trained. Backward accumulates (+=).
struct LayerGrads {
  at::Tensor ln1, w_qkv, b_qkv, w_o, ln2, w_gu, w_down;
  at::Tensor q_norm, k_norm;
  at::Tensor w_in, conv, dt_bias, a_log, gnorm, w_out;
  LoraPair lora[kNumProj];
  at::Tensor a_qkv, a_gu, a_in;
};

// compute_flat: the unit's compute buffer (model dtype); trainable_flat: its fp32 trainable buffer
// (LoRA), or undefined. With full fine-tuning the trainable buffer holds the master weights and the
// compute buffer their model-dtype copy (the same storage in fp32).
LayerWeights bind_layer_weights(const ModelLayout& m, const UnitLayout& u, const at::Tensor& compute_flat,
                                const at::Tensor& trainable_flat);
LayerGrads bind_layer_grads(const ModelLayout& m, const UnitLayout& u, const at::Tensor& grad_flat);

// Dropout on the LoRA branch input is generated from a key, not stored: backward and recomputation
// regenerate the same mask. key = (micro-batch seed, layer, projection).
struct DropoutKey {
  uint64_t seed = 0;
  bool active = false;  // false: no dropout (p = 0 or evaluation)
};

// What one layer's forward keeps for its backward.
// The attention probabilities and the normalised layer inputs are not kept: the backward recomputes them
// from q, k and from x, x2 (one small GEMM and two norm passes, against 4.6 MB per layer at T = 256).
struct LayerCache {
  at::Tensor x;             // (N, D) layer input (the only tensor kept with activation checkpointing)
  at::Tensor rstd1;         // (N, 1) fp32
  at::Tensor qkv;           // (N, (H+2K)d) q|k|v projections after the rotary embedding (and Qwen3's q/k norms)
  at::Tensor q_pre, k_pre;  // Qwen3: (N*H, d), (N*K, d) the q and k heads before their norms (model dtype)
  at::Tensor rstd_q, rstd_k;  // and the norms' statistics, (N*H, 1), (N*K, 1) fp32 (Qwen3.5: (N, H|K, d|1))
  at::Tensor gate;          // Qwen3.5's full attention: (N, H*d) the output gate before its sigmoid
  at::Tensor proj;          // Qwen3.5's linear attention: (N, lin_in_dim) in_proj_qkv|z|b|a outputs,
  at::Tensor mixed;         // (N, conv_dim) the convolution's output (the delta rule's q|k|v),
  at::Tensor core, rstd_g;  // (N, Hv*dv) the delta rule's output, the gated norm's statistics (N*Hv, 1)
  at::Tensor attn, lse;     // (N, H*d) attention output before o_proj; (B, H, T) fp32 log-sum-exp per query
  at::Tensor x2, rstd2;     // residual after attention, its norm statistic
  at::Tensor gu;            // (N, 2I) gate and up projections
  at::Tensor la[4];         // dropout(x) A^T of each projection group's adapters (qkv, o, gate|up, down):
                            // (N, n*r) in the model dtype
  bool full = false;        // false: only x (activation checkpointing)
};

// Tensor parallelism inside a layer (model/tensor_parallel.hpp): the layer computes this rank's heads and MLP
// slice, and these collectives over the tensor-parallel group make its results whole. Forward: the row-parallel
// outputs (o, down) and their adapters' A products are summed before the residual add (the adapters' B, which
// every rank holds, are applied once, after the sum). Backward: the column-parallel inputs' gradients (into q|k|v
// and gate|up) are summed, and so are those adapters' d(x A^T), so that every rank's copy of A gets the whole
// gradient; where key/value heads are replicated, their adapters' B gradients are summed over the ranks that share
// the head. Every rank of the group calls them in the same order.
struct TensorParallel {
  std::function<void(at::Tensor&)> sum;     // in place, over the tensor-parallel group (contiguous tensors)
  std::function<void(at::Tensor&)> kv_sum;  // in place, over the ranks holding this rank's key/value heads
  int kv_replicas = 1;                      // ranks per key/value head
  // Where this rank's input columns of o and down lie in the full model's (for the adapters' dropout masks, which
  // are drawn for the full input so that a run reproduces one rank's).
  int64_t o_in_offset = 0, o_in_full = 0, down_in_offset = 0, down_in_full = 0;
};

struct LayerContext {
  const ModelLayout* model = nullptr;
  const TensorParallel* tp = nullptr;  // tensor parallelism, or nullptr (the layer is whole)
  const Rope* rope = nullptr;
  int64_t batch = 0, seq = 0;
  DropoutKey dropout;
  int layer = 0;
  c10::Device device = c10::Device(c10::DeviceType::CPU);  // where the activations live (dropout masks go there)
};

// y = layer(x). With cache != nullptr the activations for backward are kept in it (cache->full), or
// only the input when keep_only_input (activation checkpointing).
at::Tensor layer_forward(const LayerContext& ctx, const LayerWeights& w, const at::Tensor& x, LayerCache* cache,
                         bool keep_only_input = false);

// dx = d layer / dx (dy); accumulates weight gradients into g. Recomputes the forward first when the
// cache holds only the input.
at::Tensor layer_backward(const LayerContext& ctx, const LayerWeights& w, const LayerGrads& g, LayerCache& cache,
                          const at::Tensor& dy);

// The kernel settings (KernelOptions, layout.hpp) from their names: auto | flash | efficient, and
// auto | flash | blocked.
CudaAttention parse_cuda_attention(const std::string& name);
CpuAttention parse_cpu_attention(const std::string& name);
bool cpu_blocked_attention_available();
// The attention kernel a model of this dtype runs with `k`, for the run file: "flash" or "efficient" on a
// GPU; on the CPU "cpu_blocked" (lorabench's) or "cpu_flash" (libtorch's CPU flash kernel).
std::string attention_kernel(const KernelOptions& k, bool cuda, bool bf16);

// RMSNorm: y = w * (x / rms(x)).to(dt), statistics in fp32. rstd receives (N, 1). (A fused kernel unless
// k.fused is false; the *_reference versions are the same math in plain ATen ops, for tests.) With
// zero_centred (Qwen3.5's norms): y = (x / rms(x) * (1 + w)).to(dt), on ATen ops.
at::Tensor rmsnorm_forward(const KernelOptions& k, const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd,
                           bool zero_centred = false);
// Returns dx; accumulates dw into dw_acc (fp32) when defined.
at::Tensor rmsnorm_backward(const KernelOptions& k, const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& rstd, const at::Tensor& dw_acc, bool zero_centred = false);
at::Tensor rmsnorm_forward_reference(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd);
at::Tensor rmsnorm_backward_reference(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                      const at::Tensor& rstd, const at::Tensor& dw_acc);

// The LM head and the causal-LM loss, fused and chunked over the vocabulary so the (N, V) logits never
// exist at once. targets (N) int64: the next token of each position, or -100. Returns the summed loss
// over counted targets (in double) and dh = grad_scale * d(summed loss)/dh in the model dtype;
// accumulates grad_scale * d/dE into dE_acc (fp32, (V, D)) when defined (a trainable head/embedding).
struct HeadLoss {
  // 0-dim tensors on the head's device, so that a GPU step reads them on the host once, after the last
  // micro-step, instead of synchronising in every one.
  at::Tensor loss_sum;  // fp64: the summed token losses
  at::Tensor counted;   // int64: tokens with a target
  at::Tensor dh;
};
HeadLoss head_loss(const KernelOptions& k, const at::Tensor& h, const at::Tensor& emb, const at::Tensor& targets,
                   double grad_scale, const at::Tensor& dE_acc, int64_t chunk = 16384);
// The pieces of head_loss, for a strategy that holds only rows [row0, row0 + rows) of the vocabulary
// (emb_rows) and combines the partial statistics across ranks. targets outside the range contribute
// no target logit (ignored targets must be mapped outside every range, e.g. to -1 - row0).
struct HeadPartial {
  at::Tensor m, se;  // (N, 1) running max and sum of exp(z - m) over the rows
  at::Tensor zt;     // (N) target logit where the target lies in the rows, else 0
  at::Tensor U;      // (N, D) sum of exp(z - m) * E_row
};
HeadPartial head_partial(const KernelOptions& k, const at::Tensor& h, const at::Tensor& emb_rows, int64_t row0,
                         const at::Tensor& targets, int64_t chunk);
// Combining partial statistics: given the common max M (N, 1) over all ranks' rows, f = exp(m - M) rescales
// this caller's se and U (0 where it holds no rows); the ranks then sum se * f and zt.
at::Tensor head_rescale(const HeadPartial& hp, const at::Tensor& M);
// The loss and input-gradient terms from the combined statistics: M (N, 1), se (N, 1) the sum of exp(z - M)
// over the whole vocabulary, zt (N) the target logit; f from head_rescale (undefined: 1, a caller that
// holds every row). valid (N) marks the tokens with a target; targets outside [row0, row0 + rows) add no
// E_target term here (their owner adds it).
struct HeadTerms {
  at::Tensor lse;          // (N, 1) log-sum-exp over the vocabulary
  at::Tensor losses;       // (N) lse - zt where valid, else 0
  at::Tensor token_scale;  // (N) grad_scale where valid, else 0
  at::Tensor d;            // (N, D) fp32: (U f / se - E_target) * token_scale, this caller's rows' share of dh
};
HeadTerms head_terms(const HeadPartial& hp, const at::Tensor& f, const at::Tensor& M, const at::Tensor& se,
                     const at::Tensor& zt, const at::Tensor& emb_rows, int64_t row0, const at::Tensor& targets,
                     const at::Tensor& valid, double grad_scale);
// The vocabulary-sharded head in one call (FSDP): this caller holds rows [row0, row0 + rows) (emb_rows) and
// sees every rank's tokens (h_all, targets, valid); its partial statistics are combined with the other
// ranks' through two in-place reductions the caller provides, each an fp32 contiguous tensor reduced over
// all ranks: first an element-wise max (the common M), then a sum (se * f and zt). Every rank makes both
// calls in that order.
struct HeadReductions {
  std::function<void(at::Tensor&)> max, sum;
};
HeadTerms sharded_head_terms(const KernelOptions& k, const at::Tensor& h_all, const at::Tensor& emb_rows, int64_t row0,
                             const at::Tensor& targets, const at::Tensor& valid, double grad_scale, int64_t chunk,
                             const HeadReductions& across_ranks);
// dE_rows += token_scale * (softmax - onehot)^T h over the rows, given the final log-sum-exp (N, 1).
void head_weight_grad(const at::Tensor& h, const at::Tensor& emb_rows, int64_t row0, const at::Tensor& targets,
                      const at::Tensor& lse, const at::Tensor& token_scale, const at::Tensor& dE_rows, int64_t chunk);
// The unfused reference: full logits, fp32 log-softmax, autograd-free gradient. For tests and for
// checking the fused path's numerics.
HeadLoss head_loss_reference(const at::Tensor& h, const at::Tensor& emb, const at::Tensor& targets,
                             double grad_scale, const at::Tensor& dE_acc);
// logits (N, V) in fp32 (for `lorabench forward`).
at::Tensor head_logits(const at::Tensor& h, const at::Tensor& emb);

// Next-token targets of a (B, T) label matrix: targets[b, t] = labels[b, t+1], -100 at t = T-1.
at::Tensor shift_targets(const at::Tensor& labels);

}  // namespace lorabench::model
