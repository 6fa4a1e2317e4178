// The device layer of a CPU-only build: no CUDA device exists, make_device() says why.
#include "lorabench/comm/communicator.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/device/device.hpp"

namespace lorabench::device {

bool cuda_built() { return false; }

int cuda_visible_devices() { return 0; }

std::unique_ptr<Device> make_device(const Choice& c) {
  if (c.kind == Kind::kCpu) throw Error("make_device: the CPU device is cpu_device()");
  throw ConfigError("parallel.device: cuda was asked for but this build has no CUDA path (see docs/build.md)");
}

std::unique_ptr<comm::Communicator> make_staging_communicator(std::unique_ptr<comm::Communicator> host, Device&) {
  return host;
}

}  // namespace lorabench::device
