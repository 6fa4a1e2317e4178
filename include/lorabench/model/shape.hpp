// The numbers of a Qwen decoder (Qwen2/Qwen2.5 and Qwen3 dense), from a preset or a Hugging Face config.json.
// The two families share one model code path: what Qwen3 changes is data here (no q/k/v biases, a per-head
// RMSNorm of queries and keys before RoPE, a head size of its own). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lorabench::model {

struct ModelShape {
  std::string name;          // preset name, or the snapshot directory
  std::string family = "qwen2";  // config.json's model_type: "qwen2" (Qwen2, Qwen2.5) or "qwen3"
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

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  int64_t params_per_layer() const;  // weights, biases and norms of one decoder layer
  int64_t total_params() const;      // embedding + layers + final norm (+ lm_head when untied)
};

// tiny, small, qwen2.5-0.5b ... qwen2.5-7b, qwen3-tiny, qwen3-0.6b ... qwen3-32b (the public configs'
// numbers; tiny, small and qwen3-tiny are test and benchmark shapes). Throws ConfigError for an unknown name.
ModelShape preset_shape(const std::string& name);
const std::vector<std::string>& preset_names();

// Reads a Hugging Face config.json (model_type qwen2 or qwen3). Throws IoError naming the file and the key.
ModelShape load_hf_config(const std::string& path);

// The same numbers as a Hugging Face config.json (for merged-weight export).
std::string hf_config_json(const ModelShape& s, const std::string& torch_dtype);

}  // namespace lorabench::model
