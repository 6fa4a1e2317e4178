// The byte count of a training step and the roofline, against hand computations (the numbers written out
// below, derived in the comments, not recomputed with the functions under test; docs/metrics.md has the
// same worked example).
#include <gtest/gtest.h>

#include <cmath>

#include "lorabench/core/error.hpp"
#include "lorabench/metrics/roofline.hpp"
#include "flops_shapes_test_util.hpp"

namespace m = lorabench::metrics;

namespace {

using lbtest::lora_all7_r16;
using lbtest::qwen25_05b;

// bf16, seq 256, micro-batch 1, one rank: the benchmark's workload.
m::TrafficSpec bench_spec(int64_t copy_bytes) {
  m::TrafficSpec t;
  t.tokens = 256;
  t.grad_accum = 1;
  t.dtype_bytes = 2;
  t.weight_copy_bytes = copy_bytes;
  t.optimizer_values = 8798208;  // every LoRA value on one rank
  return t;
}

}  // namespace

// Per token and layer, bf16: x 1792 + rstd 4 + q|k|v (14 + 2 x 2) x 64 x 2 = 2304 + attention output
// 14 x 64 x 2 = 1792 + lse 14 x 4 = 56 + x2 1792 + rstd 4 + gate|up 2 x 4864 x 2 = 19456 + LoRA A products
// 7 x 16 x 2 = 224: 27424 bytes.
TEST(Roofline, SavedBytesPerTokenByHand) {
  EXPECT_EQ(m::layer_saved_bytes_per_token(qwen25_05b(), lora_all7_r16(), 2, 0), 27424);
  // Without LoRA the A products go; Qwen3's q/k norms add (16 + 8) heads x (128 x 2 + 4) at 0.6B's shape.
  EXPECT_EQ(m::layer_saved_bytes_per_token(qwen25_05b(), m::LoraSpec{}, 2, 0), 27424 - 224);
  const m::TransformerShape q3 = lbtest::qwen3_06b();
  // 2048 + 4 + (16 + 16) x 128 x 2 + 16 x 128 x 2 + 64 + 2048 + 4 + 2 x 3072 x 2 + 24 x 260
  EXPECT_EQ(m::layer_saved_bytes_per_token(q3, m::LoraSpec{}, 2, 0),
            2048 + 4 + 8192 + 4096 + 64 + 2048 + 4 + 12288 + 6240);
  // Qwen3.5-0.8B, bf16. A linear layer (0): x 2048 + 4, x2 2048 + 4, gate|up 2 x 3584 x 2 = 14336; the four input
  // projections (6144 + 2048 + 16 + 16) x 2 = 16448, the convolution's output 6144 x 2 = 12288, the delta rule's
  // output 2048 x 2 = 4096, the gated norm's rstd 16 x 4 = 64. A full layer (3): q|k|v (8 + 4) x 256 x 2 = 6144,
  // the attention output 4096 + lse 32, the q/k norms (8 + 2) x (512 + 4) = 5160, the output gate 4096.
  const m::TransformerShape q35 = lbtest::qwen3_5_08b();
  const int64_t common = 2048 + 4 + 2048 + 4 + 14336;
  EXPECT_EQ(m::layer_saved_bytes_per_token(q35, m::LoraSpec{}, 2, 0), common + 16448 + 12288 + 4096 + 64);
  EXPECT_EQ(m::layer_saved_bytes_per_token(q35, m::LoraSpec{}, 2, 3), common + 6144 + 4096 + 32 + 5160 + 4096);
  EXPECT_EQ(m::saved_bytes_per_token(q35, m::LoraSpec{}, 2),
            18 * (common + 16448 + 12288 + 4096 + 64) + 6 * (common + 6144 + 4096 + 32 + 5160 + 4096));
  EXPECT_EQ(m::max_layer_saved_bytes_per_token(q35, m::LoraSpec{}, 2), common + 16448 + 12288 + 4096 + 64);
  // LoRA on q and in_proj_qkv: each layer keeps only its own adapters' A products.
  const m::LoraSpec two = m::LoraSpec::from_names(true, 16, {"q", "in_proj_qkv"});
  EXPECT_EQ(m::layer_saved_bytes_per_token(q35, two, 2, 0) - m::layer_saved_bytes_per_token(q35, m::LoraSpec{}, 2, 0),
            16 * 2);
}

