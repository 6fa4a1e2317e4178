// The memory side of a training step: the bytes a step must move through memory per rank and phase, and
// the roofline bound max(FLOPs / frame, bytes / bandwidth) that the step's measured phases are held against.
// Torch-free like the FLOP count (metrics/flops.hpp); docs/metrics.md ("Bytes and the roofline") has the
// formula, its terms and a worked example for Qwen2.5-0.5B.
//
// Counted per rank (compulsory traffic: what must cross memory at least once, so the bound is a lower bound
// of the phase's time):
//   forward   per micro-step: every GEMM weight read once (frozen base weights, LoRA A/B, the LM head, whose
//             backward runs here too, chunk by chunk with the loss), the GEMM library's per-call copy of
//             each weight (the layout copy: written and read back), the tensors backward keeps written once
//             (with activation checkpointing: only the layer inputs), the embedding rows gathered, the
//             head's input gradient written;
//   backward  per micro-step: the layers' weights read again by the input-gradient GEMMs (and a copy each),
//             the head's input gradient and the kept tensors read back (with checkpointing the recomputed
//             forward first: weights, copies, the layer's kept tensors written), the trainable gradients
//             written (and read, when accumulating);
//   optimizer per step: AdamW over this rank's trainable values (fp32 master, gradient, two moments read;
//             master and moments written; the compute copy written unless it is the master).
// Not counted: the temporaries a kernel streams through cache, the logits (the head is chunked), the
// collectives' buffers (the comm phase is the network's), norms' and biases' parameters.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "lorabench/metrics/flops.hpp"
#include "lorabench/metrics/stats.hpp"

namespace lorabench::metrics {

// What the byte count needs beyond the shape and the LoRA configuration.
struct TrafficSpec {
  int64_t tokens = 0;            // one rank's micro-step (micro_batch x seq_len)
  int grad_accum = 1;            // micro-steps per step
  int64_t dtype_bytes = 2;       // the compute dtype's element size
  int64_t weight_copy_bytes = 0;  // per weight element and GEMM call: the layout copy written + read back
  bool activation_checkpointing = false;
  int64_t optimizer_values = 0;  // trainable values this rank's optimizer updates (its shard)
  bool master_is_compute = false;  // fp32 full fine-tuning: the master weights are the compute weights
};

// The tensors decoder layer `layer` keeps for backward, per token, in bytes (lorabench's LayerCache: the layer
// input, the norms' statistics, q|k|v, the attention output and its log-sum-exp, the MLP input, gate|up,
// the LoRA A products; Qwen3's q/k norm inputs and statistics, Qwen3.5's output gate; a linear-attention
// layer's projections, convolution output, delta-rule output and gated-norm statistics instead of the
// attention's). The planner's activation lower bound is made of the same figure (train/plan.cpp).
int64_t layer_saved_bytes_per_token(const TransformerShape& shape, const LoraSpec& lora, int64_t dtype_bytes,
                                    int64_t layer);
// The sum over the layers, and the largest one (what activation checkpointing recomputes at a time).
int64_t saved_bytes_per_token(const TransformerShape& shape, const LoraSpec& lora, int64_t dtype_bytes);
int64_t max_layer_saved_bytes_per_token(const TransformerShape& shape, const LoraSpec& lora, int64_t dtype_bytes);

// Bytes per rank and step, by phase.
struct StepTraffic {
  double forward = 0, backward = 0, optimizer = 0;
  // The terms, for the docs' worked example and the tests: weights read per pass (base + LoRA + head),
  // one pass's layout copies, the kept tensors of every layer (one pass), trainable values.
  double weights_per_pass = 0, copies_per_pass = 0, saved_per_pass = 0;
  double total() const { return forward + backward + optimizer; }
};
// REQUIRES: what count_params requires; tokens > 0, grad_accum >= 1.
StepTraffic training_traffic(const TransformerShape& shape, const LoraSpec& lora, const TrafficSpec& spec);

// FLOPs per token of lorabench's forward and backward phases (model/step.cpp): the head's backward (its
// input gradient, and in full fine-tuning its weight gradient) runs in the forward phase, chunk by chunk
// with the loss; with activation checkpointing backward also recomputes the layers' forward (hardware
// FLOPs, not the model FLOPs of MFU). Their sum is training_flops_per_token's total (+ the recomputation).
struct PhaseFlops {
  double forward = 0, backward = 0;
};
PhaseFlops phase_flops_per_token(const TransformerShape& shape, const LoraSpec& lora, int64_t seq_len,
                                 bool activation_checkpointing);

// The bytes per second a rank gets from memory: measured (a STREAM-style triad on every rank at once) or
// configured (profile.mem_bandwidth_gbs).
struct MemoryBandwidth {
  double bytes_per_s = 0;
  std::string source;  // "measured" or "configured"
  std::string detail;  // the method: kernel, array size, ranks at once, repeats
};
// The job's figure from every rank's measurement (`all`, one per rank, measured at the same time): the
// median rank's (the ranks of a node share one memory system, so unlike the GEMM frame a lower figure is
// the share a rank gets, not interference), with the range in the detail. REQUIRES all non-empty, > 0.
MemoryBandwidth job_bandwidth(const MemoryBandwidth& own, const std::vector<double>& all);

// One phase against its roofline.
struct RooflinePoint {
  double flops = 0, bytes = 0;
  double compute_s = 0;  // flops / frame
  double memory_s = 0;   // bytes / bandwidth
  double bound_s = 0;    // max of the two
  bool memory_bound = false;
  double measured_s = 0;
  double fraction = 0;   // bound_s / measured_s: how close the phase is to its bound (1 = at it)
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }  // FLOP per byte
};
// REQUIRES frame > 0 and bandwidth > 0; measured_s <= 0 leaves fraction NaN.
RooflinePoint roofline(double flops, double bytes, double frame_flops_per_s, double bandwidth_bytes_per_s,
                       double measured_s);

// The compute phases of a step (forward, backward, optimizer) and their sum.
inline constexpr int kRooflinePhases = 3;
inline constexpr std::array<const char*, kRooflinePhases> kRooflinePhaseNames = {"forward", "backward", "optimizer"};
struct StepRoofline {
  std::array<RooflinePoint, kRooflinePhases> phase;
  RooflinePoint step;  // bound = the sum of the phases' bounds; memory_bound when their memory-bound part is larger
};
// flops: the phases' FLOPs per rank and step (the optimizer's are taken as 0: elementwise work, not on the
// GEMM frame); measured: the phases' measured times. REQUIRES frame > 0, bandwidth > 0.
StepRoofline step_roofline(const std::array<double, kRooflinePhases>& flops, const StepTraffic& bytes,
                           const std::array<double, kRooflinePhases>& measured_s, double frame_flops_per_s,
                           double bandwidth_bytes_per_s);

// The run file's /metrics/summary attributes of the roofline (docs/hdf5-schema.md): the bandwidth, the ridge
// and per phase and for the step roofline_<name>_{flops,bytes,bound_s,measured_s,fraction,limit}.
std::vector<SummaryAttribute> roofline_summary_attributes(const StepRoofline& r, const MemoryBandwidth& bw,
                                                          double frame_flops_per_s);

}  // namespace lorabench::metrics
