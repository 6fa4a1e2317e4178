// One micro-step of training over the model's units: embedding, decoder layers, final norm, fused LM
// head + loss, then backward in reverse. Where each unit's weights live (replicated, sharded, gathered
// on demand) is the UnitProvider's business; this loop only says when it needs them and when a unit's
// gradients are complete, so every strategy runs the same arithmetic.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "lorabench/model/layout.hpp"
#include "lorabench/model/qwen2.hpp"

namespace lorabench::model {

enum class Pass { kForward, kBackward };

class UnitProvider {
 public:
  virtual ~UnitProvider() = default;
  // The unit's full compute buffer (model dtype), valid until release(unit, pass).
  virtual at::Tensor compute(int unit, Pass pass) = 0;
  // The unit's full trainable buffer (fp32), or undefined when it has none. Valid until release.
  virtual at::Tensor trainable(int unit, Pass pass) = 0;
  // The fp32 buffer (trainable layout) that this micro-step's gradients of `unit` accumulate into.
  virtual at::Tensor grad(int unit) = 0;
  virtual void release(int unit, Pass pass) {}
  // Backward finished `unit` for this micro-step: its gradients are complete (DDP may start a reduction).
  virtual void backward_done(int unit) {}

  // The vocabulary-sized operations. The defaults read the embedding / head through compute() and write
  // the head's gradient through grad(); a strategy that keeps those matrices sharded by vocabulary rows
  // (FSDP) overrides them to compute on its shard and exchange activations instead of weights.
  // ids (N) -> x (N, D) in the model dtype.
  virtual at::Tensor embed_lookup(const ModelLayout& m, const at::Tensor& ids);
  // Fused LM head + loss (see head_loss in qwen2.hpp; chunk = 0: head_loss_reference); accumulates the
  // head gradient with full fine-tuning.
  virtual HeadLoss lm_head_loss(const ModelLayout& m, const at::Tensor& hn, const at::Tensor& targets,
                                double grad_scale, int64_t chunk);
  // Full fine-tuning: accumulates d embedding from dx (N, D) of the lookup of ids (N).
  virtual void embed_backward(const ModelLayout& m, const at::Tensor& ids, const at::Tensor& dx);
  // Tensor parallelism: the layers' collectives over this rank's tensor-parallel group (the units are this rank's
  // part of the model), or nullptr.
  virtual const TensorParallel* tensor_parallel() const { return nullptr; }
};

struct MicroBatch {
  at::Tensor ids;      // (B, T) int64
  at::Tensor targets;  // (B, T) int64, next-token targets, -100 = no loss (shift_targets of the labels)
  double grad_scale = 1;  // d loss / d (summed token loss): 1 / (counted tokens of the global batch)
  uint64_t dropout_seed = 0;
  bool dropout = false;
};

struct StepOptions {
  bool activation_checkpointing = false;
  // Vocabulary columns per chunk of the fused LM head + loss; 0 = the unfused reference path (full
  // logits and an fp32 log-softmax, head_loss_reference) for checking the fused path's numerics.
  int64_t head_chunk = 16384;
  // Called around each unit's forward and backward (for traces): name, pass, start and end seconds.
  std::function<void(const std::string& unit, Pass pass, double t0, double t1)> on_unit;
  // Called when the forward and the backward pass begin (begin = true) and end, with the time (for
  // per-phase counters and traces).
  std::function<void(Pass pass, bool begin, double t)> on_pass;
};

struct MicroResult {
  // 0-dim tensors on the model's device (no host synchronisation inside a micro-step); loss() and
  // tokens() read them on the host.
  at::Tensor loss_sum;  // fp64: summed token losses of this micro-batch
  at::Tensor counted;   // int64: tokens with a target
  double loss() const;
  int64_t tokens() const;
};

// Runs forward and backward of one micro-batch; gradients accumulate through provider.grad().
MicroResult forward_backward(const ModelLayout& m, UnitProvider& p, const MicroBatch& mb, const StepOptions& opt);

// Forward only, for evaluation: the summed token loss and counted tokens of one micro-batch, with the same
// provider protocol as forward_backward's forward pass (FSDP gathers and frees layers as in training), no
// activations kept, no dropout, nothing accumulated into gradients.
MicroResult forward_loss(const ModelLayout& m, UnitProvider& p, const MicroBatch& mb, const StepOptions& opt);

// Forward only: fp32 logits (B, T, V), and the hidden state entering each layer and the final norm's
// input when `hidden` is given (transformers' hidden_states: L+1 tensors).
at::Tensor forward_logits(const ModelLayout& m, UnitProvider& p, const at::Tensor& ids,
                          std::vector<at::Tensor>* hidden = nullptr);

// A vocabulary-sharded embedding's part of a lookup: x[i] = rows[ids[i] - row0] where ids[i] lies in
// [row0, row0 + rows.size(0)), else 0; the parts of all the shards sum to the lookup.
at::Tensor embed_rows_lookup(const at::Tensor& rows, int64_t row0, const at::Tensor& ids);

// The embedding, final norm and LM-head matrices as views of their units' buffers (compute or gradient).
at::Tensor embedding_of(const ModelLayout& m, const at::Tensor& embed_flat);
at::Tensor final_norm_of(const ModelLayout& m, const at::Tensor& final_flat);
at::Tensor head_of(const ModelLayout& m, const at::Tensor& head_unit_flat);

}  // namespace lorabench::model
