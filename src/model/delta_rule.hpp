// The gated delta rule of Gated DeltaNet (Qwen3.5's linear-attention layers), forward and backward written
// out chunk by chunk twice: on ATen ops (the device-generic path, any device ATen runs on) and as a CPU kernel.
//
// Per value head, with q and k L2-normalised (eps 1e-6) and q scaled by dk^-1/2, a state S (dk x dv, fp32)
// runs over the tokens: S <- exp(g_t) S; S <- S + k_t (beta_t (v_t - S^T k_t))^T; o_t = S^T q_t. The chunked
// form (as transformers' torch_chunk_gated_delta_rule and flash-linear-attention compute it) does the work
// inside a chunk of C tokens with matrix products and carries S across chunks. Within chunk c, with the
// cumulative log-decay G (C), D_ij = exp(G_i - G_j) for j <= i (0 above), Kb = diag(beta) K, E = exp(G):
//   L  = I + strictly_lower(Kb K^T * D)          (unit lower triangular, C x C)
//   U  = L^-1 diag(beta) V,  W = L^-1 diag(E) Kb  (the "UT transform": C delta-rule updates in two solves)
//   Vn = U - W S                                  (the new values: what the state does not yet predict)
//   O  = diag(E) Q S + (Q K^T * D) Vn
//   S' = exp(G_C) S + (diag(exp(G_C - G)) K)^T Vn
// The backward runs the same chunks in reverse (the state's gradient carried from the last chunk to the first)
// and keeps nothing but its inputs between forward and backward: it recomputes the chunk quantities and the
// states at the chunk starts, a buffer linear in T (one dk x dv state per chunk), no T x T buffer beyond one
// chunk's C x C. Everything is computed in fp32 whatever the inputs' dtype.
//
// Shapes: q, k (B, T, Hk, dk); v (B, T, Hv, dv); g (log decay, <= 0), beta (B, T, Hv); each key head serves
// Hv / Hk consecutive value heads. Strided views are accepted (the layer passes column slices of one buffer).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "lorabench/core/cpu_isa.hpp"
#include "lorabench/model/shape.hpp"

namespace lorabench::model::delta_rule {

constexpr int64_t kChunk = kDeltaRuleChunk;

// The gradients of sum(o * dout) with respect to each input, in the inputs' dtypes and shapes (contiguous).
struct Grads {
  at::Tensor dq, dk, dv, dg, dbeta;
};

// o (B, T, Hv, dv) in v's dtype. fused: the CPU kernel (delta_rule_cpu.cpp) on CPU tensors; false, and tensors
// of other devices: the ATen composition below (the device-generic path, and the CPU kernel's reference).
at::Tensor forward(bool fused, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                   const at::Tensor& beta, int64_t chunk = kChunk);
Grads backward(bool fused, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
               const at::Tensor& beta, const at::Tensor& dout, int64_t chunk = kChunk);

// The two implementations. generic: ATen ops, chunk by chunk (above). cpu: the same algorithm on raw fp32 buffers
// of fp32 or bf16 CPU tensors, one task per batch row and key head, the products inside a chunk by a
// register-blocked fp32 kernel (AVX-512, AVX2+FMA or baseline), the same values to fp32 rounding; its backward
// keeps per task the chunk quantities of one value head (linear in T) instead of recomputing them.
namespace generic {
at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                   const at::Tensor& beta, int64_t chunk);
Grads backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
               const at::Tensor& beta, const at::Tensor& dout, int64_t chunk);
}  // namespace generic
namespace cpu {
at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                   const at::Tensor& beta, int64_t chunk);
Grads backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
               const at::Tensor& beta, const at::Tensor& dout, int64_t chunk);
// Its block product, with the variant named (the tests run every variant the CPU has): C (M x N, row stride
// ldc) = (acc ? C : 0) + alpha * op(A) (M x K) B (K x N, ldb), fp32 row-major; op(A) = A (M x K, lda), or with
// transpose_a the transpose of A (K x M, lda).
void block_product(Isa isa, bool transpose_a, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float* C, int64_t ldc, float alpha, bool acc);
}  // namespace cpu

}  // namespace lorabench::model::delta_rule
