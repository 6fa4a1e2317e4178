#include "lorabench/model/shape.hpp"

#include <nlohmann/json.hpp>

#include <fstream>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::model {

int64_t ModelShape::params_per_layer() const {
  const int64_t d = hidden;
  int64_t attn = d * q_proj_dim() + 2 * d * kv_dim() + q_dim() * d;
  if (qkv_bias) attn += q_dim() + 2 * kv_dim();
  if (qk_norm) attn += 2 * head_dim;
  int64_t mlp = 3 * d * intermediate;
  return attn + mlp + 2 * d;
}

int64_t ModelShape::params_of_layer(int64_t layer) const {
  if (!is_linear(layer)) return params_per_layer();
  const int64_t d = hidden;
  // in_proj_qkv|z|b|a, the convolution, dt_bias and A_log, the gated norm, out_proj; the MLP and the two norms.
  const int64_t mixer = d * lin_in_dim() + lin_conv_dim() * conv_kernel + 2 * lin_v_heads + lin_v_dim +
                        lin_value_dim() * d;
  return mixer + 3 * d * intermediate + 2 * d;
}

int64_t ModelShape::linear_layers() const {
  int64_t n = 0;
  for (bool l : linear) n += l ? 1 : 0;
  return n;
}

std::string ModelShape::layer_mix() const {
  const int64_t lin = linear_layers();
  if (lin == 0) return std::to_string(layers) + " layers";
  return std::to_string(lin) + " linear-attention + " + std::to_string(layers - lin) + " full-attention layers";
}

int64_t ModelShape::total_params() const {
  int64_t emb = vocab_size * hidden;
  int64_t n = emb + hidden + (tie_embeddings ? 0 : emb);
  for (int64_t i = 0; i < layers; ++i) n += params_of_layer(i);
  return n;
}

namespace {
ModelShape make(const char* name, int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
                int64_t kv, bool tie, int64_t max_pos) {
  ModelShape s;
  s.name = name;
  s.vocab_size = vocab;
  s.hidden = hidden;
  s.intermediate = inter;
  s.layers = layers;
  s.heads = heads;
  s.kv_heads = kv;
  s.head_dim = hidden / heads;
  s.rope_theta = 1e6;
  s.rms_eps = 1e-6;
  s.tie_embeddings = tie;
  s.max_positions = max_pos;
  return s;
}
// Qwen3: head_dim 128 whatever hidden / heads is, no q/k/v biases, q_norm and k_norm, 40960 positions.
ModelShape make_qwen3(const char* name, int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
                      int64_t kv, bool tie, int64_t head_dim = 128) {
  ModelShape s = make(name, vocab, hidden, inter, layers, heads, kv, tie, 40960);
  s.family = "qwen3";
  s.head_dim = head_dim;
  s.qkv_bias = false;
  s.qk_norm = true;
  return s;
}
// Qwen3.5's text model: every `interval`-th layer full attention (gated, head_dim 256 in the public sizes, a
// quarter of each head rotated), the others Gated DeltaNet; norms scaled by (1 + weight); no biases.
ModelShape make_qwen3_5(const char* name, int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
                        int64_t kv, bool tie, int64_t head_dim, int64_t lin_k_heads, int64_t lin_v_heads,
                        int64_t lin_dim, int64_t interval = 4) {
  ModelShape s = make(name, vocab, hidden, inter, layers, heads, kv, tie, 262144);
  s.family = "qwen3_5";
  s.head_dim = head_dim;
  s.qkv_bias = false;
  s.qk_norm = true;
  s.zero_centred_norm = true;
  s.attn_output_gate = true;
  s.rotary_dim = head_dim / 4;
  s.rope_theta = 1e7;
  s.lin_k_heads = lin_k_heads;
  s.lin_v_heads = lin_v_heads;
  s.lin_k_dim = s.lin_v_dim = lin_dim;
  s.conv_kernel = 4;
  for (int64_t i = 0; i < layers; ++i) s.linear.push_back((i + 1) % interval != 0);
  return s;
}
}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"tiny",       "small",      "qwen2.5-0.5b", "qwen2.5-1.5b",
                                                 "qwen2.5-3b", "qwen2.5-7b", "qwen3-tiny",   "qwen3-0.6b",
                                                 "qwen3-1.7b", "qwen3-4b",   "qwen3-8b",     "qwen3-14b",
                                                 "qwen3-32b",  "qwen3.5-tiny", "qwen3.5-0.8b", "qwen3.5-2b",
                                                 "qwen3.5-4b", "qwen3.5-9b", "qwen3.5-27b"};
  return names;
}

