// The device-generic versions of the fused CPU kernels (private to src/model): the same operations, at the
// same rounding points, composed of ATen ops, so they run on any device libtorch supports (this is the
// path CUDA tensors take) and on CPU when the fused kernels are switched off (model.fused_kernels = false),
// which is how the CPU tests check them against the fused path. Signatures and semantics: kernels.hpp.
#pragma once

#include <ATen/core/Tensor.h>

namespace lorabench::model::generic {

at::Tensor swiglu_forward(const at::Tensor& gu);
at::Tensor swiglu_backward(const at::Tensor& gu, const at::Tensor& da);
at::Tensor rmsnorm_forward(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* rstd);
at::Tensor rmsnorm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, const at::Tensor& rstd,
                            const at::Tensor& dw_acc, const at::Tensor& residual);
void online_softmax_chunk(const at::Tensor& z, at::Tensor& m, at::Tensor& se, at::Tensor& rescale, at::Tensor& p,
                          const at::Tensor& target_local, at::Tensor& zt);
void rope_qkv(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H,
              int64_t K, int64_t d, bool inverse);

}  // namespace lorabench::model::generic
