// Tensor memory accounting: a counting allocator wrapped around libtorch's CPU allocator sees every
// tensor allocation (oneDNN's bf16 GEMM outputs and scratchpads included), so current and peak bytes
// are exact; the peak is reset every step. RSS (VmHWM) is tracked beside it by core/sysinfo.
#pragma once

#include <cstdint>

namespace lorabench::metrics {

// Installs the counting allocator as libtorch's CPU allocator. Call once, before any tensor is created.
// Idempotent.
void install_memory_counter();
bool memory_counter_installed();

int64_t tensor_bytes_current();
int64_t tensor_bytes_peak();
// Sets the peak to the current value (start of a step).
void reset_tensor_peak();
// A second peak with its own reset, for measuring within a step (FSDP's prefetch bound) without
// disturbing the step's peak.
int64_t tensor_bytes_window_peak();
void reset_tensor_window_peak();

}  // namespace lorabench::metrics
