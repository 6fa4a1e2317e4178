// A build without lorabench's CUDA kernels: CUDA tensors take the device-generic ATen path.
#include "cuda_kernels.hpp"

#include "lorabench/core/error.hpp"

namespace lorabench::model::cuda {

bool available() { return false; }
at::Tensor swiglu_forward(const at::Tensor&) { throw Error("lorabench was built without its CUDA kernels"); }
at::Tensor swiglu_backward(const at::Tensor&, const at::Tensor&) { throw Error("lorabench was built without its CUDA kernels"); }
at::Tensor rmsnorm_forward(const at::Tensor&, const at::Tensor&, double, at::Tensor*) {
  throw Error("lorabench was built without its CUDA kernels");
}
void rope_qkv(at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, int64_t, int64_t, int64_t, int64_t, bool) {
  throw Error("lorabench was built without its CUDA kernels");
}
void online_softmax_chunk(const at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&, const at::Tensor&,
                          at::Tensor&) {
  throw Error("lorabench was built without its CUDA kernels");
}

}  // namespace lorabench::model::cuda
