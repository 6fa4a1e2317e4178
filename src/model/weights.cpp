#include "lorabench/model/weights.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "lorabench/core/error.hpp"
#include "lorabench/core/hash.hpp"
#include "lorabench/core/strings.hpp"

namespace fs = std::filesystem;

namespace lorabench::model {

at::Tensor slot_view(const at::Tensor& flat, const Slot& s) { return flat.narrow(0, s.offset, s.numel).view(s.shape); }

namespace {

uint64_t name_seed(uint64_t seed, const std::string& name) {
  Fnv1a h;  // FNV-1a of the name, mixed with the seed
  h.add(name);
  return fmix64(h.h ^ (seed * kGoldenGamma));
}

bool is_norm(const std::string& name) { return ends_with(name, "layernorm.weight") || ends_with(name, "norm.weight"); }
bool is_bias(const std::string& name) { return ends_with(name, ".bias"); }

at::Tensor random_value(const Slot& s, uint64_t seed, bool zero_centred_norms) {
  at::Tensor v = at::empty(s.shape, at::kFloat);
  // Qwen3.5's norms scale by (1 + w) and start at 0, but for the linear layers' gated norm (w); its linear layers
  // start with dt_bias 1 and A = exp(A_log) uniform in [0.01, 16] (transformers' initialisation, a fixed seed).
  if (zero_centred_norms && is_norm(s.name) && !ends_with(s.name, "linear_attn.norm.weight")) return v.zero_();
  if (is_norm(s.name)) return v.fill_(1.0);
  if (ends_with(s.name, "linear_attn.dt_bias")) return v.fill_(1.0);
  if (ends_with(s.name, "linear_attn.A_log")) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(name_seed(seed, s.name));
    return v.uniform_(0.01, 16.0, gen).log_();
  }
  if (is_bias(s.name)) return v.zero_();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(name_seed(seed, s.name));
  return v.normal_(0.0, 0.02, gen);
}

at::ScalarType from_safetensors(const std::string& dt, const std::string& file, const std::string& name) {
  if (dt == "F32") return at::kFloat;
  if (dt == "BF16") return at::kBFloat16;
  if (dt == "F16") return at::kHalf;
  if (dt == "F64") return at::kDouble;
  if (dt == "I64") return at::kLong;
  if (dt == "I32") return at::kInt;
  throw IoError(file + ": tensor " + name + " has dtype " + dt + ", expected F32, BF16 or F16");
}

}  // namespace

std::string safetensors_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kBFloat16: return "BF16";
    case at::kHalf: return "F16";
    case at::kDouble: return "F64";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    default: throw Error(std::string("no safetensors name for dtype ") + c10::toString(t));
  }
}

void init_lora(const ModelLayout& m, int u, const at::Tensor& trainable, uint64_t seed) {
  if (!m.lora.enabled) return;
  for (const Slot& s : m.units[u].trainable) {
    at::Tensor v = slot_view(trainable, s);
    if (ends_with(s.name, "lora_B.weight")) {
      v.zero_();
    } else {
      const double bound = 1.0 / std::sqrt(double(s.shape[1]));  // kaiming_uniform(a=sqrt(5)), fan_in = in
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(name_seed(seed, s.name));
      // Drawn on the CPU on every device (the same values as a CPU run of the seed), then copied.
      if (v.is_cpu()) v.uniform_(-bound, bound, gen);
      else v.copy_(at::empty(s.shape, at::kFloat).uniform_(-bound, bound, gen));
    }
  }
}

void init_unit(const ModelLayout& m, int u, const at::Tensor& compute, const at::Tensor& trainable, uint64_t seed) {
  const UnitLayout& unit = m.units[u];
  compute.zero_();  // alignment padding stays zero
  for (const Slot& s : unit.compute) {
    at::Tensor v = random_value(s, seed, m.shape.zero_centred_norm);
    slot_view(compute, s).copy_(v);
    if (m.full_finetune && trainable.defined() && !trainable.is_same(compute)) slot_view(trainable, s).copy_(v);
  }
  if (!m.full_finetune && trainable.defined()) {
    trainable.zero_();
    init_lora(m, u, trainable, seed);
  }
}

