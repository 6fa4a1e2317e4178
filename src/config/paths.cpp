#include "lorabench/config/paths.hpp"

#include <filesystem>
#include <system_error>

namespace fs = std::filesystem;

namespace lorabench {

std::string resolve_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(path), ec);
  if (ec) p = fs::path(path);
  return p.lexically_normal().string();
}

std::string describe_path(const std::string& key, const std::string& value) {
  std::string s = key + " = " + value;
  if (!value.empty() && fs::path(value).is_relative())
    s += " (resolved against the working directory: " + resolve_path(value) + ")";
  return s;
}

std::string default_run_name(const std::string& input_path, const std::string& strategy, int world_size) {
  std::string stem = fs::path(input_path).stem().string();
  if (stem.empty()) stem = "run";
  std::string name = stem;
  if (!strategy.empty() && stem != strategy) name += "-" + strategy;
  return name + "-n" + std::to_string(world_size);
}

namespace {

std::string numbered(const std::string& base, int k) { return k == 1 ? base : base + "-" + std::to_string(k); }

bool taken(const std::string& output_dir, const std::string& name) {
  std::error_code ec;
  return fs::exists(fs::path(output_dir) / name, ec);
}

}  // namespace

std::string first_free_run_name(const std::string& output_dir, const std::string& base) {
  int k = 1;
  while (taken(output_dir, numbered(base, k))) ++k;
  return numbered(base, k);
}

std::string latest_run_name(const std::string& output_dir, const std::string& base) {
  int k = 1;
  while (taken(output_dir, numbered(base, k + 1))) ++k;
  return numbered(base, k);
}

std::vector<std::string> input_path_problems(const RunConfig& cfg) {
  std::vector<std::string> problems;
  auto check = [&](const std::string& key, const std::string& value, bool want_dir) {
    if (value.empty()) return;
    std::error_code ec;
    const fs::file_status st = fs::status(value, ec);
    std::string what;
    if (!fs::exists(st))
      what = "does not exist";
    else if (want_dir && !fs::is_directory(st))
      what = "is not a directory";
    else if (!want_dir && fs::is_directory(st))
      what = "is a directory, not a file";
    if (!what.empty()) problems.push_back(describe_path(key, value) + ": " + what);
  };
  if (cfg.data.format != "synthetic") check("data.path", cfg.data.path, false);
  if (cfg.data.format != "synthetic") check("data.eval_path", cfg.data.eval_path, false);
  check("data.tokenizer", cfg.data.tokenizer, false);
  check("lora.init_from", cfg.lora.init_from, true);
  if (!cfg.lora.init_from.empty() && fs::is_directory(cfg.lora.init_from) &&
      !fs::exists(fs::path(cfg.lora.init_from) / "adapter_config.json"))
    problems.push_back(describe_path("lora.init_from", cfg.lora.init_from) +
                       ": has no adapter_config.json (expected a PEFT adapter directory)");
  const size_t before = problems.size();
  check("model.path", cfg.model.path, true);
  if (!cfg.model.path.empty() && problems.size() == before && !fs::exists(fs::path(cfg.model.path) / "config.json"))
    problems.push_back(describe_path("model.path", cfg.model.path) +
                       ": has no config.json (expected a Hugging Face snapshot directory)");
  return problems;
}

}  // namespace lorabench
