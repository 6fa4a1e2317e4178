#include "lorabench/model/layout.hpp"

#include <cmath>
#include <cstring>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::model {

namespace {
constexpr int64_t kAlign = 16;  // elements: keeps every slot 64-byte aligned in fp32

void add_slot(std::vector<Slot>& slots, int64_t& numel, std::string name, std::vector<int64_t> shape) {
  Slot s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.numel = 1;
  for (auto d : s.shape) s.numel *= d;
  s.decay = s.shape.size() >= 2;
  s.offset = numel;
  numel += (s.numel + kAlign - 1) / kAlign * kAlign;
  slots.push_back(std::move(s));
}

// Fused groups are contiguous only when their members are packed without padding.
void add_packed(std::vector<Slot>& slots, int64_t& numel, std::string name, std::vector<int64_t> shape) {
  Slot s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.numel = 1;
  for (auto d : s.shape) s.numel *= d;
  s.decay = s.shape.size() >= 2;
  s.offset = numel;
  numel += s.numel;
  slots.push_back(std::move(s));
}

void align(int64_t& numel) { numel = (numel + kAlign - 1) / kAlign * kAlign; }

}  // namespace

const char* proj_short_name(Proj p) {
  static const char* n[] = {"q",           "k",         "v",         "o",         "gate",     "up",
                            "down",        "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"};
  return n[static_cast<int>(p)];
}

const char* proj_module_path(Proj p) {
  static const char* n[] = {"self_attn.q_proj",        "self_attn.k_proj",      "self_attn.v_proj",
                            "self_attn.o_proj",        "mlp.gate_proj",         "mlp.up_proj",
                            "mlp.down_proj",           "linear_attn.in_proj_qkv", "linear_attn.in_proj_z",
                            "linear_attn.in_proj_b",   "linear_attn.in_proj_a", "linear_attn.out_proj"};
  return n[static_cast<int>(p)];
}

const char* proj_peft_name(Proj p) {
  const char* path = proj_module_path(p);
  return std::strchr(path, '.') + 1;
}

bool layer_has_proj(const ModelShape& s, int64_t layer, Proj p) {
  if (p == Proj::kGate || p == Proj::kUp || p == Proj::kDown) return true;
  const bool linear_proj = static_cast<int>(p) >= static_cast<int>(Proj::kLinQkv);
  return linear_proj == s.is_linear(layer);
}

double LoraSpec::scaling() const { return rslora ? alpha / std::sqrt(double(r)) : alpha / double(r); }

std::vector<std::string> LoraSpec::target_names() const {
  std::vector<std::string> out;
  for (int i = 0; i < kNumProj; ++i)
    if (target[i]) out.push_back(proj_short_name(static_cast<Proj>(i)));
  return out;
}

LoraSpec make_lora_spec(bool enabled, int r, double alpha, double dropout, bool rslora,
                        const std::vector<std::string>& targets) {
  LoraSpec s;
  s.enabled = enabled;
  s.r = r;
  s.alpha = alpha;
  s.dropout = dropout;
  s.rslora = rslora;
  for (int i = 0; i < kNumProj; ++i) s.target[i] = false;
  for (const auto& t : targets) {
    bool found = false;
    for (int i = 0; i < kNumProj; ++i) {
      if (t == proj_short_name(static_cast<Proj>(i))) {
        s.target[i] = true;
        found = true;
      }
    }
    if (!found) throw ConfigError("lora.targets: unknown target \"" + t + "\"");
  }
  return s;
}

const Slot& UnitLayout::compute_slot(const std::string& n) const {
  for (const auto& s : compute)
    if (s.name == n) return s;
  throw Error("unit " + name + " has no tensor " + n);
}

const Slot* UnitLayout::find_trainable(const std::string& n) const {
  for (const auto& s : trainable)
    if (s.name == n) return &s;
  return nullptr;
}

int64_t ModelLayout::compute_params() const {
  int64_t n = 0;
  for (const auto& u : units)
    for (const auto& s : u.compute) n += s.numel;
  return n;
}

int64_t ModelLayout::trainable_params() const {
  int64_t n = 0;
  for (const auto& u : units)
    for (const auto& s : u.trainable) n += s.numel;
  return n;
}

int64_t ModelLayout::total_params() const {
  return full_finetune ? compute_params() : compute_params() + trainable_params();
}