// Qwen2.5-0.5B, LoRA r16 on all seven projections, bf16, 256 tokens, one rank.
// GEMM weights: 24 layers x 14,909,440 (q 802,816, k and v 114,688, o 802,816, gate, up, down 4,358,144 each)
// + the head 896 x 151,936 = 136,134,656: 493,961,216; LoRA 24 x 366,592 = 8,798,208; together 502,759,424
// values, 1,005,518,848 bytes per pass.
// Forward: weights 1,005,518,848 + embedding rows and the head's input gradient 2 x 458,752 + kept tensors
// 24 x 256 x 27424 = 168,493,056: 1,174,929,408.
// Backward: the layers' weights less layer 0's q, k, v (896 x 1152 = 1,032,192 values) and the head (done in
// forward): 365,592,576 values, 731,185,152 bytes + the head's input gradient 458,752 + kept tensors
// 168,493,056 + fp32 LoRA gradients 35,192,832: 935,329,792.
// Optimizer: 8,798,208 x (28 + 2) = 263,946,240.
TEST(Roofline, Qwen25_05bLoraStepBytesByHand) {
  const m::StepTraffic t = m::training_traffic(qwen25_05b(), lora_all7_r16(), bench_spec(0));
  EXPECT_EQ(t.weights_per_pass, 1005518848.0);
  EXPECT_EQ(t.copies_per_pass, 0.0);
  EXPECT_EQ(t.saved_per_pass, 168493056.0);
  EXPECT_EQ(t.forward, 1174929408.0);
  EXPECT_EQ(t.backward, 935329792.0);
  EXPECT_EQ(t.optimizer, 263946240.0);
  // oneDNN's per-call layout copy (4 bytes per weight value): + 502,759,424 x 4 forward, + 365,592,576 x 4
  // backward.
  const m::StepTraffic c = m::training_traffic(qwen25_05b(), lora_all7_r16(), bench_spec(4));
  EXPECT_EQ(c.forward, 3185967104.0);
  EXPECT_EQ(c.backward, 2397700096.0);
  // Two micro-steps: both passes twice, the gradients written once and read and written once more.
  m::TrafficSpec two = bench_spec(0);
  two.grad_accum = 2;
  const m::StepTraffic a = m::training_traffic(qwen25_05b(), lora_all7_r16(), two);
  EXPECT_EQ(a.forward, 2 * 1174929408.0);
  EXPECT_EQ(a.backward, 2 * (935329792.0 - 35192832.0) + 3 * 35192832.0);
  EXPECT_EQ(a.optimizer, 263946240.0);
}

// Activation checkpointing: forward keeps the 24 layer inputs (24 x 458,752 = 11,010,048) instead of the
// kept tensors; backward recomputes the layers (their weights 502,759,424 - 136,134,656 = 366,624,768 values,
// 733,249,536 bytes; the inputs read 11,010,048; the kept tensors written) and reads the kept tensors back.
TEST(Roofline, ActivationCheckpointingRecomputesTheLayers) {
  m::TrafficSpec t = bench_spec(0);
  t.activation_checkpointing = true;
  const m::StepTraffic s = m::training_traffic(qwen25_05b(), lora_all7_r16(), t);
  EXPECT_EQ(s.forward, 1005518848.0 + 2 * 458752.0 + 11010048.0);
  EXPECT_EQ(s.backward, 731185152.0 + 458752.0 + 733249536.0 + 11010048.0 + 2 * 168493056.0 + 35192832.0);
}

