// Fused CPU kernels for the elementwise parts of a decoder layer (private to src/model). Each reads and
// writes its tensors once, computing in fp32 whatever the storage type (fp32 or bf16), where the unfused
// ATen version makes one pass per operation and per dtype conversion. Rows are split over the intra-op
// threads; inner loops are compiled for AVX-512, AVX2+FMA and baseline x86-64 and chosen at startup from
// the CPU's features.
//
// Numerics follow the reference semantics of qwen2.hpp (transformers' RMSNorm rounding points; SwiGLU
// in fp32, rounded once), so the fused and unfused paths agree to fp32 rounding (tests/unit/test_kernels).
#pragma once

#include <ATen/core/Tensor.h>

namespace lorabench::model::kernels {

// a = silu(g) * u with g = gu[:, :I], u = gu[:, I:]. gu (N, 2I) contiguous; returns a (N, I).
at::Tensor swiglu_forward(const at::Tensor& gu);

// Backward of swiglu_forward: dgu = [da * u * s (1 + g (1 - s)), da * silu(g)] with s = sigmoid(g).
at::Tensor swiglu_backward(const at::Tensor& gu, const at::Tensor& da);

// y = w * (x * rstd).to(dtype), rstd = 1 / sqrt(mean(x^2) + eps) in fp32 (written to rstd, (N, 1)).
at::Tensor rmsnorm_forward(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd);

// dx = residual + rstd * (dn - y * mean(dn * y)) with y = x * rstd and dn = (dy * w) in the storage dtype;
// dw_acc (fp32, (D)) += sum over rows of dy * y.to(dtype) when defined. residual may be undefined.
at::Tensor rmsnorm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, const at::Tensor& rstd,
                            const at::Tensor& dw_acc, const at::Tensor& residual);

// One vocabulary chunk of the LM head's online softmax. z (N, C) logits in the storage type; m, se, zt,
// rescale: (N) fp32. Per row: m_new = max(m, max z), rescale = exp(m - m_new), se = se * rescale +
// sum exp(z - m_new), p = exp(z - m_new) (a flat buffer of the storage type, grown as needed; row n at
// n * C: the Σ p E GEMM reads p[:N*C] as (N, C)), m = m_new,
// and zt += z[target_local] when target_local (N, int64) lies in [0, C).
void online_softmax_chunk(const at::Tensor& z, at::Tensor& m, at::Tensor& se, at::Tensor& rescale, at::Tensor& p,
                          const at::Tensor& target_local, at::Tensor& zt);

// Causal softmax of attention scores (..., rows, T) whose row index modulo `seq` is the query position t:
// P = softmax(scale * scores) over columns 0..t, 0 beyond. Writes P in fp32 (*p32) and/or in the scores'
// dtype (*pdt), each when the pointer is given.
void causal_softmax(const at::Tensor& scores, int64_t seq, double scale, at::Tensor* p32, at::Tensor* pdt);
// dS = scale * P (dP - rowsum(dP * P)), the gradient of the scaled scores, in dP's dtype.
at::Tensor causal_softmax_backward(const at::Tensor& p, const at::Tensor& dp, double scale);

// Splits the fused q|k|v projection output (N = B*T rows, (H + 2K) d columns) into the attention layout
// with the rotary embedding applied to q and k (cos, sin: (T, d/2) fp32): q (B, K, G*T, d) with query head
// h = kv * G + g at rows g*T .. g*T + T of KV head kv, k and v (B, K, T, d). One pass.
void rope_qkv_forward(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T,
                      int64_t H, int64_t K, int64_t d, at::Tensor* q, at::Tensor* k, at::Tensor* v);
// Its backward: dq, dk, dv in the attention layout -> d(qkv) (N, (H + 2K) d), un-rotating dq and dk.
at::Tensor rope_qkv_backward(const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv, const at::Tensor& cos,
                             const at::Tensor& sin, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d);

}  // namespace lorabench::model::kernels
