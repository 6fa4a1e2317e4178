// The GEMMs of the model, in one place. bf16 goes through ATen (oneDNN). fp32 goes through oneDNN's
// sgemm when the build found oneDNN (LORABENCH_WITH_DNNL), else through ATen (the BLAS libtorch uses).
// The reason: on CPUs its BLAS does not recognise (Debian's OpenBLAS 0.3.21 runs its AVX2 "Haswell"
// kernels on AVX-512 Zen 4), oneDNN's JIT sgemm is ~1.8x faster for the model's shapes (docs/performance.md).
// Same arithmetic either way (an fp32 GEMM with fp32 accumulation); a test compares the two.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "lorabench/metrics/flops.hpp"

namespace lorabench::model {

// a (M, K) @ b (K, N); a and b may be transposed views.
at::Tensor gemm(const at::Tensor& a, const at::Tensor& b);
// c = beta * c + alpha * a @ b, in place; c may be a column slice of a wider row-major matrix.
void gemm_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, double alpha, double beta);
// bias (N) + a @ b.
at::Tensor gemm_bias(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b);

// Which fp32 GEMM runs: "oneDNN sgemm" or "ATen (libtorch's BLAS)".
std::string fp32_gemm_engine();
// Test hook: false forces ATen for fp32 (to compare the engines).
void set_fp32_gemm_engine_enabled(bool enabled);

// The per-rank peak for MFU: the best of `repeats` timed n x n x n GEMMs through gemm() (the model's own
// GEMM path) in `dtype`, after one warm-up.
metrics::PeakFlops calibrate_gemm_peak(at::ScalarType dtype, int threads, int64_t n = 2048, int repeats = 4);

}  // namespace lorabench::model
