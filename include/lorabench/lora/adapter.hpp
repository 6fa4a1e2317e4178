// LoRA adapters in PEFT's format: adapter_model.safetensors (tensor names
// "base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight" ...) and adapter_config.json, so
// `PeftModel.from_pretrained(base, dir)` loads what lorabench trained, and lorabench continues from
// what PEFT wrote. Also the merged export W' = W + scaling * B A as a Hugging Face snapshot.
#pragma once

#include <ATen/core/Tensor.h>

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

// Loads adapter tensors into trainable flats (one per unit, trainable layout of `m`), checking that the
// adapter's r, alpha, rslora and targets match `m.lora` (ConfigError listing every difference) and that
// every expected tensor is present with its shape and nothing else is (IoError naming the tensor).
void load_adapter(const std::string& dir, const model::ModelLayout& m, std::vector<at::Tensor>& trainable_flats);

// Writes dir/adapter_config.json as PEFT writes it (LORA, CAUSAL_LM, one r and alpha for every module).
void write_adapter_config(const std::string& dir, const AdapterConfig& c);

// The differences between an adapter's r, alpha, rslora and targets and a run's LoRA settings, one line
// each ("r: adapter 8, lora.r 16"); empty when it can continue training in that run.
std::vector<std::string> adapter_mismatches(const AdapterConfig& adapter, const model::LoraSpec& run);

// The base model an adapter names (base_model_name_or_path), so that PEFT finds the base: for a snapshot
// directory in the Hugging Face cache (.../models--ORG--NAME/snapshots/REV) the hub id ORG/NAME; else
// config.json's _name_or_path when it is set; else the snapshot directory's absolute path. For a random
// init of a preset (model_path empty) there is no base to find and the preset's name stands.
std::string base_model_name(const std::string& model_path, const std::string& preset);

// Writes dir/adapter_model.safetensors and dir/adapter_config.json from full trainable flats (fp32).
void save_adapter(const std::string& dir, const model::ModelLayout& m, const std::vector<at::Tensor>& trainable_flats,
                  const std::string& base_model);

// Writes a Hugging Face snapshot (config.json + model.safetensors in `dtype`) with the adapters merged.
void save_merged(const std::string& dir, const model::ModelLayout& m, const std::vector<at::Tensor>& compute_flats,
                 const std::vector<at::Tensor>& trainable_flats, at::ScalarType dtype);

}  // namespace lorabench::lora
