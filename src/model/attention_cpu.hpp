// lorabench's own causal attention for bf16 on CPUs (private to src/model; attention.cpp chooses it). Query
// rows are taken kRows at a time against only the keys they see (blocks above the diagonal are never
// computed); each block's scores are whole rows, so the softmax needs no online rescaling. The block
// products run through libtorch's batch-reduce GEMM for CPUs (at::native::cpublas::brgemm: bf16 operands,
// fp32 accumulation and results; fp32 for the products that take the score gradient), the rows between them
// through fused kernels (kernels.hpp). The numerics: scores, probabilities and their gradients in fp32; the
// probabilities rounded to bf16 where they multiply v (forward) and d(out) (dv); dS multiplies k and q in
// fp32, since its rows sum to zero and bf16 rounding there would cost the gradients their precision.
//
// The same algorithm runs with a reference block product (at::mm in fp32 on the same operands), which is
// how the tests check the blocking on CPUs without brgemm's bf16 route.
#pragma once

#include <ATen/core/Tensor.h>

namespace lorabench::model::cpu_attention {

enum class BlockGemm { kBrgemm, kReference };

// Whether brgemm's bf16 route runs here: the CPU has AVX-512 BF16 and a probe product comes out right.
// Decided once.
bool brgemm_available();

// As attention_forward / attention_backward (attention.hpp), for bf16 CPU tensors: qkv (B*T, (H + 2K) d)
// contiguous. lse: (B, H, T) fp32, the log-sum-exp of each row's scaled scores.
at::Tensor forward(const at::Tensor& qkv, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d, at::Tensor* lse,
                   BlockGemm gemm);
at::Tensor backward(const at::Tensor& dout, const at::Tensor& qkv, const at::Tensor& out, const at::Tensor& lse,
                    int64_t B, int64_t T, int64_t H, int64_t K, int64_t d, BlockGemm gemm);

}  // namespace lorabench::model::cpu_attention
