// lorabench's CUDA kernels on tensors (private to src/model): kernels.cpp calls these for CUDA tensors
// while model.fused_kernels is on and the build has them (available()), and the device-generic ATen
// compositions otherwise. Same signatures and numerics as the entries of kernels.hpp.
#pragma once

#include <ATen/core/Tensor.h>

namespace lorabench::model::cuda {

bool available();  // this build compiled cuda_kernels.cu
at::Tensor swiglu_forward(const at::Tensor& gu);
at::Tensor swiglu_backward(const at::Tensor& gu, const at::Tensor& da);
at::Tensor rmsnorm_forward(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd);
void rope_qkv(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H,
              int64_t K, int64_t d, bool inverse);
void online_softmax_chunk(const at::Tensor& z, at::Tensor& m, at::Tensor& se, at::Tensor& rescale, at::Tensor& p,
                          const at::Tensor& target_local, at::Tensor& zt);

}  // namespace lorabench::model::cuda
