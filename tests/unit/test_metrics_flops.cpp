// FLOP model and parameter counts against hand computations (written out below, not recomputed with the
// functions under test), and MFU.
#include <gtest/gtest.h>

#include "lorabench/core/error.hpp"
#include "lorabench/metrics/flops.hpp"
#include "flops_shapes_test_util.hpp"

using lorabench::metrics::FlopsPerToken;
using lorabench::metrics::layer_has;
using lorabench::metrics::LoraTarget;
using lorabench::metrics::ParamCounts;
using lorabench::ConfigError;
using lorabench::metrics::count_params;
using lorabench::metrics::LoraSpec;
using lorabench::metrics::training_flops_per_token;
using lorabench::metrics::TransformerShape;

using lbtest::lora_all7_r16;
using lbtest::qwen25_05b;

TEST(Flops, Qwen25_05bParameterCounts) {
  // Weights per layer (in x out): q 896x896, k 896x128, v 896x128 (2 KV heads x 64), o 896x896,
  // gate 896x4864, up 896x4864, down 4864x896.
  const int64_t q = 896 * 896;     // 802,816
  const int64_t kv = 896 * 128;    // 114,688 (each of k and v)
  const int64_t mlp = 896 * 4864;  // 4,358,144 (each of gate, up, down)
  EXPECT_EQ(q, 802816);
  EXPECT_EQ(kv, 114688);
  EXPECT_EQ(mlp, 4358144);
  const int64_t per_layer = 2 * q + 2 * kv + 3 * mlp;  // 1,835,008 + 13,074,432
  EXPECT_EQ(per_layer, 14909440);
  const int64_t head = 151936 * 896;  // tied to the embedding, still a GEMM
  EXPECT_EQ(head, 136134656);
  const int64_t matmul = 24 * per_layer + head;  // 357,826,560 + 136,134,656
  EXPECT_EQ(matmul, 493961216);
  // Whole model: embedding (once, tied) + 24 x (weights + q/k/v biases 896+128+128 + two RMSNorms
  // 2x896) + final RMSNorm 896.
  const int64_t total = 136134656 + 24 * (14909440 + 1152 + 1792) + 896;
  EXPECT_EQ(total, 494032768);  // Qwen2.5-0.5B's published parameter count
  // LoRA r=16: r x (in + out) per projection per layer.
  const int64_t lora_layer = 16 * (896 + 896)      // q  28,672
                             + 16 * (896 + 128)    // k  16,384
                             + 16 * (896 + 128)    // v  16,384
                             + 16 * (896 + 896)    // o  28,672
                             + 16 * (896 + 4864)   // gate 92,160
                             + 16 * (896 + 4864)   // up   92,160
                             + 16 * (4864 + 896);  // down 92,160
  EXPECT_EQ(lora_layer, 366592);
  EXPECT_EQ(24 * lora_layer, 8798208);

  const auto c = count_params(qwen25_05b(), lora_all7_r16());
  EXPECT_EQ(c.base_total, 494032768);
  EXPECT_EQ(c.matmul, 493961216);
  EXPECT_EQ(c.lora, 8798208);
  EXPECT_EQ(c.trainable, 8798208);
  EXPECT_EQ(c.frozen_matmul, 493961216);
  EXPECT_EQ(c.total, 494032768 + 8798208);

  const auto full = count_params(qwen25_05b(), LoraSpec{});
  EXPECT_EQ(full.trainable, 494032768);
  EXPECT_EQ(full.lora, 0);
  EXPECT_EQ(full.frozen_matmul, 0);
}

