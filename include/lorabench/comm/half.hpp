// 16-bit floating point <-> fp32 conversions on the host, for the MPI backend's reductions, the collective
// benchmark's data and tests. Round to nearest even; NaN stays NaN; fp16 overflow gives infinity. Torch-free.
#pragma once

#include <cstdint>

namespace lorabench::comm {

float bf16_to_f32(uint16_t bits);  // exact
uint16_t f32_to_bf16(float f);     // round to nearest even
float f16_to_f32(uint16_t bits);   // exact (subnormals included)
uint16_t f32_to_f16(float f);      // round to nearest even; |f| >= 65520 becomes +-inf

}  // namespace lorabench::comm
