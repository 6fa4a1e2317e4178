// Launchers of lorabench's own CUDA kernels (cuda_kernels.cu, compiled by nvcc for sm_80 and sm_90 plus
// PTX). Torch-free: raw device pointers, sizes and the stream to launch on; the tensor-facing side is
// cuda_kernels.cpp. Private to src/model. Each computes in fp32 with the rounding points of the
// device-generic ATen composition it replaces (kernels.cpp, namespace generic), so the two agree to fp32
// rounding. bf16 storage is passed as unsigned short (the bit pattern).
#pragma once

#include <cstdint>

namespace lorabench::model::cuda {

// Each returns the CUDA error code of the launch (0 = cudaSuccess).
int launch_swiglu_forward(const void* gu, void* a, int64_t N, int64_t I, bool bf16, void* stream);
int launch_swiglu_backward(const void* gu, const void* da, void* dgu, int64_t N, int64_t I, bool bf16, void* stream);
int launch_rmsnorm_forward(const void* x, const void* w, void* y, float* rstd, int64_t N, int64_t D, float eps,
                           bool bf16, void* stream);
int launch_rope_qkv(void* qkv, const float* cos, const float* sin, int64_t B, int64_t T, int64_t H, int64_t K,
                    int64_t d, bool inverse, bool bf16, void* stream);
int launch_online_softmax_chunk(const void* z, float* m, float* se, float* rescale, void* p, const int64_t* target,
                                float* zt, int64_t N, int64_t C, bool bf16, void* stream);
const char* error_string(int code);

}  // namespace lorabench::model::cuda
