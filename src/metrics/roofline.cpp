#include "lorabench/metrics/roofline.hpp"

#include <algorithm>
#include <cmath>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/metrics/stats.hpp"

namespace lorabench::metrics {

int64_t layer_saved_bytes_per_token(const TransformerShape& s, const LoraSpec& lora, int64_t ds, int64_t layer) {
  const int64_t D = s.hidden, I = s.intermediate, H = s.heads, K = s.kv_heads, d = s.head_dim;
  int64_t lora_cols = 0;
  for (int t = 0; t < kLoraTargetCount; ++t)
    lora_cols += lora.targeted(LoraTarget(t)) && layer_has(s, layer, LoraTarget(t)) ? lora.r : 0;
  // x and its rstd, x2 and its rstd, gate|up, the LoRA A products: every layer.
  const int64_t common = D * ds + 4 + D * ds + 4 + 2 * I * ds + lora_cols * ds;
  if (s.is_linear(layer)) {
    // in_proj_qkv|z|b|a's outputs, the convolution's output, the delta rule's output, the gated norm's rstd.
    const int64_t key = s.lin_k_heads * s.lin_k_dim, value = s.lin_v_heads * s.lin_v_dim;
    const int64_t proj = 2 * key + 2 * value + 2 * s.lin_v_heads;
    return common + proj * ds + (2 * key + value) * ds + value * ds + s.lin_v_heads * 4;
  }
  // q|k|v, the attention output and its log-sum-exp per head; Qwen3: the q/k norms' inputs and their rstd per
  // head; Qwen3.5: the output gate.
  const int64_t qk_norm = s.qk_norm ? (H + K) * (d * ds + 4) : 0;
  const int64_t gate = s.attn_output_gate ? H * d * ds : 0;
  return common + (H + 2 * K) * d * ds + H * d * ds + H * 4 + qk_norm + gate;
}

int64_t saved_bytes_per_token(const TransformerShape& s, const LoraSpec& lora, int64_t ds) {
  int64_t n = 0;
  for (int64_t l = 0; l < s.layers; ++l) n += layer_saved_bytes_per_token(s, lora, ds, l);
  return n;
}

int64_t max_layer_saved_bytes_per_token(const TransformerShape& s, const LoraSpec& lora, int64_t ds) {
  int64_t n = 0;
  for (int64_t l = 0; l < s.layers; ++l) n = std::max(n, layer_saved_bytes_per_token(s, lora, ds, l));
  return n;
}

StepTraffic training_traffic(const TransformerShape& s, const LoraSpec& lora, const TrafficSpec& t) {
  const ParamCounts pc = count_params(s, lora);
  LB_CHECK(t.tokens > 0 && t.grad_accum >= 1 && t.dtype_bytes > 0 && t.weight_copy_bytes >= 0 &&
               t.optimizer_values >= 0,
           "training_traffic needs tokens > 0, grad_accum >= 1 and non-negative sizes");
  const double ds = double(t.dtype_bytes), N = double(t.tokens), L = double(s.layers);
  StepTraffic out;
  // Every GEMM weight: the base projections and the head (count_params' matmul) and the LoRA factors.
  const double gemm_values = double(pc.matmul + pc.lora);
  out.weights_per_pass = gemm_values * ds;
  // The layout copy: every GEMM weight operand, the LoRA factors included, goes through the same call.
  out.copies_per_pass = gemm_values * double(t.weight_copy_bytes);
  const double layer_input = double(s.hidden) * ds * N;  // what checkpointing keeps of a layer
  out.saved_per_pass = double(saved_bytes_per_token(s, lora, t.dtype_bytes)) * N;
  const double embedding = double(s.hidden) * ds * N;  // the rows gathered (read) and the layer-0 input written
  const double head_grad = double(s.hidden) * ds * N;  // the head's input gradient, forward to backward
  const double head_values = double(s.hidden) * double(s.vocab);

  // Backward reads a layer weight when its input needs a gradient (dX = dY W^T): every one but the first
  // layer's q, k, v (a linear first layer's in_proj_*) in LoRA (their input is the frozen embedding). Full
  // fine-tuning's dW = X^T dY reads X and dY, not W. The head is done in the forward phase.
  double first_qkv = 0;
  if (lora.enabled)
    for (LoraTarget p : {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kLinQkv, LoraTarget::kLinZ,
                         LoraTarget::kLinB, LoraTarget::kLinA}) {
      if (!layer_has(s, 0, p)) continue;
      const ProjectionShape ps = projection_shape(s, p);
      first_qkv += double(ps.in * ps.out);
    }
  const double per_value = ds + double(t.weight_copy_bytes);
  const double bwd_weights = (gemm_values - head_values - first_qkv) * per_value;
  const double trainable = double(pc.trainable);

  double fwd = out.weights_per_pass + out.copies_per_pass + embedding + head_grad;
  double bwd = bwd_weights + head_grad;
  if (t.activation_checkpointing) {
    // Forward keeps only the layer inputs; backward first recomputes each layer's forward (its weights and
    // their copies, the layer input read, its kept tensors written), then reads the kept tensors back.
    fwd += L * layer_input;
    bwd += (gemm_values - head_values) * per_value + L * layer_input + 2.0 * out.saved_per_pass;
  } else {
    fwd += out.saved_per_pass;
    bwd += out.saved_per_pass;
  }
  out.forward = fwd * t.grad_accum;
  // Gradients: written by the first micro-step, read and written by each later one.
  out.backward = bwd * t.grad_accum + trainable * 4.0 * (2.0 * t.grad_accum - 1.0);
  // AdamW: master, gradient, m, v read (16 bytes); master, m, v written (12); the compute copy written.
  const double adamw_per_value = 28.0 + (t.master_is_compute ? 0.0 : ds);
  out.optimizer = double(t.optimizer_values) * adamw_per_value;
  return out;
}

PhaseFlops phase_flops_per_token(const TransformerShape& s, const LoraSpec& lora, int64_t seq_len,
                                 bool activation_checkpointing) {
  const FlopsPerToken f = training_flops_per_token(s, lora, seq_len);
  const double head = 2.0 * double(s.hidden) * double(s.vocab);
  // The head's input gradient (the residual stream always needs one when anything below is trained) and,
  // in full fine-tuning, its weight gradient: both computed with the loss in the forward phase.
  const double head_backward = head * (lora.enabled ? 1.0 : 2.0);
  PhaseFlops p;
  p.forward = double(f.forward()) + head_backward;
  p.backward = double(f.backward()) - head_backward;
  if (activation_checkpointing) p.backward += double(f.forward()) - head;  // the layers' forward again
  return p;
}

MemoryBandwidth job_bandwidth(const MemoryBandwidth& own, const std::vector<double>& all) {
  LB_CHECK(!all.empty(), "job_bandwidth needs every rank's figure");
  const auto [lo, hi] = std::minmax_element(all.begin(), all.end());
  LB_CHECK(*lo > 0, "job_bandwidth needs positive figures");
  MemoryBandwidth b = own;
  b.bytes_per_s = median(all);
  if (all.size() > 1)
    b.detail += strformat("; the median of %zu ranks measured at once (%.2f to %.2f GB/s)", all.size(), *lo / 1e9,
                          *hi / 1e9);
  return b;
}

RooflinePoint roofline(double flops, double bytes, double frame, double bandwidth, double measured_s) {
  LB_CHECK(frame > 0 && bandwidth > 0, "the roofline needs a positive frame and bandwidth");
  RooflinePoint p;
  p.flops = flops;
  p.bytes = bytes;
  p.compute_s = flops / frame;
  p.memory_s = bytes / bandwidth;
  p.bound_s = std::max(p.compute_s, p.memory_s);
  p.memory_bound = p.memory_s > p.compute_s;
  p.measured_s = measured_s;
  p.fraction = measured_s > 0 ? p.bound_s / measured_s : NAN;
  return p;
}

StepRoofline step_roofline(const std::array<double, kRooflinePhases>& flops, const StepTraffic& bytes,
                           const std::array<double, kRooflinePhases>& measured_s, double frame, double bandwidth) {
  const std::array<double, kRooflinePhases> b = {bytes.forward, bytes.backward, bytes.optimizer};
  StepRoofline r;
  double memory_part = 0, compute_part = 0, measured = 0;
  for (int i = 0; i < kRooflinePhases; ++i) {
    r.phase[size_t(i)] = roofline(flops[size_t(i)], b[size_t(i)], frame, bandwidth, measured_s[size_t(i)]);
    const RooflinePoint& p = r.phase[size_t(i)];
    (p.memory_bound ? memory_part : compute_part) += p.bound_s;
    r.step.flops += p.flops;
    r.step.bytes += p.bytes;
    r.step.compute_s += p.compute_s;
    r.step.memory_s += p.memory_s;
    measured += std::max(0.0, measured_s[size_t(i)]);
  }
  r.step.bound_s = memory_part + compute_part;
  r.step.memory_bound = memory_part > compute_part;
  r.step.measured_s = measured;
  r.step.fraction = measured > 0 ? r.step.bound_s / measured : NAN;
  return r;
}

std::vector<SummaryAttribute> roofline_summary_attributes(const StepRoofline& r, const MemoryBandwidth& bw,
                                                          double frame) {
  std::vector<SummaryAttribute> out;
  auto add = [&](const std::string& name, double v) { out.push_back({name, v, "", false}); };
  auto add_text = [&](const std::string& name, const std::string& v) { out.push_back({name, 0, v, true}); };
  add("mem_bandwidth_per_rank", bw.bytes_per_s);
  add_text("mem_bandwidth_source", bw.source);
  add_text("mem_bandwidth_detail", bw.detail);
  add("roofline_ridge_flops_per_byte", frame / bw.bytes_per_s);
  auto add_point = [&](const std::string& name, const RooflinePoint& p) {
    add("roofline_" + name + "_flops", p.flops);
    add("roofline_" + name + "_bytes", p.bytes);
    add("roofline_" + name + "_bound_s", p.bound_s);
    add("roofline_" + name + "_measured_s", p.measured_s);
    add("roofline_" + name + "_fraction", p.fraction);
    add_text("roofline_" + name + "_limit", p.memory_bound ? "memory" : "compute");
  };
  for (int i = 0; i < kRooflinePhases; ++i) add_point(kRooflinePhaseNames[size_t(i)], r.phase[size_t(i)]);
  add_point("step", r.step);
  return out;
}

}  // namespace lorabench::metrics