ModelShape preset_shape(const std::string& name) {
  // tiny: the test fixture's shape with the full Qwen2.5 vocabulary, so it can train on tokenized data.
  if (name == "tiny") return make("tiny", 151936, 64, 176, 2, 4, 2, true, 32768);
  // small: the PyTorch peer's benchmark shape (bench/peer_torch.py).
  if (name == "small") return make("small", 32000, 256, 768, 4, 8, 2, true, 32768);
  if (name == "qwen2.5-0.5b") return make("qwen2.5-0.5b", 151936, 896, 4864, 24, 14, 2, true, 32768);
  if (name == "qwen2.5-1.5b") return make("qwen2.5-1.5b", 151936, 1536, 8960, 28, 12, 2, true, 32768);
  if (name == "qwen2.5-3b") return make("qwen2.5-3b", 151936, 2048, 11008, 36, 16, 2, true, 32768);
  if (name == "qwen2.5-7b") return make("qwen2.5-7b", 152064, 3584, 18944, 28, 28, 4, false, 32768);
  // qwen3-tiny: tiny's sizes with Qwen3's differences, head_dim 32 (not hidden / heads, as in 0.6B).
  if (name == "qwen3-tiny") return make_qwen3("qwen3-tiny", 151936, 64, 176, 2, 4, 2, true, 32);
  // The config.json of each Qwen/Qwen3-<size> snapshot on the Hugging Face hub (April 2025 release; the
  // same numbers as torchtune's qwen3 model builders): vocab 151936, head_dim 128, rope_theta 1e6,
  // rms_norm_eps 1e-6, max_position_embeddings 40960; tied up to 4B.
  if (name == "qwen3-0.6b") return make_qwen3("qwen3-0.6b", 151936, 1024, 3072, 28, 16, 8, true);
  if (name == "qwen3-1.7b") return make_qwen3("qwen3-1.7b", 151936, 2048, 6144, 28, 16, 8, true);
  if (name == "qwen3-4b") return make_qwen3("qwen3-4b", 151936, 2560, 9728, 36, 32, 8, true);
  if (name == "qwen3-8b") return make_qwen3("qwen3-8b", 151936, 4096, 12288, 36, 32, 8, false);
  if (name == "qwen3-14b") return make_qwen3("qwen3-14b", 151936, 5120, 17408, 40, 40, 8, false);
  if (name == "qwen3-32b") return make_qwen3("qwen3-32b", 151936, 5120, 25600, 64, 64, 8, false);
  // qwen3.5-tiny: the test fixture's layout (tests/fixtures/qwen3.5-tiny: three linear layers, then one full) with
  // Qwen3.5's vocabulary, so that it trains on tokenized data.
  if (name == "qwen3.5-tiny") {
    ModelShape s = make_qwen3_5("qwen3.5-tiny", 248320, 64, 96, 4, 4, 2, true, 32, 2, 4, 16);
    s.rope_theta = 1e6;
    return s;
  }
  // The text_config of each Qwen/Qwen3.5-<size> snapshot (dense sizes, 2026): vocab 248320, head_dim 256 (a quarter
  // rotated, theta 1e7), linear layers of 16 key heads and 128-wide heads, conv kernel 4, every fourth layer full
  // attention, 262144 positions; tied up to 4B. Cross-checked between the training launch scripts of slime and
  // miles (scripts/models/qwen3.5-*), ComfyUI's qwen35 table and transformers' defaults (the 9B).
  if (name == "qwen3.5-0.8b") return make_qwen3_5("qwen3.5-0.8b", 248320, 1024, 3584, 24, 8, 2, true, 256, 16, 16, 128);
  if (name == "qwen3.5-2b") return make_qwen3_5("qwen3.5-2b", 248320, 2048, 6144, 24, 8, 2, true, 256, 16, 16, 128);
  if (name == "qwen3.5-4b") return make_qwen3_5("qwen3.5-4b", 248320, 2560, 9216, 32, 16, 4, true, 256, 16, 32, 128);
  if (name == "qwen3.5-9b") return make_qwen3_5("qwen3.5-9b", 248320, 4096, 12288, 32, 16, 4, false, 256, 16, 32, 128);
  if (name == "qwen3.5-27b") return make_qwen3_5("qwen3.5-27b", 248320, 5120, 17408, 64, 24, 4, false, 256, 16, 48, 128);
  throw ConfigError("model.preset: unknown preset \"" + name + "\" (expected " + join(preset_names(), ", ") + ")");
}

