// The memory bandwidth a rank gets, for the roofline (metrics/roofline.hpp; docs/metrics.md, "Bytes and the
// roofline"): a STREAM-style triad a = b + s * c in fp32 through ATen on the rank's device and threads, its
// arrays several times the last-level cache so that they stream from memory. The trainer runs it on every
// rank at once (train/trainer.cpp), so that the ranks of a node share the memory system as in the steps.
// Torch-free header.
#pragma once

#include <cstdint>

#include "lorabench/device/device.hpp"
#include "lorabench/metrics/roofline.hpp"

namespace lorabench::model {

// The size of each of the triad's three arrays: on a CPU four times the last-level cache that sysfs reports
// (at least 64 MiB; 128 MiB when none is reported), on a GPU 1 GiB.
int64_t default_triad_array_bytes(const device::Device& dev);

// The best of at least `repeats` timed triads (after one that touches the pages) and `min_seconds` of them,
// at most 100. Bytes per triad: on a CPU 4 x the array (b and c read, a read for ownership and written: ATen's
// stores are not streaming stores, so the memory system moves the destination twice; STREAM's own
// convention, 3 x, would understate what the memory system delivers by a quarter), on a GPU 3 x.
// array_bytes = 0: default_triad_array_bytes.
metrics::MemoryBandwidth measure_triad_bandwidth(int threads, device::Device& dev, int64_t array_bytes = 0,
                                                 int repeats = 5, double min_seconds = 0.5);

}  // namespace lorabench::model
