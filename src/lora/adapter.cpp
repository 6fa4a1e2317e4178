#include "lorabench/lora/adapter.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/io/safetensors.hpp"
#include "lorabench/model/weights.hpp"

namespace fs = std::filesystem;

namespace lorabench::lora {

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out) throw IoError(path + ": write failed");
}

}  // namespace

void load_adapter(const std::string& dir, const model::ModelLayout& m, std::vector<at::Tensor>& flats) {
  AdapterConfig c = read_adapter_config(dir);
  std::vector<std::string> diffs;
  if (!m.lora.enabled) diffs.push_back("lora.enabled is false but an adapter was given");
  for (auto& d : adapter_mismatches(c, m.lora)) diffs.push_back(std::move(d));
  if (!diffs.empty()) throw ConfigError(dir + ": adapter does not match the configuration:\n  " + join(diffs, "\n  "));

  io::SafeTensorsFile f((fs::path(dir) / "adapter_model.safetensors").string());
  std::set<std::string> expected;
  for (size_t u = 0; u < m.units.size(); ++u) {
    for (const auto& s : m.units[u].trainable) {
      expected.insert(s.name);
      const io::SafeTensorInfo& t = f.require(s.name, s.shape);
      model::slot_view(flats[u], s).copy_(model::read_tensor(f, t, at::kFloat));
    }
  }
  for (const auto& t : f.tensors())
    if (!expected.count(t.name)) throw IoError(f.path() + ": unexpected tensor " + t.name);
}

void save_adapter(const std::string& dir, const model::ModelLayout& m, const std::vector<at::Tensor>& flats,
                  const std::string& base_model) {
  LB_CHECK(m.lora.enabled, "save_adapter needs LoRA");
  fs::create_directories(dir);
  std::vector<at::Tensor> keep;
  std::vector<io::TensorToWrite> tensors;
  for (size_t u = 0; u < m.units.size(); ++u) {
    for (const auto& s : m.units[u].trainable) {
      at::Tensor t = model::slot_view(flats[u], s).to(at::kFloat).contiguous();
      keep.push_back(t);
      tensors.push_back({s.name, "F32", s.shape, t.data_ptr()});
    }
  }
  io::write_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
  AdapterConfig c;
  c.r = m.lora.r;
  c.alpha = m.lora.alpha;
  c.dropout = m.lora.dropout;
  c.rslora = m.lora.rslora;
  c.base_model = base_model;
  c.targets = m.lora.target_names();
  write_adapter_config(dir, c);
}

void write_adapter_config(const std::string& dir, const AdapterConfig& c) {
  nlohmann::ordered_json j;
  j["alpha_pattern"] = nlohmann::json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = c.base_model;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["lora_alpha"] = c.alpha;
  j["lora_dropout"] = c.dropout;
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = c.r;
  j["rank_pattern"] = nlohmann::json::object();
  j["revision"] = nullptr;
  std::vector<std::string> mods;
  for (int i = 0; i < model::kNumProj; ++i) {
    const std::string shortname = model::proj_short_name(static_cast<model::Proj>(i));
    if (std::find(c.targets.begin(), c.targets.end(), shortname) != c.targets.end()) mods.push_back(model::proj_peft_name(static_cast<model::Proj>(i)));
  }
  j["target_modules"] = mods;
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = false;
  j["use_rslora"] = c.rslora;
  write_text((fs::path(dir) / "adapter_config.json").string(), j.dump(2) + "\n");
}

std::string base_model_name(const std::string& model_path, const std::string& preset) {
  if (model_path.empty()) return preset;
  const fs::path dir = fs::absolute(fs::path(model_path)).lexically_normal();
  fs::path p = dir;
  if (p.filename().empty()) p = p.parent_path();
  // .../models--ORG--NAME/snapshots/REV
  if (p.has_parent_path() && p.parent_path().filename() == "snapshots") {
    const std::string repo = p.parent_path().parent_path().filename().string();
    if (starts_with(repo, "models--")) {
      std::string id = repo.substr(8);
      const size_t sep = id.find("--");
      if (sep != std::string::npos) return id.substr(0, sep) + "/" + id.substr(sep + 2);
      return id;
    }
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file((p / "config.json").string()));
    if (j.contains("_name_or_path") && j["_name_or_path"].is_string() && !j["_name_or_path"].get<std::string>().empty())
      return j["_name_or_path"].get<std::string>();
  } catch (const std::exception&) {
    // unreadable here: the path stands (the training reads config.json itself and reports it)
  }
  return p.string();
}

void save_merged(const std::string& dir, const model::ModelLayout& m, const std::vector<at::Tensor>& compute,
                 const std::vector<at::Tensor>& trainable, at::ScalarType dtype) {
  fs::create_directories(dir);
  const double s = m.lora.scaling();
  std::vector<at::Tensor> keep;
  std::vector<io::TensorToWrite> tensors;
  const std::string st_dtype = model::safetensors_dtype(dtype);
  for (size_t u = 0; u < m.units.size(); ++u) {
    const model::UnitLayout& unit = m.units[u];
    for (const auto& slot : unit.compute) {
      at::Tensor w = model::slot_view(compute[u], slot).to(at::kFloat);
      if (m.lora.enabled && unit.kind == model::UnitKind::kLayer) {
        for (int i = 0; i < model::kNumProj; ++i) {
          auto p = static_cast<model::Proj>(i);
          if (!m.lora.targets(p) || !model::layer_has_proj(m.shape, unit.layer, p)) continue;
          if (slot.name != model::layer_tensor_name(unit.layer, std::string(model::proj_module_path(p)) + ".weight"))
            continue;
          at::Tensor a = model::slot_view(trainable[u], *unit.find_trainable(model::lora_tensor_name(unit.layer, p, true)));
          at::Tensor b = model::slot_view(trainable[u], *unit.find_trainable(model::lora_tensor_name(unit.layer, p, false)));
          w = w + at::mm(b, a) * s;
        }
      }
      at::Tensor out = w.to(dtype).contiguous();
      keep.push_back(out);
      tensors.push_back({slot.name, st_dtype, slot.shape, out.data_ptr()});
    }
  }
  io::write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_text((fs::path(dir) / "config.json").string(),
             model::hf_config_json(m.shape, dtype == at::kBFloat16 ? "bfloat16" : "float32"));
}

}  // namespace lorabench::lora