ModelShape load_hf_config(const std::string& path) {
  std::string text = read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw IoError(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw IoError(path + ": not a JSON object");
  // Qwen3.5's snapshots describe the multimodal model (model_type qwen3_5): its text model is text_config.
  std::string where;  // the key prefix named in messages
  nlohmann::json top;
  if (j.contains("model_type") && j["model_type"] == "qwen3_5") {
    if (!j.contains("text_config") || !j["text_config"].is_object())
      throw IoError(path + ": model_type qwen3_5 without a \"text_config\" object");
    top = j;
    nlohmann::json t = j["text_config"];
    j = t;
    where = "text_config.";
    if (!j.contains("model_type")) j["model_type"] = "qwen3_5_text";
    if (!j.contains("tie_word_embeddings") && top.contains("tie_word_embeddings"))
      j["tie_word_embeddings"] = top["tie_word_embeddings"];
  }
  // Every integer read here is a size, every number a positive constant: anything else is refused here,
  // where the file and key can be named, rather than failing (or overflowing) when the model is built.
  auto get_int = [&](const char* key) -> int64_t {
    if (!j.contains(key) || !j[key].is_number_integer())
      throw IoError(path + ": key \"" + where + key + "\" is missing or not an integer");
    if (j[key].is_number_unsigned() ? (j[key].get<uint64_t>() == 0 || j[key].get<uint64_t>() > uint64_t(INT64_MAX))
                                    : j[key].get<int64_t>() <= 0)
      throw IoError(path + ": key \"" + where + key + "\" must be a positive integer, got " + j[key].dump());
    return j[key].get<int64_t>();
  };
  auto get_num = [&](const char* key, double def) -> double {
    if (!j.contains(key) || j[key].is_null()) return def;
    if (!j[key].is_number()) throw IoError(path + ": key \"" + where + key + "\" is not a number");
    if (!(j[key].get<double>() > 0))
      throw IoError(path + ": key \"" + where + key + "\" must be positive, got " + j[key].dump());
    return j[key].get<double>();
  };
  auto get_bool = [&](const char* key, bool def) -> bool {
    if (!j.contains(key) || j[key].is_null()) return def;
    if (!j[key].is_boolean()) throw IoError(path + ": key \"" + where + key + "\" is not true or false");
    return j[key].get<bool>();
  };
  if (j.contains("model_type") && j["model_type"] != "qwen2" && j["model_type"] != "qwen3" &&
      j["model_type"] != "qwen3_5_text")
    throw IoError(path + ": " + where + "model_type is " + j["model_type"].dump() +
                  ", lorabench implements qwen2, qwen3 and qwen3_5 (qwen3_5_text)");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    throw IoError(path + ": hidden_act " + j["hidden_act"].dump() + " is not supported (silu)");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    throw IoError(path + ": rope_scaling is not supported (found " + j["rope_scaling"].dump() + ")");
  if (get_bool("use_sliding_window", false))
    throw IoError(path + ": use_sliding_window = true is not supported");
  ModelShape s;
  s.name = path;
  // Qwen2's q/k/v projections always have biases (its config has no key for them); Qwen3's follow
  // attention_bias (false in every released size) and it normalises each head of q and k.
  s.family = j.contains("model_type") ? j["model_type"].get<std::string>() : "qwen2";
  if (s.family == "qwen3_5_text") s.family = "qwen3_5";
  const bool qwen3_5 = s.family == "qwen3_5";
  s.qk_norm = s.family != "qwen2";
  s.qkv_bias = s.family != "qwen2" ? get_bool("attention_bias", false) : true;
  s.vocab_size = get_int("vocab_size");
  s.hidden = get_int("hidden_size");
  s.intermediate = get_int("intermediate_size");
  s.layers = get_int("num_hidden_layers");
  s.heads = get_int("num_attention_heads");
  s.kv_heads = j.contains("num_key_value_heads") ? get_int("num_key_value_heads") : s.heads;
  s.head_dim = j.contains("head_dim") ? get_int("head_dim") : qwen3_5 ? 256 : s.hidden / s.heads;
  s.rope_theta = get_num("rope_theta", 10000.0);
  double partial_rotary = get_num("partial_rotary_factor", qwen3_5 ? 0.25 : 1.0);
  // transformers 5 writes the rotary settings as "rope_parameters": {"rope_theta", "rope_type"} (the hub's
  // Qwen config.json files have a top-level rope_theta and rope_scaling null); only the default type.
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const auto& rp = j["rope_parameters"];
    if (!rp.is_object()) throw IoError(path + ": key \"rope_parameters\" is not an object");
    if (rp.contains("rope_type") && rp["rope_type"] != "default")
      throw IoError(path + ": rope_parameters.rope_type " + rp["rope_type"].dump() + " is not supported (default)");
    if (rp.contains("rope_theta")) {
      if (!rp["rope_theta"].is_number() || !(rp["rope_theta"].get<double>() > 0))
        throw IoError(path + ": rope_parameters.rope_theta must be a positive number, got " + rp["rope_theta"].dump());
      if (j.contains("rope_theta") && !j["rope_theta"].is_null() && j["rope_theta"].get<double>() != rp["rope_theta"].get<double>())
        throw IoError(path + ": rope_theta " + j["rope_theta"].dump() + " and rope_parameters.rope_theta " +
                      rp["rope_theta"].dump() + " differ");
      s.rope_theta = rp["rope_theta"].get<double>();
    }
    if (rp.contains("partial_rotary_factor")) {
      const auto& f = rp["partial_rotary_factor"];
      if (!f.is_number() || !(f.get<double>() > 0 && f.get<double>() <= 1))
        throw IoError(path + ": " + where + "rope_parameters.partial_rotary_factor must be in (0, 1], got " + f.dump());
      partial_rotary = f.get<double>();
    }
    // Qwen3.5's multimodal rotary sections (mrope_section, mrope_interleaved) rotate every section by the same
    // angle when the positions are a text's 0..T-1, as here: the plain rotary embedding.
  }
  if (!(partial_rotary > 0 && partial_rotary <= 1))
    throw IoError(path + ": " + where + "partial_rotary_factor must be in (0, 1]");
  if (partial_rotary < 1 && !qwen3_5)
    throw IoError(path + ": partial_rotary_factor < 1 is implemented for qwen3_5 only");
  // layer_types: Qwen3's are all full attention (sliding-window layers are not implemented); Qwen3.5's mix Gated
  // DeltaNet layers ("linear_attention") with full ones, by default every full_attention_interval-th (4).
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    if (!j["layer_types"].is_array()) throw IoError(path + ": key \"" + where + "layer_types\" is not a list");
    if (int64_t(j["layer_types"].size()) != s.layers)
      throw IoError(path + ": " + where + "layer_types has " + std::to_string(j["layer_types"].size()) +
                    " entries for " + std::to_string(s.layers) + " layers");
    for (const auto& t : j["layer_types"]) {
      if (qwen3_5 && t == "linear_attention") {
        s.linear.push_back(true);
      } else if (t == "full_attention") {
        s.linear.push_back(false);
      } else {
        throw IoError(path + ": " + where + "layer_types holds " + t.dump() + ", lorabench implements " +
                      (qwen3_5 ? "linear_attention and full_attention" : "full_attention") + " layers");
      }
    }
  } else if (qwen3_5) {
    const int64_t interval = j.contains("full_attention_interval") ? get_int("full_attention_interval") : 4;
    for (int64_t i = 0; i < s.layers; ++i) s.linear.push_back((i + 1) % interval != 0);
  }
  if (s.linear_layers() == 0) s.linear.clear();
  if (qwen3_5) {
    // transformers' Qwen3.5 attention always gates its output and normalises q and k; its norms scale by (1 + w).
    if (!get_bool("attn_output_gate", true))
      throw IoError(path + ": " + where + "attn_output_gate = false is not what transformers' qwen3_5 computes");
    s.attn_output_gate = true;
    s.zero_centred_norm = true;
    s.lin_k_heads = j.contains("linear_num_key_heads") ? get_int("linear_num_key_heads") : 16;
    s.lin_v_heads = j.contains("linear_num_value_heads") ? get_int("linear_num_value_heads") : 32;
    s.lin_k_dim = j.contains("linear_key_head_dim") ? get_int("linear_key_head_dim") : 128;
    s.lin_v_dim = j.contains("linear_value_head_dim") ? get_int("linear_value_head_dim") : 128;
    s.conv_kernel = j.contains("linear_conv_kernel_dim") ? get_int("linear_conv_kernel_dim") : 4;
    if (s.lin_v_heads % s.lin_k_heads != 0)
      throw IoError(path + ": " + where + "linear_num_value_heads must be a multiple of linear_num_key_heads");
  }
  s.rms_eps = get_num("rms_norm_eps", 1e-6);
  s.tie_embeddings = get_bool("tie_word_embeddings", false);
  s.max_positions = j.contains("max_position_embeddings") ? get_int("max_position_embeddings") : 32768;
  if (s.heads <= 0 || s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    throw IoError(path + ": num_attention_heads must be a positive multiple of num_key_value_heads");
  // Without head_dim, transformers takes hidden_size // num_attention_heads, which is 0 when there are
  // more heads than hidden units.
  if (s.head_dim <= 0)
    throw IoError(path + ": head dimension hidden_size / num_attention_heads = " + std::to_string(s.hidden) + " / " +
                  std::to_string(s.heads) + " is 0 (give head_dim, or fewer heads)");
  if (s.head_dim % 2 != 0) throw IoError(path + ": head dimension must be even for rotary embeddings");
  if (partial_rotary < 1) {
    s.rotary_dim = int64_t(double(s.head_dim) * partial_rotary);  // transformers: int(head_dim * factor)
    if (s.rotary_dim <= 0 || s.rotary_dim % 2 != 0)
      throw IoError(path + ": head_dim * partial_rotary_factor = " + std::to_string(s.rotary_dim) +
                    " rotated dimensions (must be even and positive)");
  }
  // The parameter count (int64 arithmetic in total_params) must not overflow: 2^50 is far beyond any model.
  const double d = double(s.hidden), q = double(s.heads) * double(s.head_dim), kv = double(s.kv_heads) * double(s.head_dim);
  const double params = 2 * double(s.vocab_size) * d +
                        double(s.layers) * (2 * d * q + 2 * d * kv + q + 2 * kv + 3 * d * double(s.intermediate) + 2 * d) + d;
  if (!(params < 0x1p50) || q > 0x1p40)
    throw IoError(path + ": the sizes describe a model of " + strformat("%.3g", params) + " parameters (too large)");
  return s;
}

