// The torch-free part of the adapter format: reading adapter_config.json and comparing it with a run's
// LoRA settings (adapter.cpp holds the tensors). Kept apart so that the parser can be fuzzed without
// libtorch (tests/fuzz/fuzz_adapter_config.cpp).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/lora/adapter_config.hpp"

namespace fs = std::filesystem;

namespace lorabench::lora {

AdapterConfig read_adapter_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "adapter_config.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw IoError(path + ": not valid JSON: " + e.what());
  }
  // Every key is type-checked here, so that a mistyped value is an error naming the file and the key
  // (nlohmann's own type errors name neither).
  if (!j.is_object()) throw IoError(path + ": not a JSON object");
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) throw IoError(path + ": missing key \"" + key + "\"");
    return j[key];
  };
  auto opt_string = [&](const char* key, const char* def) -> std::string {
    if (!j.contains(key) || j[key].is_null()) return def;
    if (!j[key].is_string()) throw IoError(path + ": \"" + key + "\" is not a string");
    return j[key].get<std::string>();
  };
  auto opt_bool = [&](const char* key) -> bool {
    if (!j.contains(key) || j[key].is_null()) return false;
    if (!j[key].is_boolean()) throw IoError(path + ": \"" + key + "\" is not true or false");
    return j[key].get<bool>();
  };
  if (opt_string("peft_type", "LORA") != "LORA") throw IoError(path + ": peft_type is not LORA");
  if (opt_bool("use_dora")) throw IoError(path + ": use_dora = true is not supported");
  if (opt_string("bias", "none") != "none") throw IoError(path + ": bias = " + j["bias"].dump() + " is not supported");
  for (const char* k : {"rank_pattern", "alpha_pattern"})
    if (j.contains(k) && j[k].is_object() && !j[k].empty())
      throw IoError(path + ": " + k + " is not supported (one r and alpha for every module)");
  AdapterConfig c;
  const auto& r = need("r");
  if (!r.is_number_integer()) throw IoError(path + ": \"r\" is not an integer");
  if (r.is_number_unsigned() ? (r.get<uint64_t>() < 1 || r.get<uint64_t>() > 65536)
                             : (r.get<int64_t>() < 1 || r.get<int64_t>() > 65536))
    throw IoError(path + ": \"r\" must be in [1, 65536], got " + r.dump());
  c.r = r.get<int>();
  if (!need("lora_alpha").is_number()) throw IoError(path + ": \"lora_alpha\" is not a number");
  c.alpha = need("lora_alpha").get<double>();
  if (j.contains("lora_dropout") && !j["lora_dropout"].is_null()) {
    if (!j["lora_dropout"].is_number()) throw IoError(path + ": \"lora_dropout\" is not a number");
    c.dropout = j["lora_dropout"].get<double>();
    if (!(c.dropout >= 0 && c.dropout < 1)) throw IoError(path + ": \"lora_dropout\" must be in [0, 1)");
  }
  c.rslora = opt_bool("use_rslora");
  c.base_model = j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()
                     ? j["base_model_name_or_path"].get<std::string>()
                     : "";
  const auto& tm = need("target_modules");
  std::vector<std::string> mods;
  if (tm.is_string()) {
    mods.push_back(tm.get<std::string>());
  } else if (tm.is_array()) {
    for (const auto& x : tm) {
      if (!x.is_string()) throw IoError(path + ": target_modules holds " + x.dump() + ", not a module name");
      mods.push_back(x.get<std::string>());
    }
  } else {
    throw IoError(path + ": target_modules must be a list of module names");
  }
  for (int i = 0; i < model::kNumProj; ++i) {
    for (const auto& mname : mods) {
      if (mname == model::proj_peft_name(static_cast<model::Proj>(i))) c.targets.push_back(model::proj_short_name(static_cast<model::Proj>(i)));
    }
  }
  for (const auto& mname : mods) {
    bool known = false;
    std::vector<std::string> names;
    for (int i = 0; i < model::kNumProj; ++i) {
      names.push_back(model::proj_peft_name(static_cast<model::Proj>(i)));
      known = known || mname == names.back();
    }
    if (!known) throw IoError(path + ": target module \"" + mname + "\" is not one of " + join(names, ", "));
  }
  return c;
}

model::LoraSpec lora_spec_of(const AdapterConfig& c) {
  return model::make_lora_spec(true, c.r, c.alpha, c.dropout, c.rslora, c.targets);
}

std::vector<std::string> adapter_mismatches(const AdapterConfig& a, const model::LoraSpec& run) {
  std::vector<std::string> out;
  if (a.r != run.r) out.push_back(strformat("r: adapter %d, lora.r %d", a.r, run.r));
  if (a.alpha != run.alpha) out.push_back(strformat("lora_alpha: adapter %g, lora.alpha %g", a.alpha, run.alpha));
  if (a.rslora != run.rslora)
    out.push_back(std::string("use_rslora: adapter ") + (a.rslora ? "true" : "false") + ", lora.rslora " +
                  (run.rslora ? "true" : "false"));
  std::vector<std::string> want = run.target_names();
  std::vector<std::string> have = a.targets;
  std::sort(have.begin(), have.end());
  std::sort(want.begin(), want.end());
  if (have != want)
    out.push_back("target_modules: adapter " + join(have, ",") + ", lora.targets " + join(want, ","));
  return out;
}

}  // namespace lorabench::lora