// Full fine-tuning in fp32: the optimizer's master is the compute weight (28 bytes a value), every layer
// weight is read in backward (layer 0's q, k, v too: the embedding is trained): 357,826,560 values.
TEST(Roofline, FullFineTuningFp32) {
  m::TrafficSpec t = bench_spec(0);
  t.dtype_bytes = 4;
  t.master_is_compute = true;
  t.optimizer_values = 1000;
  const m::StepTraffic s = m::training_traffic(qwen25_05b(), m::LoraSpec{}, t);
  EXPECT_EQ(s.optimizer, 28000.0);
  EXPECT_EQ(s.weights_per_pass, 493961216.0 * 4);
  const double trainable = 494032768.0;  // count_params' base_total (Flops.Qwen25_05bParameterCounts)
  // kept tensors without LoRA in fp32: 2 x 3584 + 8 + 18 x 64 x 4 + 14 x 64 x 4 + 56 + 2 x 4864 x 4 = 54,336 a token
  EXPECT_EQ(s.backward, 357826560.0 * 4 + 896 * 4 * 256 + 24 * 256 * 54336.0 + trainable * 4);
}

// Where lorabench's phases do the FLOPs: the head's input gradient (2 x 896 x 151,936 = 272,269,312 a token)
// with the loss in forward. Forward by hand: 2 x 502,759,424 + attention 4 x 256 x 64 x 14 x 24 = 22,020,096:
// 1,027,538,944, + the head's gradient: 1,299,808,256.
TEST(Roofline, PhaseFlopsFollowLorabenchsPhases) {
  const m::FlopsPerToken f = m::training_flops_per_token(qwen25_05b(), lora_all7_r16(), 256);
  const m::PhaseFlops p = m::phase_flops_per_token(qwen25_05b(), lora_all7_r16(), 256, false);
  EXPECT_EQ(p.forward, 1299808256.0);
  EXPECT_EQ(p.forward + p.backward, double(f.total()));
  // Checkpointing: backward recomputes the layers' forward, not the head's (1,027,538,944 - 272,269,312).
  const m::PhaseFlops ac = m::phase_flops_per_token(qwen25_05b(), lora_all7_r16(), 256, true);
  EXPECT_EQ(ac.forward, p.forward);
  EXPECT_EQ(ac.backward, p.backward + 755269632.0);
  // Full fine-tuning: the head's weight gradient is done there too.
  const m::PhaseFlops full = m::phase_flops_per_token(qwen25_05b(), m::LoraSpec{}, 256, false);
  const m::FlopsPerToken ff = m::training_flops_per_token(qwen25_05b(), m::LoraSpec{}, 256);
  EXPECT_EQ(full.forward, double(ff.forward()) + 2 * 272269312.0);
}

TEST(Roofline, PointIsTheLargerOfTheTwoTimes) {
  // 100 GFLOP at 50 GFLOP/s = 2 s; 10 GB at 10 GB/s = 1 s: compute bound, measured 4 s = 50% of the bound.
  const m::RooflinePoint p = m::roofline(100e9, 10e9, 50e9, 10e9, 4.0);
  EXPECT_FALSE(p.memory_bound);
  EXPECT_DOUBLE_EQ(p.bound_s, 2.0);
  EXPECT_DOUBLE_EQ(p.fraction, 0.5);
  EXPECT_DOUBLE_EQ(p.intensity(), 10.0);
  const m::RooflinePoint q = m::roofline(10e9, 30e9, 50e9, 10e9, 0.0);
  EXPECT_TRUE(q.memory_bound);
  EXPECT_DOUBLE_EQ(q.bound_s, 3.0);
  EXPECT_TRUE(std::isnan(q.fraction));
  EXPECT_THROW(m::roofline(1, 1, 0, 1, 1), lorabench::Error);
  EXPECT_THROW(m::roofline(1, 1, 1, 0, 1), lorabench::Error);
}

