// The device layer's libtorch face: the c10::Device of a Device, for the layers that allocate tensors.
#pragma once

#include <c10/core/Device.h>

#include "lorabench/device/device.hpp"

namespace lorabench::device {

inline c10::Device torch_device(const Device& d) {
  return d.is_cuda() ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(d.index()))
                     : c10::Device(c10::DeviceType::CPU);
}

}  // namespace lorabench::device