Snapshot::Snapshot(const std::string& dir) : dir_(dir) {
  if (!fs::is_directory(dir)) throw IoError(dir + ": model.path is not a directory");
  const std::string single = (fs::path(dir) / "model.safetensors").string();
  const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
  std::vector<std::string> files;
  if (fs::exists(index)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(index));
    } catch (const nlohmann::json::exception& e) {
      throw IoError(index + ": not valid JSON: " + e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw IoError(index + ": no \"weight_map\" object");
    std::set<std::string> seen;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) throw IoError(index + ": weight_map entry " + it.key() + " is not a file name");
      std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos) throw IoError(index + ": shard name " + f + " must be a plain file name");
      if (seen.insert(f).second) files.push_back(f);
    }
  } else if (fs::exists(single)) {
    files.push_back("model.safetensors");
  } else {
    throw IoError(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  const std::string multimodal = "model.language_model.";
  for (const auto& f : files) {
    files_.push_back(std::make_unique<io::SafeTensorsFile>((fs::path(dir) / f).string()));
    for (const auto& t : files_.back()->tensors()) {
      std::string name = t.name;
      if (starts_with(name, "model.visual.") || starts_with(name, "mtp.")) {
        ++skipped_;
        continue;
      }
      if (starts_with(name, multimodal)) name = "model." + name.substr(multimodal.size());
      if (where_.count(name))
        throw IoError(dir + ": tensor " + name + " appears twice (" + files_[where_[name].first]->path() + " as " +
                      where_[name].second + ", " + files_.back()->path() + " as " + t.name + ")");
      where_[name] = {files_.size() - 1, t.name};
    }
  }
}

const io::SafeTensorsFile& Snapshot::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw IoError(dir_ + ": missing tensor " + name);
  return *files_[it->second.first];
}

const std::string& Snapshot::name_on_disk(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw IoError(dir_ + ": missing tensor " + name);
  return it->second.second;
}

std::vector<std::string> Snapshot::names() const {
  std::vector<std::string> out;
  for (const auto& [n, i] : where_) out.push_back(n);
  return out;
}

at::Tensor read_tensor(const io::SafeTensorsFile& f, const io::SafeTensorInfo& t, at::ScalarType dtype) {
  at::ScalarType src = from_safetensors(t.dtype, f.path(), t.name);
  // from_blob over the memory map (read-only; the clone/convert copies before anything writes).
  at::Tensor view = at::from_blob(const_cast<void*>(f.data(t)), t.shape, at::TensorOptions().dtype(src));
  at::Tensor out = view.to(dtype, /*non_blocking=*/false, /*copy=*/true);
  f.release(t);  // the copy is all that is kept: the mapped bytes leave the resident set
  return out;
}

void load_unit(const Snapshot& snap, const ModelLayout& m, int u, const at::Tensor& compute,
               const at::Tensor& trainable) {
  const UnitLayout& unit = m.units[u];
  compute.zero_();
  for (const Slot& s : unit.compute) {
    const io::SafeTensorsFile& f = snap.file_of(s.name);
    const io::SafeTensorInfo& t = f.require(snap.name_on_disk(s.name), s.shape);
    if (m.full_finetune && trainable.defined() && !trainable.is_same(compute)) {
      at::Tensor v = read_tensor(f, t, at::kFloat);
      slot_view(trainable, s).copy_(v);
      slot_view(compute, s).copy_(v);
    } else {
      slot_view(compute, s).copy_(read_tensor(f, t, compute.scalar_type()));
    }
  }
}

void load_unit_range(const Snapshot& snap, const ModelLayout& m, int u, const at::Tensor& piece, int64_t offset) {
  const UnitLayout& unit = m.units[u];
  LB_CHECK(piece.dim() == 1 && offset >= 0, "load_unit_range: a flat piece at a non-negative offset");
  piece.zero_();
  const int64_t end = offset + piece.numel();
  for (const Slot& s : unit.compute) {
    const io::SafeTensorsFile& f = snap.file_of(s.name);
    const io::SafeTensorInfo& t = f.require(snap.name_on_disk(s.name), s.shape);
    const int64_t lo = std::max(offset, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;
    const at::ScalarType src = from_safetensors(t.dtype, f.path(), t.name);
    const at::Tensor flat = at::from_blob(const_cast<void*>(f.data(t)), {s.numel}, at::TensorOptions().dtype(src));
    piece.narrow(0, lo - offset, hi - lo).copy_(flat.narrow(0, lo - s.offset, hi - lo));
    f.release(t);
  }
}

void check_snapshot_complete(const Snapshot& snap, const ModelLayout& m) {
  std::set<std::string> expected;
  for (const auto& u : m.units)
    for (const auto& s : u.compute) expected.insert(s.name);
  std::vector<std::string> extra;
  for (const auto& n : snap.names()) {
    // transformers may save rotary buffers in old checkpoints; they carry no parameters.
    if (ends_with(n, "rotary_emb.inv_freq")) continue;
    if (!expected.count(n)) extra.push_back(n);
  }
  if (!extra.empty()) {
    if (extra.size() > 5) extra.resize(5), extra.push_back("...");
    throw IoError(snap.dir() + ": tensors the configuration does not expect: " + join(extra, ", ") +
                  " (does config.json match the weights?)");
  }
}

}  // namespace lorabench::model
