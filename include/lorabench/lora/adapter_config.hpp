// adapter_config.json of a PEFT LoRA adapter: reading and checking it against a run. Torch-free (the
// tensors are in adapter.hpp), so that the parser is fuzzed without libtorch.
#pragma once

#include <string>
#include <vector>

#include "lorabench/model/layout.hpp"

namespace lorabench::lora {

struct AdapterConfig {
  int r = 0;
  double alpha = 0;
  double dropout = 0;
  bool rslora = false;
  std::vector<std::string> targets;  // lorabench names: q, k, v, o, gate, up, down
  std::string base_model;            // base_model_name_or_path
};

// Reads and checks adapter_config.json (peft_type LORA, no DoRA, no bias, no per-module rank/alpha
// patterns). IoError naming the file and the key.
AdapterConfig read_adapter_config(const std::string& dir);

// The LoraSpec an adapter describes (for `lorabench forward --adapter`).
model::LoraSpec lora_spec_of(const AdapterConfig& c);

// The differences between an adapter's r, alpha, rslora and targets and a run's LoRA settings, one line
// each ("r: adapter 8, lora.r 16"); empty when it can continue training in that run.
std::vector<std::string> adapter_mismatches(const AdapterConfig& adapter, const model::LoraSpec& run);

}  // namespace lorabench::lora
