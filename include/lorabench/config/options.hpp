// The option table: every input key with its type, default and meaning. It drives parsing (ini file
// and --set), validation messages, the effective-config table, --help and docs/input-reference.md.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lorabench/config/run_config.hpp"

namespace lorabench {

struct OptionSpec {
  std::string key;            // "train.lr": [train] lr in the ini file, --set train.lr=... on the command line
  std::string type;           // "int", "float", "bool", "string", "a|b|c" (one of), "list", ...
  std::string default_value;  // as it would be written in the ini file
  std::string help;           // one line
  // Converts and range-checks `value`; throws std::invalid_argument with a message for the user.
  std::function<void(RunConfig&, const std::string& value)> set;
  std::function<std::string(const RunConfig&)> get;
};

const std::vector<OptionSpec>& option_table();
const OptionSpec* find_option(const std::string& key);

// A RunConfig holding every default of the table.
RunConfig default_run_config();

// Parses the ini text of `path` (already read; `path` is used in messages) and the `--set key=value`
// overrides, which win over the file. Every problem (syntax, unknown key, duplicate key, bad value) is
// collected into one ConfigError whose lines read "file:line: key: message".
RunConfig parse_run_config(const std::string& path, const std::string& text,
                           const std::vector<std::string>& overrides);

// A key given by more than one `--set`: the last one wins, as later options do (layered wrappers and scripts
// rely on it); one line per such key for a warning, naming every value in order ("--set train.lr=1e-3, then
// --set train.lr=3e-4: the last one is used"). Empty when no key repeats.
std::vector<std::string> repeated_overrides(const std::vector<std::string>& overrides);

// What the validation needs to know beyond the config itself.
struct ValidationContext {
  int world_size = 1;
  bool nccl_built = false;   // this binary has the NCCL backend
  bool cuda_available = false;  // this process sees a CUDA device
  bool cuda_built = false;      // this binary has the CUDA path
  bool cpu_blocked_attention = true;  // this CPU runs model.cpu_attention = blocked
};

// Cross-field and world-size checks (e.g. strategy single on several ranks). Throws one ConfigError
// listing every problem, each naming its key and where the key was set.
void validate_run_config(const RunConfig& cfg, const ValidationContext& ctx);

// Problems with keys of a parsed configuration, each named with where the key was set (file:line, --set,
// or "<input> (default)"), thrown together as one ConfigError: validate_run_config's checks and the checks
// that need more than the configuration (the model's shape: train::check_config_fits_model).
class ConfigProblems {
 public:
  struct Problem {
    std::string where, key, message;
  };
  explicit ConfigProblems(const RunConfig& c) : c_(c) {}
  void add(const std::string& key, const std::string& message);
  void throw_if_any() const;  // "configuration error(s):" and one "where: key: message" line each

 private:
  const RunConfig& c_;
  std::vector<Problem> problems_;
};

// The effective configuration, one "key value (origin)" row per key, for the start of a run.
std::string effective_config_table(const RunConfig& cfg);
// key -> resolved value, in table order (written to /config of the run file).
std::vector<std::pair<std::string, std::string>> resolved_values(const RunConfig& cfg);

// `lorabench --help` options section and the Markdown table of docs/input-reference.md.
std::string options_help();
std::string options_markdown();

}  // namespace lorabench
