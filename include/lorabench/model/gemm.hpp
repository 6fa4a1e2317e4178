// The GEMMs of the model, in one place: all through ATen (on CPU: oneDNN for bf16, MKL for fp32, both
// inside libtorch). lorabench once called Debian's oneDNN sgemm for fp32 (faster than Debian's OpenBLAS);
// next to the official libtorch's MKL it no longer paid and was removed (docs/performance.md, "What was tried
// and not taken").
//
// bf16 on a CPU without AVX-512: libtorch sends a bf16 GEMM to oneDNN only when the CPU has AVX-512 (BW, VL, DQ);
// elsewhere (an AVX2-only AMD EPYC, say) it runs its reference loops, 1-10 GFLOP/s on one core against about 75 for
// fp32 (measured at 51cfda9: git show 51cfda9:docs/results.md; docs/performance.md explains). There each bf16 GEMM runs
// as an fp32 GEMM on its inputs widened to fp32 (exactly), with the result rounded to bf16 once: the arithmetic of
// oneDNN's bf16 GEMM (exact products, fp32 accumulation, one rounding), the same dtypes in and out, only the summation
// order differs.
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

// How bf16 GEMMs on CPU tensors run: kNative (libtorch's oneDNN; the CPU has AVX-512) or kViaFp32 (above).
enum class CpuBf16Gemm { kNative, kViaFp32 };
CpuBf16Gemm cpu_bf16_gemm();
// ... in words, for the provenance and the calibrated peak's description.
std::string bf16_gemm_engine();
// The three GEMMs above with the CPU bf16 route given (tests compare the two on any CPU).
at::Tensor gemm(const at::Tensor& a, const at::Tensor& b, CpuBf16Gemm route);
void gemm_into(at::Tensor& c, const at::Tensor& a, const at::Tensor& b, double alpha, double beta, CpuBf16Gemm route);
at::Tensor gemm_bias(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b, CpuBf16Gemm route);

// The bytes a GEMM call moves per element of its weight beyond reading it once, for the roofline's byte count
// (metrics::TrafficSpec::weight_copy_bytes): oneDNN's bf16 GEMM copies the weight into its blocked layout at
// every call (written and read back: 2 x 2 bytes); MKL's fp32 GEMM packs panels that stay in cache, the
// fp32 route of bf16 widens the large weights in cache-sized blocks, cuBLAS reads the weight in place: 0.
int64_t gemm_weight_copy_bytes(at::ScalarType dtype, const device::Device& dev);

// The per-rank peak for MFU: the best of the timed n x n x n GEMMs through gemm() (the model's own GEMM
// path) in `dtype`, after one warm-up, on `dev` (each timed GEMM waits for the device: on CUDA the cuBLAS
// kernel's time): at least `repeats` of them (10 on a GPU) and `min_seconds` of them, at most 200.
// n = 0: 2048 on CPU, 8192 on a GPU. The detail says how many were timed.
metrics::PeakFlops calibrate_gemm_peak(at::ScalarType dtype, int threads, device::Device& dev, int64_t n = 0,
                                       int repeats = 8, double min_seconds = 1.0);

}  // namespace lorabench::model
