// The device of the strategy tests, and their tolerance there: the CPU (label mpi), or built with LB_TEST_ON_CUDA
// (tests/gpu, label gpu) every rank on the machine's first GPU, the MPI communicator staging device buffers through
// host memory (several ranks sharing one GPU).
#pragma once

#include <memory>

#include "lorabench/device/device.hpp"

namespace lbtest {

#ifdef LB_TEST_ON_CUDA
// cuBLAS chooses its algorithm (split-K included) by shape, and a sharded head's chunks, like a tensor-parallel
// rank's part, have other shapes than the unsharded model's: rounding differences one order above the CPU's.
constexpr double kTol = 1e-4;
inline lorabench::device::Device& test_device() {
  static std::unique_ptr<lorabench::device::Device> d =
      lorabench::device::make_device({lorabench::device::Kind::kCuda, 0, "mpi", "the test's GPU"});
  return *d;
}
#else
constexpr double kTol = 1e-5;
inline lorabench::device::Device& test_device() { return lorabench::device::cpu_device(); }
#endif

}  // namespace lbtest