std::string hf_config_json(const ModelShape& s, const std::string& torch_dtype) {
  nlohmann::ordered_json j;
  const bool qwen3 = s.family == "qwen3";
  if (s.family == "qwen3_5") {  // the text model alone, as Qwen3_5ForCausalLM saves it
    j["architectures"] = {"Qwen3_5ForCausalLM"};
    j["attention_bias"] = s.qkv_bias;
    j["attention_dropout"] = 0.0;
    j["attn_output_gate"] = true;
    j["head_dim"] = s.head_dim;
    j["hidden_act"] = "silu";
    j["hidden_size"] = s.hidden;
    j["intermediate_size"] = s.intermediate;
    nlohmann::ordered_json types = nlohmann::ordered_json::array();
    for (int64_t i = 0; i < s.layers; ++i) types.push_back(s.is_linear(i) ? "linear_attention" : "full_attention");
    j["layer_types"] = types;
    j["linear_conv_kernel_dim"] = s.conv_kernel;
    j["linear_key_head_dim"] = s.lin_k_dim;
    j["linear_num_key_heads"] = s.lin_k_heads;
    j["linear_num_value_heads"] = s.lin_v_heads;
    j["linear_value_head_dim"] = s.lin_v_dim;
    j["max_position_embeddings"] = s.max_positions;
    j["model_type"] = "qwen3_5_text";
    j["num_attention_heads"] = s.heads;
    j["num_hidden_layers"] = s.layers;
    j["num_key_value_heads"] = s.kv_heads;
    j["rms_norm_eps"] = s.rms_eps;
    j["rope_parameters"] = {{"partial_rotary_factor", double(s.rope_dim()) / double(s.head_dim)},
                            {"rope_theta", s.rope_theta},
                            {"rope_type", "default"}};
    j["tie_word_embeddings"] = s.tie_embeddings;
    j["torch_dtype"] = torch_dtype;
    j["use_cache"] = true;
    j["vocab_size"] = s.vocab_size;
    return j.dump(2) + "\n";
  }
  j["architectures"] = {qwen3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM"};
  if (qwen3) j["attention_bias"] = s.qkv_bias;
  j["attention_dropout"] = 0.0;
  if (qwen3) j["head_dim"] = s.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = s.hidden;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = s.intermediate;
  j["max_position_embeddings"] = s.max_positions;
  j["model_type"] = s.family;
  j["num_attention_heads"] = s.heads;
  j["num_hidden_layers"] = s.layers;
  j["num_key_value_heads"] = s.kv_heads;
  j["rms_norm_eps"] = s.rms_eps;
  j["rope_scaling"] = nullptr;
  j["rope_theta"] = s.rope_theta;
  j["sliding_window"] = nullptr;
  j["tie_word_embeddings"] = s.tie_embeddings;
  j["torch_dtype"] = torch_dtype;
  j["use_cache"] = true;
  j["use_sliding_window"] = false;
  j["vocab_size"] = s.vocab_size;
  return j.dump(2) + "\n";
}

}  // namespace lorabench::model
