// The device layer's libtorch face: the c10::Device of a Device, for the layers that allocate tensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "lorabench/device/device.hpp"

namespace lorabench::device {

inline c10::Device torch_device(const Device& d) {
  return d.is_cuda() ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(d.index()))
                     : c10::Device(c10::DeviceType::CPU);
}

// A CPU tensor for data made on the host and bound for `target`: fill it, then .to(target, /*non_blocking=*/true).
// Page-locked when the target is a GPU, so that the copy is queued behind the compute stream's work without
// the host waiting for it (from pageable memory the host would wait for everything already queued);
// libtorch's pinned allocator keeps the block until the copy has read it. Ordinary memory on the CPU, where
// .to(target) returns the tensor itself.
at::Tensor host_tensor(at::IntArrayRef sizes, at::ScalarType dtype, c10::Device target);

}  // namespace lorabench::device