// Qwen3-0.6B (its config.json): 28 layers, hidden 1024, 16 heads of 128 (q_proj 1024 -> 2048: head_dim is
// not hidden / heads), 8 KV heads, intermediate 3072, tied embedding, no q/k/v biases, q_norm and k_norm.
TEST(Flops, Qwen3_06bParameterCountsByHand) {
  TransformerShape s = lbtest::qwen3_06b();
  const int64_t q = 1024 * 2048, kv = 1024 * 1024, mlp = 1024 * 3072;
  const int64_t per_layer = 2 * q + 2 * kv + 3 * mlp;  // q, o; k, v; gate, up, down: 15,728,640
  EXPECT_EQ(per_layer, 15728640);
  const int64_t head = 151936 * 1024;
  // Per layer also two RMSNorms (2 x 1024) and the q/k norms (2 x 128); no biases.
  const int64_t total = head + 28 * (per_layer + 2 * 1024 + 2 * 128) + 1024;
  EXPECT_EQ(total, 596049920);  // the published 0.6B (0.44B without the embedding)
  const auto c = count_params(s, lora_all7_r16());
  EXPECT_EQ(c.base_total, 596049920);
  EXPECT_EQ(c.matmul, 28 * per_layer + head);
  // LoRA r=16 on q: 16 x (1024 + 2048); k, v: 16 x (1024 + 1024); o: 16 x (2048 + 1024); gate, up, down.
  const int64_t lora_layer = 16 * (3072 + 2048 + 2048 + 3072 + 3 * (1024 + 3072));
  EXPECT_EQ(c.lora, 28 * lora_layer);
  s.qk_norm = false;  // the q/k norms are counted: without them 28 x 256 fewer
  EXPECT_EQ(count_params(s, lora_all7_r16()).base_total, 596049920 - 28 * 256);
}

TEST(Flops, Qwen25_05bLoraR16Seq256ByHand) {
  // Forward: 2 FLOPs per weight per token, base GEMM weights plus LoRA A and B.
  const int64_t forward_matmul = 2 * (493961216 + 8798208);  // 2 x 502,759,424
  EXPECT_EQ(forward_matmul, 1005518848);

  // Backward input gradients: every weight whose input depends on a trainable parameter. Layer 0's
  // q, k, v (base and LoRA A) read norm(embedding), which is frozen: no input gradient there.
  const int64_t layer0_qkv_base = 802816 + 114688 + 114688;  // 1,032,192
  const int64_t base_dx = 493961216 - layer0_qkv_base;       // 492,929,024
  EXPECT_EQ(base_dx, 492929024);
  // LoRA B (r x out): its input x·A always depends on A. 16 x (896+128+128+896+4864+4864+896) per layer.
  const int64_t lora_b = 24 * 16 * (896 + 128 + 128 + 896 + 4864 + 4864 + 896);  // 24 x 202,752
  EXPECT_EQ(lora_b, 4866048);
  // LoRA A (in x r): layers 1..23 all seven, layer 0 only o, gate, up, down.
  const int64_t lora_a = 23 * 16 * (896 * 6 + 4864) + 16 * (896 + 896 + 896 + 4864);  // 3,768,320 + 120,832
  EXPECT_EQ(lora_a, 3889152);
  const int64_t backward_input = 2 * (base_dx + lora_b + lora_a);  // 2 x 501,684,224
  EXPECT_EQ(backward_input, 1003368448);

  // Backward weight gradients: only the trainable (LoRA) weights.
  const int64_t backward_weight = 2 * 8798208;
  EXPECT_EQ(backward_weight, 17596416);

  // Attention per token, per layer and query head, T = 256 keys (full, non-causal count as in PaLM):
  // forward Q·K^T 2·T·d + P·V 2·T·d; backward dP, dV, dQ, dK 2·T·d each.
  const int64_t t_d = 256 * 64;                                 // 16,384
  const int64_t attention_forward = 24 * 14 * (2 + 2) * t_d;    // 336 x 65,536
  const int64_t attention_backward = 24 * 14 * (4 * 2) * t_d;   // 336 x 131,072
  EXPECT_EQ(attention_forward, 22020096);
  EXPECT_EQ(attention_backward, 44040192);
  EXPECT_EQ(attention_forward + attention_backward, 12LL * 24 * 14 * 64 * 256);  // PaLM's 12·L·H·Q·T

  const int64_t total = forward_matmul + backward_input + backward_weight + attention_forward + attention_backward;
  EXPECT_EQ(total, 2092544000);
  // The "4·N_frozen + 6·N_trainable + attention" approximation overcounts by layer 0's skipped dX.
  EXPECT_EQ(4LL * 493961216 + 6LL * 8798208 + 66060288 - 2 * (layer0_qkv_base + 16 * 896 * 3), total);

  const auto f = training_flops_per_token(qwen25_05b(), lora_all7_r16(), 256);
  EXPECT_EQ(f.forward_matmul, forward_matmul);
  EXPECT_EQ(f.backward_input, backward_input);
  EXPECT_EQ(f.backward_weight, backward_weight);
  EXPECT_EQ(f.attention_forward, attention_forward);
  EXPECT_EQ(f.attention_backward, attention_backward);
  EXPECT_EQ(f.total(), 2092544000);
  EXPECT_EQ(f.total() * 256, 535691264000);  // one 256-token sequence (micro_batch 1, one step)
}

