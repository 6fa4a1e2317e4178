// Fused CPU kernels for the elementwise parts of a decoder layer (private to src/model). Each reads and
// writes its tensors once, computing in fp32 whatever the storage type (fp32 or bf16), where the unfused
// ATen version makes one pass per operation and per dtype conversion. Rows are split over the intra-op
// threads; inner loops are compiled for AVX-512, AVX2+FMA and baseline x86-64 and chosen at startup from
// the CPU's features. Each entry takes `fused` (KernelOptions::fused of the model it serves): true runs its
// fused kernel on CPU tensors (and the CUDA kernel on CUDA tensors in CUDA builds), false and other devices
// an ATen composition at the same rounding points (the device-generic path).
//
// Numerics follow the reference semantics of qwen2.hpp (transformers' RMSNorm rounding points; SwiGLU
// in fp32, rounded once), so the fused and unfused paths agree to fp32 rounding (tests/unit/test_kernels).
#pragma once

#include <ATen/core/Tensor.h>

namespace lorabench::model::kernels {

// a = silu(g) * u with g = gu[:, :I], u = gu[:, I:]. gu (N, 2I) contiguous; returns a (N, I).
at::Tensor swiglu_forward(bool fused, const at::Tensor& gu);

// Backward of swiglu_forward: dgu = [da * u * s (1 + g (1 - s)), da * silu(g)] with s = sigmoid(g). With a
// non-null `a`, also swiglu_forward(gu) into *a, the same values: the down projection's input, which the
// backward needs and the forward does not keep (the fused CPU kernel writes it from the same pass).
at::Tensor swiglu_backward(bool fused, const at::Tensor& gu, const at::Tensor& da, at::Tensor* a = nullptr);

// y = w * (x * rstd).to(dtype), rstd = 1 / sqrt(mean(x^2) + eps) in fp32 (written to rstd, (N, 1)).
at::Tensor rmsnorm_forward(bool fused, const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd);

// dx = residual + rstd * (dn - y * mean(dn * y)) with y = x * rstd and dn = (dy * w) in the storage dtype;
// dw_acc (fp32, (D)) += sum over rows of dy * y.to(dtype) when defined. residual may be undefined.
at::Tensor rmsnorm_backward(bool fused, const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& rstd, const at::Tensor& dw_acc, const at::Tensor& residual);

// One vocabulary chunk of the LM head's online softmax. z (N, C) logits in the storage type; m, se, zt,
// rescale: (N) fp32. Per row: m_new = max(m, max z), rescale = exp(m - m_new), se = se * rescale +
// sum exp(z - m_new), p = exp(z - m_new) (a flat buffer of the storage type, grown as needed; row n at
// n * C: the Σ p E GEMM reads p[:N*C] as (N, C)), m = m_new,
// and zt += z[target_local] when target_local (N, int64) lies in [0, C).
void online_softmax_chunk(bool fused, const at::Tensor& z, at::Tensor& m, at::Tensor& se, at::Tensor& rescale, at::Tensor& p,
                          const at::Tensor& target_local, at::Tensor& zt);

// The rotary embedding applied in place to the fused q|k|v projection output (N = B*T rows of H query,
// K key and K value heads of d values; cos, sin: (T, d/2) fp32): the H + K query and key heads of each
// row are rotated by their position's angle (inverse = true: rotated back, the backward); the value heads
// are left alone. fp32 math, one rounding.
void rope_qkv(bool fused, at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H,
              int64_t K, int64_t d, bool inverse);

// Qwen3's per-head RMSNorm of the query and key heads followed by the rotary embedding, in place on the
// fused q|k|v projection output (N = B*T rows of H query, K key and K value heads of d values; the value
// heads are left alone): each query head x becomes rope(rmsnorm(x) with wq), each key head the same with wk.
// The norms' inputs and statistics are returned for the backward: q_pre (N*H, d) and k_pre (N*K, d) in the
// model dtype, rstd_q (N*H, 1) and rstd_k (N*K, 1) in fp32. The same values as rmsnorm_forward over each
// head's copy followed by rope_qkv, which is what the device-generic path runs (and CUDA tensors, with
// those two CUDA kernels); the fused CPU kernel does it in one pass over the heads, where that composition
// makes four (the copy out of the strided rows, the norm, the copy back, the rotation).
void qk_norm_rope(bool fused, at::Tensor& qkv, const at::Tensor& wq, const at::Tensor& wk, double eps,
                  const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d,
                  at::Tensor* q_pre, at::Tensor* k_pre, at::Tensor* rstd_q, at::Tensor* rstd_k);

// Its backward, in place on d(q|k|v): the query and key heads rotated back, then through their norms; the
// norms' weight gradients added to dwq and dwk (fp32, (d)) when they are defined (full fine-tuning).
void qk_norm_rope_backward(bool fused, at::Tensor& dqkv, const at::Tensor& wq, const at::Tensor& wk,
                           const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H, int64_t K,
                           int64_t d, const at::Tensor& q_pre, const at::Tensor& k_pre, const at::Tensor& rstd_q,
                           const at::Tensor& rstd_k, const at::Tensor& dwq, const at::Tensor& dwk);

// Rows of the blocked CPU attention (attention_cpu.cpp), on raw buffers; bf16 is its 16 bits.
// attention_probs_row: s[0, n) one query row's raw scores against the keys it sees; overwrites s with
// exp(scale * s - max), writes softmax(scale * s) rounded to bf16 to pb[0, n) and zeros to pb[n, n_pad);
// returns the row's log-sum-exp (of scale * s).
float attention_probs_row(float* s, int64_t n, int64_t n_pad, float scale, uint16_t* pb);
// attention_grad_rows: two query rows j = 0, 1: p_j = exp(scale * s_j - lse_j) over [0, n_j), ds_j = p_j *
// (dp_j - D_j), p_j rounded to bf16 into pb[2c + j] (brgemm's pair layout); zeros over [n_j, n_pad). No
// two buffers overlap; n1 = 0 for a lone last row.
void attention_grad_rows(const float* s0, const float* s1, const float* dp0, const float* dp1, int64_t n0, int64_t n1,
                         int64_t n_pad, float scale, float lse0, float lse1, float D0, float D1, uint16_t* pb,
                         float* ds0, float* ds1);
// dst = scale * src rounded to bf16 (nearest even).
void round_row_bf16(const float* src, uint16_t* dst, int64_t n, float scale);
// sum of a[i] * b[i] in fp32.
float dot_row_bf16(const uint16_t* a, const uint16_t* b, int64_t n);

}  // namespace lorabench::model::kernels
