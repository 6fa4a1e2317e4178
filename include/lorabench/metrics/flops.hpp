// FLOP model of LoRA / full fine-tuning of a decoder-only transformer (Qwen2 layout, and Qwen3.5's hybrid of
// Gated DeltaNet linear-attention and full-attention layers), parameter counts, and MFU. Torch-free: the shape is plain numbers. The formula, its sources and a worked example for
// Qwen2.5-0.5B are in docs/metrics.md.
//
// Counted: every GEMM with a weight (attention projections q,k,v,o; MLP gate,up,down; LM head, also
// when tied to the embedding; LoRA A and B) and the two attention GEMMs (Q·K^T and P·V) over the full
// sequence length T, causal or not (PaLM's convention; it is also what a masked dense attention
// computes). Not counted: embedding lookup, norms, RoPE, softmax, activations, biases, residual adds,
// the loss, optimizer, recomputation for activation checkpointing (model FLOPs, not hardware FLOPs).
//
// Per weight W (in x out) and token: forward 2·in·out; backward input gradient (dX = dY·W^T) 2·in·out
// only if W's input depends on a trainable parameter; weight gradient (dW = X^T·dY) 2·in·out only if W
// is trainable. Full fine-tuning: 6·N_matmul + 12·L·H·d·T. LoRA: about 4·N_matmul + 6·N_lora + 12·L·H·d·T
// (slightly less: the first layer's q,k,v read the frozen embedding and need no input gradient).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace lorabench::metrics {

struct TransformerShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t heads = 0;     // query heads
  int64_t kv_heads = 0;  // key/value heads (grouped-query attention)
  int64_t head_dim = 0;
  int64_t vocab = 0;
  bool tied_embeddings = false;  // LM head shares the embedding matrix (still one vocab x hidden GEMM)
  bool qkv_bias = true;          // Qwen2: q,k,v projections have biases (parameters, no GEMM FLOPs)
  bool qk_norm = false;          // Qwen3: per-head RMSNorm of q and k (2 x head_dim parameters, no GEMM FLOPs)
  bool attn_output_gate = false; // Qwen3.5: q_proj also gives every head its output gate (2 x the query rows)
  // Qwen3.5: linear[i] marks a Gated DeltaNet layer (empty: every layer full attention), with lin_k_heads query
  // and key heads of lin_k_dim, lin_v_heads value heads of lin_v_dim, a depthwise convolution of conv_kernel
  // taps over the q|k|v channels, and the delta rule computed in chunks of delta_chunk tokens.
  std::vector<bool> linear;
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, conv_kernel = 0, delta_chunk = 0;

  bool is_linear(int64_t layer) const { return !linear.empty() && linear[size_t(layer)]; }
};

// The projections LoRA can target, in config order "q,k,v,o,gate,up,down", then Qwen3.5's linear-attention
// layers' "in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,out_proj".
enum class LoraTarget : int { kQ = 0, kK, kV, kO, kGate, kUp, kDown, kLinQkv, kLinZ, kLinB, kLinA, kLinOut };
inline constexpr int kLoraTargetCount = 12;
const char* lora_target_name(LoraTarget t);  // "q", "k", ...
// Whether decoder layer `layer` has projection t (the MLP's always; the attention's or the linear layer's).
bool layer_has(const TransformerShape& shape, int64_t layer, LoraTarget t);

struct LoraSpec {
  bool enabled = false;  // false = full fine-tuning of every parameter
  int64_t r = 0;
  std::array<bool, kLoraTargetCount> targets{};

  bool targeted(LoraTarget t) const { return enabled && targets[static_cast<int>(t)]; }

  // From config names (subset of lora_target_name's). Throws ConfigError on an unknown name.
  static LoraSpec from_names(bool enabled, int64_t r, const std::vector<std::string>& names);
};

// Input and output width of one projection of `shape`.
struct ProjectionShape {
  int64_t in = 0;
  int64_t out = 0;
};
ProjectionShape projection_shape(const TransformerShape& shape, LoraTarget t);

struct ParamCounts {
  int64_t base_total = 0;     // every parameter of the base model (embedding counted once if tied)
  int64_t matmul = 0;         // weights that take part in GEMMs: every layer's projections, LM head
  int64_t lora = 0;           // LoRA A (in x r) and B (r x out) over all layers and targets
  int64_t total = 0;          // base_total + lora
  int64_t trainable = 0;      // lora (LoRA on) or base_total (full fine-tuning)
  int64_t frozen_matmul = 0;  // matmul weights without gradient: matmul (LoRA on), 0 (full fine-tuning)
};
// REQUIRES: a valid shape (positive sizes); r > 0 when LoRA is enabled. Throws Error otherwise.
ParamCounts count_params(const TransformerShape& shape, const LoraSpec& lora);

// Training FLOPs per token for sequences of seq_len tokens, split by where they are spent.
struct FlopsPerToken {
  int64_t forward_matmul = 0;      // 2 per weight, base + LoRA
  int64_t backward_input = 0;      // 2 per weight whose input lies on the gradient path
  int64_t backward_weight = 0;     // 2 per trainable matmul weight
  int64_t attention_forward = 0;   // Q·K^T and P·V: 4·T·head_dim per head per layer
  int64_t attention_backward = 0;  // dP, dS->dQ, dK, dV: up to 8·T·head_dim per head per layer
  int64_t delta_forward = 0;       // the linear layers' gated delta rule, per value head C(5dk+3dv) + 6dk·dv
  int64_t delta_backward = 0;      // twice that, where its inputs need a gradient

  int64_t forward() const { return forward_matmul + attention_forward + delta_forward; }
  int64_t backward() const { return backward_input + backward_weight + attention_backward + delta_backward; }
  int64_t total() const { return forward() + backward(); }
};
// REQUIRES: seq_len > 0 and what count_params requires.
FlopsPerToken training_flops_per_token(const TransformerShape& shape, const LoraSpec& lora, int64_t seq_len);

// Model FLOP utilization: flops / (seconds * peak_flops_per_s). REQUIRES seconds > 0, peak > 0.
double mfu(double flops, double seconds, double peak_flops_per_s);

// The per-rank peak that MFU divides by: a measured GEMM rate or a configured number.
struct PeakFlops {
  double flops_per_s = 0;
  std::string source;  // "configured" (profile.peak_gflops) or "calibrated" (GEMM measured at start)
  std::string detail;  // e.g. "bf16 GEMM 2048x2048x2048, best of 5, 1 thread"
};

// The job's peak from every rank's calibrated figure (`all`, one per rank, `own` this rank's): the best
// rank's, for every rank, with the range in the detail. The ranks calibrate at once, so a lower figure is a
// rank that interference slowed, not slower hardware. REQUIRES all non-empty, every figure > 0.
PeakFlops job_peak(const PeakFlops& own, const std::vector<double>& all);

}  // namespace lorabench::metrics
