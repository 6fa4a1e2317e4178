// The numbers of a Qwen decoder (Qwen2/Qwen2.5, Qwen3 dense and Qwen3.5's text model), from a preset or a Hugging
// Face config.json. The families share one model code path: what Qwen3 changes is data here (no q/k/v biases, a
// per-head RMSNorm of queries and keys before RoPE, a head size of its own), and so is what Qwen3.5 adds: layers of
// two kinds (`linear`: Gated DeltaNet linear attention in most layers, full attention in the others), RMSNorms that
// scale by (1 + weight), an output gate on the attention and a rotary embedding over part of each head. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lorabench::model {

// The chunk length of the gated delta rule (Qwen3.5's linear attention): transformers' and flash-linear-attention's.
constexpr int64_t kDeltaRuleChunk = 64;

struct ModelShape {
  std::string name;          // preset name, or the snapshot directory
  std::string family = "qwen2";  // config.json's model_type: "qwen2" (Qwen2, Qwen2.5), "qwen3" or "qwen3_5"
  int64_t vocab_size = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;      // hidden / heads for every Qwen2.5 size; 128 for every Qwen3 size (config.json)
  bool qkv_bias = true;      // q/k/v projections have biases: Qwen2; Qwen3 has none (attention_bias)
  bool qk_norm = false;      // Qwen3: RMSNorm over each head of q and of k (weights q_norm, k_norm: head_dim)
  double rope_theta = 0;
  double rms_eps = 0;
  bool tie_embeddings = true;
  int64_t max_positions = 0;

  // Qwen3.5. linear[i]: layer i is a Gated DeltaNet layer (config.layer_types "linear_attention"); empty: every
  // layer is full attention.
  std::vector<bool> linear;
  bool zero_centred_norm = false;  // every RMSNorm but the gated one scales by (1 + weight), in fp32
  bool attn_output_gate = false;   // q_proj gives each head its query and an output gate: (H * 2d) rows
  int64_t rotary_dim = 0;          // the dimensions of each head that are rotated (head_dim * partial_rotary_factor)
  int64_t lin_k_heads = 0, lin_v_heads = 0;  // the linear layers' key (and query) heads, value heads
  int64_t lin_k_dim = 0, lin_v_dim = 0;      // and their sizes
  int64_t conv_kernel = 0;                   // the causal depthwise convolution's width

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  int64_t q_proj_dim() const { return attn_output_gate ? 2 * q_dim() : q_dim(); }  // q_proj's output rows
  int64_t rope_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  bool is_linear(int64_t layer) const { return !linear.empty() && linear[size_t(layer)]; }
  int64_t linear_layers() const;                                  // how many layers are linear attention
  int64_t lin_key_dim() const { return lin_k_heads * lin_k_dim; }    // queries, and keys
  int64_t lin_value_dim() const { return lin_v_heads * lin_v_dim; }
  int64_t lin_conv_dim() const { return 2 * lin_key_dim() + lin_value_dim(); }  // in_proj_qkv's rows
  // in_proj_qkv | in_proj_z | in_proj_b | in_proj_a, one GEMM: q, k, v, the gate z, beta's and the decay's inputs.
  int64_t lin_in_dim() const { return lin_conv_dim() + lin_value_dim() + 2 * lin_v_heads; }
  int64_t params_per_layer() const;  // weights, biases and norms of one full-attention decoder layer
  int64_t params_of_layer(int64_t layer) const;  // of layer `layer`, either kind
  int64_t total_params() const;      // embedding + layers + final norm (+ lm_head when untied)
  std::string layer_mix() const;     // "24 layers" or "18 linear-attention + 6 full-attention layers"
};

// tiny, small, qwen2.5-0.5b ... qwen2.5-7b, qwen3-tiny, qwen3-0.6b ... qwen3-32b, qwen3.5-tiny, qwen3.5-0.8b ...
// (the public configs' numbers; tiny, small and the *-tiny shapes are test and benchmark shapes). Throws ConfigError for an unknown name.
ModelShape preset_shape(const std::string& name);
const std::vector<std::string>& preset_names();

// Reads a Hugging Face config.json (model_type qwen2, qwen3, qwen3_5_text, or qwen3_5 whose text_config is read).
// Throws IoError naming the file and the key.
ModelShape load_hf_config(const std::string& path);

// The same numbers as a Hugging Face config.json (for merged-weight export).
std::string hf_config_json(const ModelShape& s, const std::string& torch_dtype);

}  // namespace lorabench::model