TEST(Flops, FullFineTuningIsSixNPlusAttention) {
  // 6 x 493,961,216 + 12 x 24 x 14 x 64 x 256 = 2,963,767,296 + 66,060,288
  const auto f = training_flops_per_token(qwen25_05b(), LoraSpec{}, 256);
  EXPECT_EQ(f.forward_matmul, 2LL * 493961216);
  EXPECT_EQ(f.backward_input, 2LL * 493961216);
  EXPECT_EQ(f.backward_weight, 2LL * 493961216);
  EXPECT_EQ(f.total(), 3029827584);
}

TEST(Flops, GradientPathFollowsWhereAdaptersSit) {
  // Tiny shape: 2 layers, hidden 8, intermediate 16, 2 heads, 1 KV head, head_dim 4, vocab 10, tied.
  const TransformerShape s = lbtest::make_shape(2, 8, 16, 2, 1, 4, 10, true, true, false);
  // Weights per layer: q 64, k 32, v 32, o 64, gate 128, up 128, down 128 = 576; head 80.
  // LoRA r=2 on o only: A 8x2 = 16, B 2x8 = 16 per layer.
  const auto f = training_flops_per_token(s, LoraSpec::from_names(true, 2, {"o"}), 3);
  EXPECT_EQ(f.forward_matmul, 2 * (2 * 576 + 80 + 2 * 32));  // 2592
  // Layer 0: q,k,v,o and LoRA-A(o) see no gradient at their input; LoRA-B(o), gate, up, down do.
  // Layer 1 and the head: all of them.
  EXPECT_EQ(f.backward_input, 2 * ((16 + 128 + 128 + 128) + (576 + 16 + 16) + 80));  // 2176
  EXPECT_EQ(f.backward_weight, 2 * (2 * 32));                                       // 128
  EXPECT_EQ(f.attention_forward, 2 * 2 * (2 + 2) * 3 * 4);                           // 192
  // Layer 0: nothing before o needs a gradient, so no attention backward; layer 1: all four GEMMs.
  EXPECT_EQ(f.attention_backward, 2 * (4 * 2) * 3 * 4);  // 192
  EXPECT_EQ(f.total(), 5280);

  // LoRA on q only: layer 0 needs dP and dQ (2 + 2), not dV or dK; layer 1 needs all four.
  const auto g = training_flops_per_token(s, LoraSpec::from_names(true, 2, {"q"}), 3);
  EXPECT_EQ(g.attention_backward, 2 * (2 + 2) * 3 * 4 + 2 * (4 * 2) * 3 * 4);  // 96 + 192
}

