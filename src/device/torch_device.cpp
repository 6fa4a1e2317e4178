#include "lorabench/device/torch_device.hpp"

#include <ATen/ATen.h>

namespace lorabench::device {

at::Tensor host_tensor(at::IntArrayRef sizes, at::ScalarType dtype, c10::Device target) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).pinned_memory(target.is_cuda()));
}

}  // namespace lorabench::device
