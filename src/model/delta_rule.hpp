// The gated delta rule of Gated DeltaNet (Qwen3.5's linear-attention layers), forward and backward written
// out on ATen ops, chunk by chunk: the device-generic path (any device ATen runs on).
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

#include "lorabench/model/shape.hpp"

namespace lorabench::model::delta_rule {

constexpr int64_t kChunk = kDeltaRuleChunk;

// o (B, T, Hv, dv) in v's dtype.
at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                   const at::Tensor& beta, int64_t chunk = kChunk);

// The gradients of sum(o * dout) with respect to each input, in the inputs' dtypes and shapes (contiguous).
struct Grads {
  at::Tensor dq, dk, dv, dg, dbeta;
};
Grads backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
               const at::Tensor& beta, const at::Tensor& dout, int64_t chunk = kChunk);

}  // namespace lorabench::model::delta_rule