// Qwen3.5-0.8B by hand. A linear layer: in_proj_qkv 1024 x (2 x 16 x 128 + 16 x 128 = 6144), in_proj_z 1024 x 2048,
// in_proj_b and in_proj_a 1024 x 16, out_proj 2048 x 1024, the MLP 3 x 1024 x 3584: 21,528,576 in GEMMs; the
// convolution 6144 x 4, dt_bias and A_log 2 x 16, the gated norm 128, two norms 2 x 1024: 21,555,360. A full
// layer: q_proj 1024 x 4096 (queries and gates), k and v 1024 x 512, o 2048 x 1024, the MLP: 18,350,080 in GEMMs,
// with q/k norms 2 x 256 and two norms 18,352,640. 18 linear and 6 full layers, the embedding 248320 x 1024,
// the final norm: 752,393,024.
TEST(Flops, Qwen3_5_08bParameterCountsAndTheDeltaRuleByHand) {
  const auto s = lbtest::qwen3_5_08b();
  const ParamCounts c = count_params(s, LoraSpec{});
  EXPECT_EQ(c.base_total, 752393024);
  EXPECT_EQ(c.matmul, 18 * 21528576LL + 6 * 18350080LL + 248320LL * 1024);
  // LoRA r 8 on in_proj_qkv and out_proj: linear layers only, 8 x (1024 + 6144) + 8 x (2048 + 1024) each.
  const LoraSpec lin = LoraSpec::from_names(true, 8, {"in_proj_qkv", "out_proj"});
  EXPECT_EQ(count_params(s, lin).lora, 18 * (8 * (1024 + 6144) + 8 * (2048 + 1024)));
  // Per token at T = 4096, full fine-tuning: the delta rule 16 value heads x (64 x (5 x 128 + 3 x 128) +
  // 6 x 128 x 128) = 2,621,440 per linear layer forward, twice that backward; the full layers' attention
  // 4 x 4096 x 256 per head forward and 8 x backward, as for Qwen3.
  const FlopsPerToken f = training_flops_per_token(s, LoraSpec{}, 4096);
  EXPECT_EQ(f.delta_forward, 18 * 2621440LL);
  EXPECT_EQ(f.delta_backward, 2 * 18 * 2621440LL);
  EXPECT_EQ(f.attention_forward, 6 * 8 * 4 * 4096LL * 256);
  EXPECT_EQ(f.attention_backward, 6 * 8 * 8 * 4096LL * 256);
  EXPECT_EQ(f.forward_matmul, 2 * c.matmul);
  EXPECT_EQ(f.total(), 6 * c.matmul + 3 * f.delta_forward + 3 * f.attention_forward);
  // The delta rule does not grow with T: a linear layer's share falls as the full layers' attention rises.
  EXPECT_EQ(training_flops_per_token(s, LoraSpec{}, 512).delta_forward, f.delta_forward);
  // LoRA on the MLP only: the first layer (linear) needs no delta-rule backward, every later one does.
  const LoraSpec mlp = LoraSpec::from_names(true, 8, {"gate", "up", "down"});
  EXPECT_EQ(training_flops_per_token(s, mlp, 4096).delta_backward, 2 * 17 * 2621440LL);
  EXPECT_TRUE(layer_has(s, 0, LoraTarget::kLinQkv));
  EXPECT_FALSE(layer_has(s, 3, LoraTarget::kLinQkv));
  EXPECT_TRUE(layer_has(s, 3, LoraTarget::kQ));
  EXPECT_THROW(LoraSpec::from_names(true, 8, {"in_proj_x"}), ConfigError);
}

TEST(Flops, MfuAndInputChecks) {
  EXPECT_DOUBLE_EQ(lorabench::metrics::mfu(535691264000.0, 2.0, 535691264000.0), 0.5);
  EXPECT_THROW(lorabench::metrics::mfu(1, 0, 1), lorabench::Error);
  EXPECT_THROW(lorabench::metrics::mfu(1, 1, 0), lorabench::Error);
  EXPECT_THROW(LoraSpec::from_names(true, 16, {"q", "qkv"}), lorabench::ConfigError);
  EXPECT_THROW(count_params(TransformerShape{}, LoraSpec{}), lorabench::Error);
  EXPECT_THROW(training_flops_per_token(qwen25_05b(), lora_all7_r16(), 0), lorabench::Error);
}

TEST(Flops, JobPeakIsTheBestRanksWithTheRange) {
  lorabench::metrics::PeakFlops own{49.2e9, "calibrated", "BFloat16 GEMM 2048x2048x2048, best of 8, 1 thread"};
  // Two ranks: the one that interference slowed takes the other's figure, and the detail keeps both.
  const auto p = lorabench::metrics::job_peak(own, {49.2e9, 87.9e9});
  EXPECT_DOUBLE_EQ(p.flops_per_s, 87.9e9);
  EXPECT_EQ(p.source, "calibrated");
  EXPECT_EQ(p.detail, own.detail + "; the best of 2 ranks' calibrations (49.2 to 87.9 GFLOP/s)");
  // The best rank need not be the first or the last.
  EXPECT_DOUBLE_EQ(lorabench::metrics::job_peak(own, {3e9, 9e9, 1e9}).flops_per_s, 9e9);
  // One rank: its own figure and detail, unchanged.
  const auto one = lorabench::metrics::job_peak(own, {49.2e9});
  EXPECT_DOUBLE_EQ(one.flops_per_s, 49.2e9);
  EXPECT_EQ(one.detail, own.detail);
  EXPECT_THROW(lorabench::metrics::job_peak(own, {}), lorabench::Error);
  EXPECT_THROW(lorabench::metrics::job_peak(own, {1e9, 0}), lorabench::Error);
}
