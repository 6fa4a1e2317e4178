#include "lorabench/model/tensor_parallel.hpp"

#include <ATen/ATen.h>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/model/weights.hpp"

namespace lorabench::model {

namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

int64_t tp_vocab_rows(const ModelShape& full, int tp) { return (full.vocab_size + tp - 1) / tp; }

int tp_kv_replicas(const ModelShape& full, int tp) {
  if (full.kv_heads <= 0 || full.kv_heads % tp == 0 || tp % full.kv_heads != 0) return 1;  // split, or not splittable
  return static_cast<int>(tp / full.kv_heads);
}

ModelShape tp_local_shape(const ModelShape& full, int tp, const std::string& key) {
  if (tp < 1) throw ConfigError(strformat("%s: %d tensor-parallel ranks; at least 1", key.c_str(), tp));
  ModelShape s = full;
  if (tp == 1) return s;
  if (full.linear_layers() > 0)
    throw ConfigError(strformat("%s = %d: %s has linear-attention layers (Qwen3.5); tensor parallelism splits the "
                                "Qwen2 and Qwen3 decoders only (use tp = 1 with any data-parallel strategy)",
                                key.c_str(), tp, full.name.c_str()));
  if (full.heads % tp != 0)
    throw ConfigError(strformat("%s = %d: %s has %lld attention heads, which %d ranks cannot split into whole heads",
                                key.c_str(), tp, full.name.c_str(), static_cast<long long>(full.heads), tp));
  if (full.kv_heads % tp != 0 && tp % full.kv_heads != 0)
    throw ConfigError(strformat("%s = %d: %s's %lld key/value heads are neither split evenly over %d ranks nor "
                                "replicated evenly (tp must divide them or be a multiple of them)",
                                key.c_str(), tp, full.name.c_str(), static_cast<long long>(full.kv_heads), tp));
  if (full.intermediate % tp != 0)
    throw ConfigError(strformat("%s = %d: %s's MLP width %lld is not divisible by %d", key.c_str(), tp,
                                full.name.c_str(), static_cast<long long>(full.intermediate), tp));
  s.heads = full.heads / tp;
  s.kv_heads = full.kv_heads % tp == 0 ? full.kv_heads / tp : 1;
  s.intermediate = full.intermediate / tp;
  s.vocab_size = tp_vocab_rows(full, tp);
  return s;
}

TpSlice tp_slice(const ModelShape& full, int tp, int rank, const std::string& name) {
  TpSlice sl;
  if (tp == 1) return sl;  // whole, held by its one rank
  const ModelShape loc = tp_local_shape(full, tp);
  const bool lora_a = has(name, "lora_A."), lora_b = has(name, "lora_B.");
  auto rows = [&](int64_t start, int64_t length) { sl = {0, start, length}; };
  auto cols = [&](int64_t start, int64_t length) { sl = {1, start, length}; };
  if (has(name, "embed_tokens.") || has(name, "lm_head.")) {
    const int64_t per = tp_vocab_rows(full, tp), start = std::min<int64_t>(full.vocab_size, rank * per);
    rows(start, std::min<int64_t>(per, full.vocab_size - start));
  } else if (has(name, "self_attn.q_proj.") && !lora_a) {
    rows(rank * loc.q_dim(), loc.q_dim());
  } else if ((has(name, "self_attn.k_proj.") || has(name, "self_attn.v_proj.")) && !lora_a) {
    const int64_t head0 = full.kv_heads % tp == 0 ? rank * loc.kv_heads : rank / tp_kv_replicas(full, tp);
    rows(head0 * full.head_dim, loc.kv_dim());
    sl.holders = tp_kv_replicas(full, tp);
  } else if (has(name, "self_attn.o_proj.") && !lora_b) {
    cols(rank * loc.q_dim(), loc.q_dim());
  } else if ((has(name, "mlp.gate_proj.") || has(name, "mlp.up_proj.")) && !lora_a) {
    rows(rank * loc.intermediate, loc.intermediate);
  } else if (has(name, "mlp.down_proj.") && !lora_b) {
    cols(rank * loc.intermediate, loc.intermediate);
  }
  if (sl.replicated()) sl.holders = tp;
  return sl;
}

void tp_copy_unit(const ModelLayout& full, const ModelLayout& local, int tp, int rank, int unit, bool compute,
                  const at::Tensor& full_flat, const at::Tensor& local_flat, bool to_local) {
  const UnitLayout& fu = full.units[size_t(unit)];
  const UnitLayout& lu = local.units[size_t(unit)];
  const std::vector<Slot>& fs = compute ? fu.compute : fu.trainable;
  const std::vector<Slot>& ls = compute ? lu.compute : lu.trainable;
  LB_CHECK(fs.size() == ls.size(), "tp_copy_unit: the unit's layouts differ in their tensors");
  if (to_local) local_flat.zero_();
  for (size_t i = 0; i < fs.size(); ++i) {
    LB_CHECK(fs[i].name == ls[i].name, "tp_copy_unit: the unit's layouts differ in their tensors");
    const TpSlice sl = tp_slice(full.shape, tp, rank, fs[i].name);
    at::Tensor f = slot_view(full_flat, fs[i]), l = slot_view(local_flat, ls[i]);
    if (!sl.replicated()) {
      f = f.narrow(sl.dim, sl.start, sl.length);
      l = l.narrow(sl.dim, 0, sl.length);
    }
    LB_CHECK(f.sizes() == l.sizes(), "tp_copy_unit: " + fs[i].name + ": the slice does not fit the rank's tensor");
    if (to_local) l.copy_(f);
    else f.copy_(l);
  }
}

}  // namespace lorabench::model
