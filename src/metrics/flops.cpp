#include "lorabench/metrics/flops.hpp"

#include <algorithm>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::metrics {

namespace {

constexpr std::array<LoraTarget, kLoraTargetCount> kTargets = {LoraTarget::kQ,    LoraTarget::kK,  LoraTarget::kV,
                                                                LoraTarget::kO,    LoraTarget::kGate, LoraTarget::kUp,
                                                                LoraTarget::kDown};

void check_shape(const TransformerShape& s, const LoraSpec& lora) {
  LB_CHECK(s.layers > 0 && s.hidden > 0 && s.intermediate > 0 && s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0 &&
               s.vocab > 0,
           "transformer shape needs positive sizes");
  LB_CHECK(s.heads % s.kv_heads == 0, "heads must be a multiple of kv_heads");
  LB_CHECK(!lora.enabled || lora.r > 0, "LoRA rank must be positive");
}

// Accumulates the FLOPs of one weight GEMM (in x out) per token.
struct GemmCounter {
  FlopsPerToken& f;
  void add(int64_t in, int64_t out, bool input_needs_grad, bool trainable) const {
    const int64_t n = in * out;
    f.forward_matmul += 2 * n;
    if (input_needs_grad) f.backward_input += 2 * n;
    if (trainable) f.backward_weight += 2 * n;
  }
};

}  // namespace

const char* lora_target_name(LoraTarget t) {
  constexpr const char* kNames[kLoraTargetCount] = {"q", "k", "v", "o", "gate", "up", "down"};
  return kNames[static_cast<int>(t)];
}

LoraSpec LoraSpec::from_names(bool enabled, int64_t r, const std::vector<std::string>& names) {
  LoraSpec spec;
  spec.enabled = enabled;
  spec.r = r;
  for (const std::string& name : names) {
    bool known = false;
    for (LoraTarget t : kTargets) {
      if (name == lora_target_name(t)) {
        spec.targets[static_cast<int>(t)] = true;
        known = true;
      }
    }
    if (!known) throw ConfigError("unknown LoRA target '" + name + "' (expected q,k,v,o,gate,up,down)");
  }
  return spec;
}

ProjectionShape projection_shape(const TransformerShape& s, LoraTarget t) {
  const int64_t q_width = s.heads * s.head_dim;
  const int64_t kv_width = s.kv_heads * s.head_dim;
  switch (t) {
    case LoraTarget::kQ: return {s.hidden, q_width};
    case LoraTarget::kK: return {s.hidden, kv_width};
    case LoraTarget::kV: return {s.hidden, kv_width};
    case LoraTarget::kO: return {q_width, s.hidden};
    case LoraTarget::kGate: return {s.hidden, s.intermediate};
    case LoraTarget::kUp: return {s.hidden, s.intermediate};
    case LoraTarget::kDown: return {s.intermediate, s.hidden};
  }
  LB_THROW(Error, "unknown projection");
}

ParamCounts count_params(const TransformerShape& s, const LoraSpec& lora) {
  check_shape(s, lora);
  ParamCounts c;
  int64_t per_layer_matmul = 0;
  int64_t per_layer_lora = 0;
  for (LoraTarget t : kTargets) {
    const ProjectionShape p = projection_shape(s, t);
    per_layer_matmul += p.in * p.out;
    if (lora.targeted(t)) per_layer_lora += lora.r * (p.in + p.out);
  }
  const int64_t head = s.vocab * s.hidden;
  const int64_t embedding = s.vocab * s.hidden;
  const int64_t qkv_bias = s.qkv_bias ? (s.heads + 2 * s.kv_heads) * s.head_dim : 0;
  // input_layernorm, post_attention_layernorm (RMSNorm); Qwen3's q_norm and k_norm
  const int64_t norms_per_layer = 2 * s.hidden + (s.qk_norm ? 2 * s.head_dim : 0);
  c.matmul = s.layers * per_layer_matmul + head;
  c.lora = s.layers * per_layer_lora;
  c.base_total = embedding + s.layers * (per_layer_matmul + qkv_bias + norms_per_layer) + s.hidden /* final norm */ +
                 (s.tied_embeddings ? 0 : head);
  c.total = c.base_total + c.lora;
  c.trainable = lora.enabled ? c.lora : c.base_total;
  c.frozen_matmul = lora.enabled ? c.matmul : 0;
  return c;
}

