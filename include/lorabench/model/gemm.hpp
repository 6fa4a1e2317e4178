// The GEMMs of the model, in one place: all through ATen (on CPU: oneDNN for bf16, MKL for fp32, both
// inside libtorch). lorabench once called Debian's oneDNN sgemm for fp32 (faster than Debian's OpenBLAS);
// next to the official libtorch's MKL it no longer paid (docs/results.md) and was removed.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "lorabench/device/device.hpp"
#include "lorabench/metrics/flops.hpp"

namespace lorabench::model {

// a (M, K) @ b (K, N); a and b may be transposed views.
at::Tensor gemm(const at::Tensor& a, const at::Tensor& b);
// c = beta * c + alpha * a @ b, in place; c may be a column slice of a wider row-major matrix.
void gemm_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, double alpha, double beta);
// bias (N) + a @ b.
at::Tensor gemm_bias(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b);

// Which fp32 GEMM runs, for the provenance: "ATen (MKL inside libtorch)" or "ATen (libtorch's BLAS)".
std::string fp32_gemm_engine();

// The per-rank peak for MFU: the best of `repeats` timed n x n x n GEMMs through gemm() (the model's own
// GEMM path) in `dtype`, after one warm-up, on `dev` (each timed GEMM waits for the device: on CUDA the
// cuBLAS kernel's time). n = 0: 2048 on CPU, 8192 on a GPU.
metrics::PeakFlops calibrate_gemm_peak(at::ScalarType dtype, int threads, device::Device& dev, int64_t n = 0,
                                       int repeats = 4);

}  // namespace lorabench::model