std::string layer_tensor_name(int layer, const std::string& suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::string lora_tensor_name(int layer, Proj p, bool a) {
  return "base_model.model.model.layers." + std::to_string(layer) + "." + proj_module_path(p) +
         (a ? ".lora_A.weight" : ".lora_B.weight");
}

ModelLayout build_layout(const ModelShape& s, const LoraSpec& lora) {
  ModelLayout m;
  m.shape = s;
  m.lora = lora;
  m.full_finetune = !lora.enabled;
  const int64_t d = s.hidden, qd = s.q_dim(), kvd = s.kv_dim(), inter = s.intermediate, r = lora.r;

  UnitLayout emb;
  emb.kind = UnitKind::kEmbed;
  emb.name = "embed";
  add_slot(emb.compute, emb.compute_numel, "model.embed_tokens.weight", {s.vocab_size, d});
  m.units.push_back(emb);

  for (int i = 0; i < s.layers; ++i) {
    UnitLayout u;
    u.kind = UnitKind::kLayer;
    u.layer = i;
    u.name = "layers." + std::to_string(i);
    auto n = [&](const char* suffix) { return layer_tensor_name(i, suffix); };
    const bool linear = s.is_linear(i);
    add_slot(u.compute, u.compute_numel, n("input_layernorm.weight"), {d});
    if (linear) {  // Qwen3.5's Gated DeltaNet: the four input projections packed (one GEMM), then its own tensors
      const int64_t conv = s.lin_conv_dim(), vd = s.lin_value_dim(), hv = s.lin_v_heads;
      add_packed(u.compute, u.compute_numel, n("linear_attn.in_proj_qkv.weight"), {conv, d});
      add_packed(u.compute, u.compute_numel, n("linear_attn.in_proj_z.weight"), {vd, d});
      add_packed(u.compute, u.compute_numel, n("linear_attn.in_proj_b.weight"), {hv, d});
      add_packed(u.compute, u.compute_numel, n("linear_attn.in_proj_a.weight"), {hv, d});
      align(u.compute_numel);
      add_slot(u.compute, u.compute_numel, n("linear_attn.conv1d.weight"), {conv, 1, s.conv_kernel});
      add_slot(u.compute, u.compute_numel, n("linear_attn.dt_bias"), {hv});
      add_slot(u.compute, u.compute_numel, n("linear_attn.A_log"), {hv});
      add_slot(u.compute, u.compute_numel, n("linear_attn.norm.weight"), {s.lin_v_dim});
      add_slot(u.compute, u.compute_numel, n("linear_attn.out_proj.weight"), {d, vd});
    } else {
      // Qwen3.5's q_proj also gives each head its output gate (q_proj_dim rows).
      add_packed(u.compute, u.compute_numel, n("self_attn.q_proj.weight"), {s.q_proj_dim(), d});
      add_packed(u.compute, u.compute_numel, n("self_attn.k_proj.weight"), {kvd, d});
      add_packed(u.compute, u.compute_numel, n("self_attn.v_proj.weight"), {kvd, d});
      align(u.compute_numel);
      if (s.qkv_bias) {  // Qwen2
        add_packed(u.compute, u.compute_numel, n("self_attn.q_proj.bias"), {qd});
        add_packed(u.compute, u.compute_numel, n("self_attn.k_proj.bias"), {kvd});
        add_packed(u.compute, u.compute_numel, n("self_attn.v_proj.bias"), {kvd});
        align(u.compute_numel);
      }
      if (s.qk_norm) {  // Qwen3, Qwen3.5: one weight per head dimension, shared by the heads
        add_slot(u.compute, u.compute_numel, n("self_attn.q_norm.weight"), {s.head_dim});
        add_slot(u.compute, u.compute_numel, n("self_attn.k_norm.weight"), {s.head_dim});
        align(u.compute_numel);
      }
      add_slot(u.compute, u.compute_numel, n("self_attn.o_proj.weight"), {d, qd});
    }
    add_slot(u.compute, u.compute_numel, n("post_attention_layernorm.weight"), {d});
    add_packed(u.compute, u.compute_numel, n("mlp.gate_proj.weight"), {inter, d});
    add_packed(u.compute, u.compute_numel, n("mlp.up_proj.weight"), {inter, d});
    align(u.compute_numel);
    add_slot(u.compute, u.compute_numel, n("mlp.down_proj.weight"), {d, inter});

    if (lora.enabled) {
      // Each group of projections that read one input: their A's packed together (one GEMM on the shared
      // input), then their B's. Forward order: q|k|v (or in_proj_qkv|z|b|a), o (or out_proj), gate|up, down.
      const int64_t in_dim[kNumProj] = {d, d, d, qd, d, d, inter, d, d, d, d, s.lin_value_dim()};
      const int64_t out_dim[kNumProj] = {s.q_proj_dim(), kvd,      kvd,      d,        inter, inter, d,
                                         s.lin_conv_dim(), s.lin_value_dim(), s.lin_v_heads, s.lin_v_heads, d};
      auto group = [&](std::initializer_list<Proj> members) {
        std::vector<Proj> t;
        for (Proj p : members)
          if (lora.targets(p) && layer_has_proj(s, i, p)) t.push_back(p);
        if (t.empty()) return;
        for (Proj p : t)
          add_packed(u.trainable, u.trainable_numel, lora_tensor_name(i, p, true), {r, in_dim[static_cast<int>(p)]});
        align(u.trainable_numel);
        for (Proj p : t)
          add_slot(u.trainable, u.trainable_numel, lora_tensor_name(i, p, false), {out_dim[static_cast<int>(p)], r});
      };
      if (linear) {
        group({Proj::kLinQkv, Proj::kLinZ, Proj::kLinB, Proj::kLinA});
        group({Proj::kLinOut});
      } else {
        group({Proj::kQ, Proj::kK, Proj::kV});
        group({Proj::kO});
      }
      group({Proj::kGate, Proj::kUp});
      group({Proj::kDown});
    }
    m.units.push_back(u);
  }

  UnitLayout fin;
  fin.kind = UnitKind::kFinal;
  fin.name = "final";
  add_slot(fin.compute, fin.compute_numel, "model.norm.weight", {d});
  m.units.push_back(fin);

  if (!s.tie_embeddings) {  // its own unit, like the embedding, so strategies can shard it by vocabulary rows
    UnitLayout head;
    head.kind = UnitKind::kHead;
    head.name = "lm_head";
    add_slot(head.compute, head.compute_numel, "lm_head.weight", {s.vocab_size, d});
    m.units.push_back(head);
  }

  if (m.full_finetune) {
    for (auto& u : m.units) {
      u.trainable = u.compute;
      u.trainable_numel = u.compute_numel;
    }
  }
  return m;
}

}  // namespace lorabench::model
