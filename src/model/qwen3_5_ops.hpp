// The elementwise parts that Qwen3.5's layers add (private to src/model), forward and backward, on ATen ops: the
// device-generic path, at transformers' rounding points (its torch fallback is the reference); the convolution also
// as CPU kernels (qwen3_5_cpu.cpp): the convolution and the two norms. Each entry taking `fused` runs its CPU kernel on
// CPU tensors when it is true; false, and other devices, the ATen composition. The layers that
// use them are in qwen2.cpp; the gated delta rule is in delta_rule.hpp.
//
// Rows are tokens: N = B*T rows of B sequences of T tokens. dt is the model dtype; fp32 inside.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace lorabench::model::qwen3_5 {

// Qwen3.5's RMSNorm (transformers' Qwen3_5RMSNorm): y = (x / rms(x) * (1 + w)) in fp32, rounded once to dt.
// rstd (N, 1) fp32 when asked. Used for the layer norms, the final norm and, per head, q_norm and k_norm.
at::Tensor zc_rmsnorm_forward(bool fused, const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd);
// dx (+ residual when defined), in x's dtype; dw_acc (fp32) += sum over rows of dy * x / rms(x) when defined.
at::Tensor zc_rmsnorm_backward(bool fused, const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                               const at::Tensor& rstd, const at::Tensor& dw_acc, const at::Tensor& residual);

// The rotary embedding over the first 2 * cos.size(1) dimensions of each head, in place: heads (N, n, d), a view
// of rows of B sequences of T tokens; cos, sin (T, r/2) fp32. inverse: rotated back (the backward). fp32 math.
void rope_partial(const at::Tensor& heads, const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T,
                  bool inverse);

// The causal depthwise convolution over each sequence followed by SiLU (causal_conv1d_fn): x (N, C) in dt (a
// strided view is fine), w (C, K) in dt: pre[t, c] = sum_j w[c, j] x[t - (K-1) + j, c] (0 before the sequence's
// start), rounded to dt, then silu, rounded to dt. Returns (N, C) contiguous. fused: the CPU kernel
// (qwen3_5_cpu.cpp) on CPU tensors; false and other devices: the ATen composition.
at::Tensor conv_silu_forward(bool fused, const at::Tensor& x, const at::Tensor& w, int64_t B, int64_t T);
// dx (N, C) in dt from dy; dw_acc (fp32, (C, K)) += when defined.
at::Tensor conv_silu_backward(bool fused, const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, int64_t B,
                              int64_t T, const at::Tensor& dw_acc);
namespace cpu {  // the CPU kernels: fp32 or bf16 CPU tensors, x with contiguous rows
at::Tensor zc_rmsnorm_forward(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd);
at::Tensor zc_rmsnorm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, const at::Tensor& rstd,
                               const at::Tensor& dw_acc, const at::Tensor& residual);
at::Tensor gated_norm_forward(const at::Tensor& core, const at::Tensor& z, const at::Tensor& w, double eps,
                              at::Tensor* rstd);
at::Tensor gated_norm_backward(const at::Tensor& dy, const at::Tensor& core, const at::Tensor& z, const at::Tensor& w,
                               const at::Tensor& rstd, at::Tensor* dz, const at::Tensor& dw_acc);
at::Tensor conv_silu_forward(const at::Tensor& x, const at::Tensor& w, int64_t B, int64_t T);
at::Tensor conv_silu_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, int64_t B, int64_t T,
                              const at::Tensor& dw_acc);
}  // namespace cpu

// The write strength beta = sigmoid(b) (in dt) and the log decay g = -exp(A_log) softplus(a + dt_bias) (fp32,
// <= 0) of each token and value head: a, b (N, Hv) in dt, A_log and dt_bias (Hv) in dt.
struct Gates {
  at::Tensor g, beta;
};
Gates gates_forward(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_log, const at::Tensor& dt_bias);
// From dg (fp32) and dbeta: da, db (N, Hv) in dt; d A_log and d dt_bias accumulated (fp32) when defined.
void gates_backward(const at::Tensor& dg, const at::Tensor& dbeta, const at::Tensor& a, const at::Tensor& b,
                    const at::Tensor& a_log, const at::Tensor& dt_bias, at::Tensor* da, at::Tensor* db,
                    const at::Tensor& da_log_acc, const at::Tensor& ddt_bias_acc);

// The gated RMSNorm of the linear layers (Qwen3_5RMSNormGated) over each value head: core, z (N*Hv, dv) in dt,
// w (dv): y = (w * (core / rms(core)).to(dt)) * silu(z) in fp32, rounded to dt. rstd (N*Hv, 1) when asked.
at::Tensor gated_norm_forward(bool fused, const at::Tensor& core, const at::Tensor& z, const at::Tensor& w, double eps,
                              at::Tensor* rstd);
// Returns dcore (dt); *dz (dt); dw_acc (fp32, (dv)) += when defined.
at::Tensor gated_norm_backward(bool fused, const at::Tensor& dy, const at::Tensor& core, const at::Tensor& z,
                               const at::Tensor& w, const at::Tensor& rstd, at::Tensor* dz, const at::Tensor& dw_acc);

}  // namespace lorabench::model::qwen3_5
