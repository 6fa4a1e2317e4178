// Initial values of a unit's buffers: random (Hugging Face's init for Qwen2, PEFT's for LoRA), or a
// Hugging Face snapshot on disk, or a PEFT adapter. Deterministic per tensor name, so every rank and
// every strategy starts from the same numbers.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lorabench/io/safetensors.hpp"
#include "lorabench/model/layout.hpp"

namespace lorabench::model {

// The slot's tensor as a view of its unit's flat buffer (shape s.shape).
at::Tensor slot_view(const at::Tensor& flat, const Slot& s);

// Random init of unit `u`: weights ~ N(0, 0.02) and embedding too (transformers' initializer_range),
// biases 0, norm weights 1; LoRA A ~ kaiming-uniform(a = sqrt 5) = U(-1/sqrt(in), 1/sqrt(in)), B = 0
// (PEFT). Values are drawn in fp32 from a generator keyed by (seed, tensor name) and rounded to the
// compute dtype. With full fine-tuning `trainable` (the fp32 master) gets the fp32 values.
void init_unit(const ModelLayout& m, int u, const at::Tensor& compute, const at::Tensor& trainable, uint64_t seed);

// Only the trainable (LoRA) part of init_unit.
void init_lora(const ModelLayout& m, int u, const at::Tensor& trainable, uint64_t seed);

// A Hugging Face snapshot directory: config.json + model.safetensors, or sharded
// model-0000i-of-0000n.safetensors + model.safetensors.index.json. Files are memory-mapped.
// Tensors are named as the text model's (Qwen2/Qwen3ForCausalLM, Qwen3_5ForCausalLM: "model.layers.0...."). A
// Qwen3.5 snapshot of the multimodal model (Qwen3_5ForConditionalGeneration) names its text model's tensors
// "model.language_model.*" and holds a vision tower ("model.visual.*") and a multi-token-prediction head ("mtp.*"):
// its text tensors are read under the text model's names and the other two are not part of it.
class Snapshot {
 public:
  explicit Snapshot(const std::string& dir);
  const std::string& dir() const { return dir_; }
  // The file that holds `name` (IoError naming the snapshot and the tensor when none does), and the name the tensor
  // has in it.
  const io::SafeTensorsFile& file_of(const std::string& name) const;
  const std::string& name_on_disk(const std::string& name) const;
  // Every text-model tensor name the snapshot holds, and how many tensors of the parts the text model does not
  // use (vision tower, multi-token prediction) it skipped.
  std::vector<std::string> names() const;
  int64_t skipped() const { return skipped_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<io::SafeTensorsFile>> files_;
  std::map<std::string, std::pair<size_t, std::string>> where_;  // text-model name -> (file, name on disk)
  int64_t skipped_ = 0;
};

// Copies unit u's tensors from the snapshot into `compute` (converted from bf16/fp16/fp32 on disk to
// the buffer's dtype), checking every expected tensor's presence and shape. With full fine-tuning the
// fp32 master `trainable` is filled too.
void load_unit(const Snapshot& snap, const ModelLayout& m, int u, const at::Tensor& compute,
               const at::Tensor& trainable);

// Elements [offset, offset + piece.numel()) of unit u's flat compute buffer as load_unit fills it (zeros where no
// tensor lies, past the unit's end too), read straight from the snapshot into `piece` (any dtype or device): only
// that range of each tensor is converted and only its pages are touched (then released), so a rank that keeps
// one piece of a unit (fsdp) never holds the whole unit or a converted copy of its largest tensor. Every tensor of
// the unit is checked for presence and shape, as load_unit does.
void load_unit_range(const Snapshot& snap, const ModelLayout& m, int u, const at::Tensor& piece, int64_t offset);

// Checks that the snapshot holds nothing the layout does not expect (an lm_head.weight in a tied model,
// extra layers): IoError listing the unexpected names.
void check_snapshot_complete(const Snapshot& snap, const ModelLayout& m);

// A tensor of the safetensors file as an at::Tensor (a copy in `dtype`).
at::Tensor read_tensor(const io::SafeTensorsFile& f, const io::SafeTensorInfo& t, at::ScalarType dtype);

// Safetensors dtype name of an ATen dtype ("F32", "BF16", "F16", "I64").
std::string safetensors_dtype(at::ScalarType t);

}  // namespace lorabench::model
