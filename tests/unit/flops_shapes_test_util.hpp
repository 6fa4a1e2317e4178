// The published shapes the FLOP and byte tests count by hand (each model's config.json), in one place.
#pragma once

#include <cstdint>

#include "lorabench/metrics/flops.hpp"

namespace lbtest {

inline lorabench::metrics::TransformerShape make_shape(int64_t layers, int64_t hidden, int64_t intermediate,
                                                       int64_t heads, int64_t kv_heads, int64_t head_dim,
                                                       int64_t vocab, bool tied, bool qkv_bias, bool qk_norm) {
  lorabench::metrics::TransformerShape s;
  s.layers = layers;
  s.hidden = hidden;
  s.intermediate = intermediate;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.vocab = vocab;
  s.tied_embeddings = tied;
  s.qkv_bias = qkv_bias;
  s.qk_norm = qk_norm;
  return s;
}

// Qwen2.5-0.5B: 24 layers, hidden 896, 14 heads of 64, 2 KV heads, intermediate 4864, tied, q/k/v biases.
inline lorabench::metrics::TransformerShape qwen25_05b() {
  return make_shape(24, 896, 4864, 14, 2, 64, 151936, true, true, false);
}

// Qwen3-0.6B: 28 layers, hidden 1024, 16 heads of 128 (q_proj 1024 -> 2048: head_dim is not hidden / heads),
// 8 KV heads, intermediate 3072, tied, no q/k/v biases, q_norm and k_norm.
inline lorabench::metrics::TransformerShape qwen3_06b() {
  return make_shape(28, 1024, 3072, 16, 8, 128, 151936, true, false, true);
}

// Qwen3.5-0.8B's text model: 24 layers, every fourth full attention (8 heads of 256, q_proj 1024 -> 4096 with the
// output gates, 2 KV heads), the others Gated DeltaNet (16 key heads and 16 value heads of 128, conv kernel 4,
// chunks of 64), hidden 1024, intermediate 3584, vocabulary 248320, tied.
inline lorabench::metrics::TransformerShape qwen3_5_08b() {
  lorabench::metrics::TransformerShape s = make_shape(24, 1024, 3584, 8, 2, 256, 248320, true, false, true);
  s.attn_output_gate = true;
  for (int i = 0; i < 24; ++i) s.linear.push_back((i + 1) % 4 != 0);
  s.lin_k_heads = 16;
  s.lin_v_heads = 16;
  s.lin_k_dim = 128;
  s.lin_v_dim = 128;
  s.conv_kernel = 4;
  s.delta_chunk = 64;
  return s;
}

// LoRA r 16 on all seven projections (the benchmark's).
inline lorabench::metrics::LoraSpec lora_all7_r16() {
  return lorabench::metrics::LoraSpec::from_names(true, 16, {"q", "k", "v", "o", "gate", "up", "down"});
}

}  // namespace lbtest
