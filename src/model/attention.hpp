// Causal attention through a fused kernel (private to src/model). The T x T scores are never
// materialised: the forward keeps the output and the per-row log-sum-exp, and the backward recomputes the
// probabilities block by block from them. Query head h attends with key/value head h / (H / K)
// (grouped-query attention, transformers' repeat_kv order). The kernel is the model's KernelOptions's (layout.hpp).
// CPU (model.cpu_attention): lorabench's blocked kernel for bf16 where the CPU has AVX-512 BF16 (attention_cpu.hpp), else
// libtorch's flash kernel for CPU; both take the K key/value heads as they are. CUDA (model.cuda_attention): FlashAttention-2 (bf16), which also takes the K heads as they are and
// returns their gradients summed over each group, or the memory-efficient kernel (fp32 and bf16), with k
// and v repeated to H heads and their gradients summed back over each group.
#pragma once

#include <ATen/core/Tensor.h>

#include "lorabench/model/layout.hpp"

namespace lorabench::model {

// qkv: (B*T, (H + 2K) d) after the rotary embedding. Returns the output (N, H d) (token-major, as o_proj
// reads it) and the log-sum-exp of each query row (*lse, fp32), which attention_backward needs.
at::Tensor attention_forward(const KernelOptions& k, const at::Tensor& qkv, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d,
                             at::Tensor* lse);

// d(qkv) (B*T, (H + 2K) d) from d(out) (N, H d); `out` and `lse` are attention_forward's results for qkv.
at::Tensor attention_backward(const KernelOptions& k, const at::Tensor& dout, const at::Tensor& qkv,
                              const at::Tensor& out, const at::Tensor& lse, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d);

}  // namespace lorabench::model
