// Which SIMD instruction set the hand-written kernels use, decided once from the CPU's features (not its
// model: GCC's target_clones("arch=...") dispatch would leave AMD AVX-512 machines on the baseline).
#pragma once

namespace lorabench {

enum class Isa { kBaseline, kAvx2, kAvx512 };

// AVX-512 needs F, BW, VL and DQ; AVX2 needs FMA too. Cached after the first call.
Isa cpu_isa();
const char* isa_name(Isa isa);  // "avx512", "avx2", "baseline"

}  // namespace lorabench

// Function attributes for the per-ISA variants of a kernel.
#define LB_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define LB_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define LB_FORCE_INLINE __attribute__((always_inline)) inline
