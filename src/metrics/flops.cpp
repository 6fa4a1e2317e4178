#include "lorabench/metrics/flops.hpp"

#include <algorithm>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::metrics {

namespace {

constexpr std::array<LoraTarget, kLoraTargetCount> kTargets = {
    LoraTarget::kQ,      LoraTarget::kK,    LoraTarget::kV,    LoraTarget::kO,    LoraTarget::kGate, LoraTarget::kUp,
    LoraTarget::kDown,   LoraTarget::kLinQkv, LoraTarget::kLinZ, LoraTarget::kLinB, LoraTarget::kLinA, LoraTarget::kLinOut};

void check_shape(const TransformerShape& s, const LoraSpec& lora) {
  LB_CHECK(s.layers > 0 && s.hidden > 0 && s.intermediate > 0 && s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0 &&
               s.vocab > 0,
           "transformer shape needs positive sizes");
  LB_CHECK(s.heads % s.kv_heads == 0, "heads must be a multiple of kv_heads");
  LB_CHECK(!lora.enabled || lora.r > 0, "LoRA rank must be positive");
  LB_CHECK(s.linear.empty() || int64_t(s.linear.size()) == s.layers, "linear must name every layer's kind");
  if (!s.linear.empty())
    LB_CHECK(s.lin_k_heads > 0 && s.lin_v_heads > 0 && s.lin_k_dim > 0 && s.lin_v_dim > 0 && s.conv_kernel > 0 &&
                 s.delta_chunk > 0,
             "linear-attention layers need positive sizes");
}

// The gated delta rule's forward FLOPs per token and value head (flops.hpp; docs/metrics.md).
int64_t delta_rule_flops(const TransformerShape& s) {
  const int64_t C = s.delta_chunk, dk = s.lin_k_dim, dv = s.lin_v_dim;
  return C * (5 * dk + 3 * dv) + 6 * dk * dv;
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
  constexpr const char* kNames[kLoraTargetCount] = {"q",    "k",           "v",         "o",
                                                    "gate", "up",          "down",      "in_proj_qkv",
                                                    "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"};
  return kNames[static_cast<int>(t)];
}

bool layer_has(const TransformerShape& s, int64_t layer, LoraTarget t) {
  if (t == LoraTarget::kGate || t == LoraTarget::kUp || t == LoraTarget::kDown) return true;
  return (static_cast<int>(t) >= static_cast<int>(LoraTarget::kLinQkv)) == s.is_linear(layer);
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
    if (!known) {
      std::vector<std::string> all;
      for (LoraTarget t : kTargets) all.push_back(lora_target_name(t));
      throw ConfigError("unknown LoRA target '" + name + "' (expected any of " + join(all, ",") + ")");
    }
  }
  return spec;
}

ProjectionShape projection_shape(const TransformerShape& s, LoraTarget t) {
  const int64_t q_width = s.heads * s.head_dim;
  const int64_t kv_width = s.kv_heads * s.head_dim;
  const int64_t key = s.lin_k_heads * s.lin_k_dim, value = s.lin_v_heads * s.lin_v_dim;
  switch (t) {
    case LoraTarget::kQ: return {s.hidden, s.attn_output_gate ? 2 * q_width : q_width};
    case LoraTarget::kLinQkv: return {s.hidden, 2 * key + value};
    case LoraTarget::kLinZ: return {s.hidden, value};
    case LoraTarget::kLinB:
    case LoraTarget::kLinA: return {s.hidden, s.lin_v_heads};
    case LoraTarget::kLinOut: return {value, s.hidden};
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
  const int64_t head = s.vocab * s.hidden;
  const int64_t embedding = s.vocab * s.hidden;
  int64_t layers_total = 0;
  for (int64_t layer = 0; layer < s.layers; ++layer) {
    int64_t matmul = 0, adapters = 0;
    for (LoraTarget t : kTargets) {
      if (!layer_has(s, layer, t)) continue;
      const ProjectionShape p = projection_shape(s, t);
      matmul += p.in * p.out;
      if (lora.targeted(t)) adapters += lora.r * (p.in + p.out);
    }
    // input_layernorm, post_attention_layernorm (RMSNorm); the attention's q/k/v biases (Qwen2) and per-head q_norm
    // and k_norm (Qwen3, Qwen3.5); a linear layer's convolution, dt_bias and A_log, and gated norm.
    int64_t other = 2 * s.hidden;
    if (s.is_linear(layer)) {
      other += (2 * s.lin_k_heads * s.lin_k_dim + s.lin_v_heads * s.lin_v_dim) * s.conv_kernel + 2 * s.lin_v_heads +
               s.lin_v_dim;
    } else {
      if (s.qkv_bias) other += (s.heads + 2 * s.kv_heads) * s.head_dim;
      if (s.qk_norm) other += 2 * s.head_dim;
    }
    c.matmul += matmul;
    c.lora += adapters;
    layers_total += matmul + other;
  }
  c.matmul += head;
  c.base_total = embedding + layers_total + s.hidden /* final norm */ + (s.tied_embeddings ? 0 : head);
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
    // The token mixer. The RMSNorm weight is trainable only in full fine-tuning, where the stream already needs a
    // gradient, so the normed input needs one exactly when the stream does.
    const bool x = stream_needs_grad;
    bool mixer_out = false;
    if (s.is_linear(layer)) {
      // Gated DeltaNet: q|k|v, z, b, a from the input; the delta rule over q, k, v, beta (b) and the decay (a); the
      // gated norm of its output with z; out_proj.
      const bool qkv = projection(LoraTarget::kLinQkv, x);
      const bool z = projection(LoraTarget::kLinZ, x);
      const bool b = projection(LoraTarget::kLinB, x);
      const bool a = projection(LoraTarget::kLinA, x);
      const int64_t delta = s.lin_v_heads * delta_rule_flops(s);
      f.delta_forward += delta;
      if (qkv || a || b) f.delta_backward += 2 * delta;
      mixer_out = qkv || z || a || b || full;
      mixer_out = projection(LoraTarget::kLinOut, mixer_out);
    } else {
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
      mixer_out = projection(LoraTarget::kO, attn_out);
    }
    const bool mid = stream_needs_grad || mixer_out;
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
