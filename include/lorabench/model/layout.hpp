// How the model's tensors are laid out in flat buffers, unit by unit. Torch-free.
//
// A unit is what a strategy gathers, frees and synchronises as one piece: the embedding, each decoder
// layer, the final norm, and the LM head when it is not tied to the embedding. Each unit has two flat buffers:
//   compute   - every weight the forward pass reads, in the model dtype, under its Hugging Face name;
//   trainable - what the optimizer updates, in fp32: the LoRA A/B matrices (PEFT names), or with full
//               fine-tuning the unit's weights themselves (the fp32 master copy).
// Slots are placed in forward order so that q/k/v (and gate/up, and the LoRA A of q/k/v) sit next to
// each other: their concatenation is one contiguous matrix and one GEMM.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lorabench/model/shape.hpp"

namespace lorabench::model {

// The linear projections LoRA can adapt: the attention's and the MLP's, and Qwen3.5's linear-attention layers'
// (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj). A layer has the MLP's and those of its kind.
enum class Proj : int { kQ = 0, kK, kV, kO, kGate, kUp, kDown, kLinQkv, kLinZ, kLinB, kLinA, kLinOut };
constexpr int kNumProj = 12;
const char* proj_short_name(Proj p);   // "q", "k", ..., "in_proj_qkv", ..., as in lora.targets
const char* proj_module_path(Proj p);  // "self_attn.q_proj", "mlp.down_proj", "linear_attn.out_proj", ...
const char* proj_peft_name(Proj p);    // the module's own name, as PEFT's target_modules has it: "q_proj", ...
// Whether decoder layer `layer` of this shape has projection p.
bool layer_has_proj(const ModelShape& s, int64_t layer, Proj p);

struct LoraSpec {
  bool enabled = true;
  int r = 16;
  double alpha = 32;
  double dropout = 0;
  bool rslora = false;
  // Default: the seven projections of Qwen2/Qwen3 (lora.targets' default); Qwen3.5's linear-attention
  // projections when asked for by name.
  bool target[kNumProj] = {true, true, true, true, true, true, true, false, false, false, false, false};
  double scaling() const;  // alpha / r, or alpha / sqrt(r) with rslora
  bool targets(Proj p) const { return enabled && target[static_cast<int>(p)]; }
  std::vector<std::string> target_names() const;
};
// From lora.targets names ("q", "gate", ...).
LoraSpec make_lora_spec(bool enabled, int r, double alpha, double dropout, bool rslora,
                        const std::vector<std::string>& targets);

struct Slot {
  std::string name;            // Hugging Face / PEFT tensor name
  std::vector<int64_t> shape;
  int64_t offset = 0;          // elements from the start of the flat buffer
  int64_t numel = 0;
  bool decay = false;          // AdamW weight decay applies (matrices; never biases or norms)
};

enum class UnitKind { kEmbed, kLayer, kFinal, kHead };

struct UnitLayout {
  UnitKind kind = UnitKind::kLayer;
  int layer = -1;              // decoder layer index for kLayer
  std::string name;            // "embed", "layers.3", "final"
  std::vector<Slot> compute;
  int64_t compute_numel = 0;
  std::vector<Slot> trainable;
  int64_t trainable_numel = 0;

  const Slot& compute_slot(const std::string& name) const;    // throws when absent
  const Slot* find_trainable(const std::string& name) const;  // nullptr when absent
};

// Which kernels a model runs (model.fused_kernels, model.cuda_attention, model.cpu_attention). They travel
// with the model's layout, so two models in one process may run different kernels (no process-wide switch).
// The attention kernel of CUDA tensors: kAuto = FlashAttention-2 for bf16, the memory-efficient kernel for
// fp32 (which FlashAttention has no kernel for); kFlash asks for FlashAttention-2 (bf16 only); kEfficient
// for the memory-efficient kernel in either dtype.
enum class CudaAttention { kAuto, kFlash, kEfficient };
// The attention kernel of CPU tensors: kAuto = lorabench's blocked kernel for bf16 where the CPU has
// brgemm's bf16 route (AVX-512 BF16), libtorch's CPU flash kernel otherwise and for fp32; kFlash asks for
// libtorch's; kBlocked for lorabench's (bf16 only, and only where cpu_blocked_attention_available()).
enum class CpuAttention { kAuto, kFlash, kBlocked };
struct KernelOptions {
  // The elementwise parts of the layer and the head (RMSNorm, RoPE, SwiGLU, the online softmax):
  // lorabench's fused kernels (CPU kernels on CPU tensors, CUDA kernels on CUDA tensors in CUDA builds),
  // or with false the device-generic ATen compositions on either.
  bool fused = true;
  CudaAttention cuda_attention = CudaAttention::kAuto;
  CpuAttention cpu_attention = CpuAttention::kAuto;
};

struct ModelLayout {
  ModelShape shape;
  LoraSpec lora;
  bool full_finetune = false;
  KernelOptions kernels;           // default: the fused kernels, automatic attention
  std::vector<UnitLayout> units;   // embed, layers.0 .. layers.L-1, final[, lm_head]
  int final_unit() const { return static_cast<int>(shape.layers) + 1; }
  // The unit whose matrix is the LM head: the embedding (0) when tied, else lm_head (the last).
  int head_unit() const { return shape.tie_embeddings ? 0 : static_cast<int>(shape.layers) + 2; }

  int64_t total_params() const;      // compute + LoRA (a full fine-tune's master copy is not counted twice)
  int64_t trainable_params() const;
  int64_t compute_params() const;
};

ModelLayout build_layout(const ModelShape& shape, const LoraSpec& lora);

// Hugging Face names of decoder layer i: "model.layers.<i>.<suffix>".
std::string layer_tensor_name(int layer, const std::string& suffix);
// PEFT name of a LoRA matrix: "base_model.model.model.layers.<i>.<module>.lora_<A|B>.weight".
// (Only for a projection the layer has.)
std::string lora_tensor_name(int layer, Proj p, bool a);

}  // namespace lorabench::model