FlopsPerToken training_flops_per_token(const TransformerShape& s, const LoraSpec& lora, int64_t seq_len) {
  check_shape(s, lora);
  LB_CHECK(seq_len > 0, "seq_len must be positive");
  FlopsPerToken f;
  const GemmCounter gemm{f};
  const bool full = !lora.enabled;  // full fine-tuning: every parameter (embedding, norms too) is trainable

  // One projection: the base weight and, if targeted, LoRA A (in x r) then B (r x out).
  // Returns whether its output requires a gradient.
  auto projection = [&](LoraTarget t, bool input_needs_grad) {
    const ProjectionShape p = projection_shape(s, t);
    gemm.add(p.in, p.out, input_needs_grad, full);
    if (!lora.targeted(t)) return input_needs_grad || full;
    gemm.add(p.in, lora.r, input_needs_grad, true);
    gemm.add(lora.r, p.out, true /* x·A depends on A */, true);
    return true;
  };

  // Gradient flow through the residual stream: does the stream entering the layer depend on a trainable
  // parameter? In full fine-tuning the embedding is trainable; with LoRA nothing before layer 0 is.
  bool stream_needs_grad = full;
  const int64_t per_head = seq_len * s.head_dim;  // one query row against T keys, or P row times T values
  for (int64_t layer = 0; layer < s.layers; ++layer) {
    // Attention block. The RMSNorm weight is trainable only in full fine-tuning, where the stream
    // already needs a gradient, so the normed input needs one exactly when the stream does.
    const bool x = stream_needs_grad;
    const bool q = projection(LoraTarget::kQ, x);
    const bool k = projection(LoraTarget::kK, x);
    const bool v = projection(LoraTarget::kV, x);
    f.attention_forward += s.heads * (2 * per_head /* Q·K^T */ + 2 * per_head /* P·V */);
    int64_t bwd = 0;
    if (q || k) bwd += 2 * per_head;  // dP = dO·V^T
    if (v) bwd += 2 * per_head;       // dV = P^T·dO
    if (q) bwd += 2 * per_head;       // dQ = dS·K
    if (k) bwd += 2 * per_head;       // dK = dS^T·Q
    f.attention_backward += s.heads * bwd;
    const bool attn_out = q || k || v;
    const bool o = projection(LoraTarget::kO, attn_out);
    const bool mid = stream_needs_grad || o;
    // MLP block.
    const bool gate = projection(LoraTarget::kGate, mid);
    const bool up = projection(LoraTarget::kUp, mid);
    const bool down = projection(LoraTarget::kDown, gate || up);
    stream_needs_grad = mid || down;
  }
  // LM head (tied: the embedding matrix used as a GEMM weight; trainable only in full fine-tuning).
  gemm.add(s.hidden, s.vocab, stream_needs_grad, full);
  return f;
}

PeakFlops job_peak(const PeakFlops& own, const std::vector<double>& all) {
  LB_CHECK(!all.empty(), "job_peak needs every rank's figure");
  const auto [lo, hi] = std::minmax_element(all.begin(), all.end());
  LB_CHECK(*lo > 0, "job_peak needs positive figures");
  PeakFlops p = own;
  p.flops_per_s = *hi;
  if (all.size() > 1)
    p.detail += strformat("; the best of %zu ranks' calibrations (%.1f to %.1f GFLOP/s)", all.size(), *lo / 1e9,
                          *hi / 1e9);
  return p;
}

double mfu(double flops, double seconds, double peak_flops_per_s) {
  LB_CHECK(seconds > 0, "mfu needs a positive time");
  LB_CHECK(peak_flops_per_s > 0, "mfu needs a positive peak FLOP/s");
  return flops / (seconds * peak_flops_per_s);
}

}  // namespace lorabench::metrics
