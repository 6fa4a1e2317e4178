// LoRA adapters in PEFT's format: adapter_model.safetensors (tensor names
// "base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight" ...) and adapter_config.json, so
// `PeftModel.from_pretrained(base, dir)` loads what lorabench trained, and lorabench continues from
// what PEFT wrote. Also the merged export W' = W + scaling * B A as a Hugging Face snapshot.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "lorabench/lora/adapter_config.hpp"
#include "lorabench/model/layout.hpp"

namespace lorabench::lora {

// Loads adapter tensors into trainable flats (one per unit, trainable layout of `m`), checking that the
// adapter's r, alpha, rslora and targets match `m.lora` (ConfigError listing every difference) and that
// every expected tensor is present with its shape and nothing else is (IoError naming the tensor).
void load_adapter(const std::string& dir, const model::ModelLayout& m, std::vector<at::Tensor>& trainable_flats);

// Writes dir/adapter_config.json as PEFT writes it (LORA, CAUSAL_LM, one r and alpha for every module).
void write_adapter_config(const std::string& dir, const AdapterConfig& c);

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
