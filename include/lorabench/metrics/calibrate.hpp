// The per-rank peak FLOP/s that MFU divides by, measured at startup with a GEMM of the run's dtype on
// the run's device and thread count (or taken from profile.peak_gflops).
#pragma once

#include <ATen/core/Tensor.h>

#include "lorabench/metrics/flops.hpp"

namespace lorabench::metrics {

// Best of `repeats` timed n x n x n GEMMs (after one warm-up) in `dtype`.
PeakFlops calibrate_peak_flops(at::ScalarType dtype, int threads, int64_t n = 1536, int repeats = 3);

}  // namespace lorabench::metrics