// More tokens per step move Qwen2.5-0.5B's LoRA step from memory bound to compute bound on an AMX rank
// (979 GFLOP/s bf16 frame, 8 GB/s with oneDNN's copies): the weights are read once per pass whatever the
// tokens, the FLOPs grow with them. 256 tokens: forward 333 GFLOP (0.34 s) against 3.19 GB (0.40 s).
TEST(Roofline, MoreTokensMoveTheStepFromMemoryToCompute) {
  const double frame = 979e9, bw = 8e9;
  auto step = [&](int64_t tokens) {
    m::TrafficSpec t = bench_spec(4);
    t.tokens = tokens;
    const m::PhaseFlops f = m::phase_flops_per_token(qwen25_05b(), lora_all7_r16(), 256, false);
    const m::StepTraffic b = m::training_traffic(qwen25_05b(), lora_all7_r16(), t);
    const std::array<double, 3> flops = {f.forward * double(tokens), f.backward * double(tokens), 0.0};
    return m::step_roofline(flops, b, {1.0, 1.0, 1.0}, frame, bw);
  };
  const m::StepRoofline one = step(256), four = step(1024);
  EXPECT_TRUE(one.phase[0].memory_bound);
  EXPECT_TRUE(one.phase[1].memory_bound);
  EXPECT_TRUE(one.step.memory_bound);
  EXPECT_FALSE(four.phase[0].memory_bound);
  EXPECT_FALSE(four.phase[1].memory_bound);
  EXPECT_TRUE(four.phase[2].memory_bound);  // the optimizer has no GEMM FLOPs
  EXPECT_FALSE(four.step.memory_bound);
  // The step's bound is the sum of the phases' bounds; its measured time the sum of theirs.
  EXPECT_DOUBLE_EQ(four.step.bound_s, four.phase[0].bound_s + four.phase[1].bound_s + four.phase[2].bound_s);
  EXPECT_DOUBLE_EQ(four.step.measured_s, 3.0);
}

TEST(Roofline, JobBandwidthIsTheMedianRanksWithTheRange) {
  m::MemoryBandwidth own{9e9, "measured", "triad"};
  const m::MemoryBandwidth b = m::job_bandwidth(own, {9e9, 7e9, 8e9});
  EXPECT_DOUBLE_EQ(b.bytes_per_s, 8e9);
  EXPECT_NE(b.detail.find("the median of 3 ranks measured at once (7.00 to 9.00 GB/s)"), std::string::npos) << b.detail;
  EXPECT_THROW(m::job_bandwidth(own, {}), lorabench::Error);
  EXPECT_THROW(m::job_bandwidth(own, {0.0}), lorabench::Error);
}

TEST(Roofline, SummaryAttributesNameEveryPhase) {
  m::StepTraffic t;
  t.forward = 1e9, t.backward = 2e9, t.optimizer = 1e8;
  const m::StepRoofline r = m::step_roofline({50e9, 100e9, 0}, t, {2.0, 4.0, 0.02}, 50e9, 10e9);
  const auto attrs = m::roofline_summary_attributes(r, {10e9, "configured", "profile.mem_bandwidth_gbs"}, 50e9);
  auto find = [&](const std::string& n) -> const m::SummaryAttribute* {
    for (const auto& a : attrs)
      if (a.name == n) return &a;
    return nullptr;
  };
  for (const char* p : {"forward", "backward", "optimizer", "step"})
    for (const char* k : {"flops", "bytes", "bound_s", "measured_s", "fraction", "limit"})
      EXPECT_NE(find(std::string("roofline_") + p + "_" + k), nullptr) << p << " " << k;
  ASSERT_NE(find("roofline_ridge_flops_per_byte"), nullptr);
  EXPECT_DOUBLE_EQ(find("roofline_ridge_flops_per_byte")->number, 5.0);
  EXPECT_EQ(find("roofline_forward_limit")->text, "compute");     // 1 s of FLOPs, 0.1 s of bytes
  EXPECT_EQ(find("roofline_optimizer_limit")->text, "memory");    // 0.01 s of bytes
  EXPECT_DOUBLE_EQ(find("roofline_step_bound_s")->number, 3.01);  // 1 + 2 + 0.01
  EXPECT_DOUBLE_EQ(find("roofline_step_measured_s")->number, 6.02);
  EXPECT_EQ(find("mem_bandwidth_source")->text, "configured");
}
