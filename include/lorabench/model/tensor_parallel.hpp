// Tensor parallelism (Megatron style) over `tp` ranks: which part of every tensor a rank holds.
//
// Inside a decoder layer the column-parallel projections (q, k, v and gate, up) are split by output rows, whole
// heads at a time (key/value heads replicated when there are fewer of them than ranks: tp / K ranks share one), and
// the row-parallel ones (o, down) by input columns, so a rank computes its heads and its slice of the MLP on the
// full hidden state and one all-reduce per block and direction makes the residual stream whole again. The
// embedding and the LM head are split by vocabulary rows (ceil(V / tp) per rank, the last one padded). Norms are
// replicated. LoRA follows its base weight: B of a column-parallel projection by rows, A of a row-parallel one by
// columns; the other matrix of each pair is replicated.
//
// A rank's part of the model is a model of its own shape (tp_local_shape: H/tp heads, max(K/tp, 1) key/value
// heads, I/tp intermediate, ceil(V/tp) vocabulary rows) whose layout the layer code runs unchanged; tp_slice says
// where each of its tensors lies in the full one.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "lorabench/model/layout.hpp"

namespace lorabench::model {

// Vocabulary rows per rank: ceil(V / tp).
int64_t tp_vocab_rows(const ModelShape& full, int tp);
// How many ranks hold each key/value head: 1 when tp divides K, else tp / K.
int tp_kv_replicas(const ModelShape& full, int tp);

// The shape of one rank's part. Throws ConfigError naming `key` when the model cannot be split into tp parts of
// whole heads: H not divisible by tp, K neither divisible by tp nor dividing it, I not divisible by tp, or a model
// with linear-attention layers (Qwen3.5: not split by this code).
ModelShape tp_local_shape(const ModelShape& full, int tp, const std::string& key = "parallel.tp");

// Where a tensor of rank `rank`'s part lies in the full tensor of the same name: along `dim` (0 rows, 1 columns),
// `length` elements from `start` (the local tensor's first `length` along that dim; vocabulary rows past V are
// padding). dim = -1: the rank holds the whole tensor (replicated). holders: how many ranks hold the same elements
// (tp for a replicated tensor, tp / K for a replicated key/value head's rows, else 1).
struct TpSlice {
  int dim = -1;
  int64_t start = 0, length = 0;
  int holders = 1;
  bool replicated() const { return dim < 0; }
};
TpSlice tp_slice(const ModelShape& full, int tp, int rank, const std::string& tensor_name);

// Copies between a full unit buffer (layout `full`) and a rank's part of it (layout `local`), slot by slot, for
// the compute buffers (compute = true) or the trainable ones. to_local: full -> local (padding rows zeroed); else
// local -> full (the rank's slices only).
void tp_copy_unit(const ModelLayout& full, const ModelLayout& local, int tp, int rank, int unit, bool compute,
                  const at::Tensor& full_flat, const at::Tensor& local_flat, bool to_local);

}  // namespace lorabench::model
