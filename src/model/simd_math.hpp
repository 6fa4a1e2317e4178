// Scalar helpers of the hand-written CPU kernels (private to src/model): bf16 <-> fp32 conversions on the 16 bits
// and a branch-free exp that vectorises. Everything is force-inlined, so each ISA variant of a kernel (and the
// baseline build of a plain loop) compiles it for its own target.
#pragma once

#include <cstdint>
#include <cstring>

#include "lorabench/core/cpu_isa.hpp"

namespace lorabench::model::simd {

#define LB_INLINE LB_FORCE_INLINE

// ---- storage <-> fp32 (bf16 travels as its 16 bits) -------------------------------------------------

LB_INLINE float ld(float x) { return x; }
LB_INLINE float ld(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
LB_INLINE void st(float* p, float x) { *p = x; }
LB_INLINE void st(uint16_t* p, float x) {  // round to nearest even; NaN stays NaN (quiet)
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  *p = uint16_t((nan ? (u | 0x00400000u) : rounded) >> 16);
}
template <class T>
LB_INLINE float round_to(float x) {  // x rounded to T's precision, as fp32
  T t;
  st(&t, x);
  return ld(t);
}

// exp(x) with a Cephes-style polynomial (relative error ~2e-7), branch- and call-free so it vectorises.
// exp_in_range needs x in [-87, 88] (2^n must stay a normal number); fast_exp clamps to that range first.
// NaN propagates (the clamps keep a NaN operand, and the polynomial of NaN is NaN); large negative x gives
// ~1e-38, large positive saturates at ~1.6e38.
LB_INLINE float exp_in_range(float x) {
  // Round x / ln 2 to the nearest integer with the 1.5 * 2^23 trick (exact for |n| < 2^22).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;  // 2^n; n in [-126, 127] for x in range
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}
LB_INLINE float fast_exp(float x) {
  float xc = x < -87.0f ? -87.0f : x;  // (std::min/max would not inline into the target clones)
  xc = xc > 88.0f ? 88.0f : xc;
  return exp_in_range(xc);
}

// sigmoid(x) = 1 / (1 + exp(-x)) with exp's argument clamped to [-80, 60]: above x = 80 the result is 1.0f
// exactly, as it is anyway; below x = -60 it stays at 1/(1+e^60) = 8.8e-27 instead of following e^x (silu
// there is x * 8.8e-27 instead of x * e^x: zero next to any activation that matters). The bounds matter for speed: GCC's
// jump threading turns each clamp into a lane whose value is a compile-time constant, multiplied by x in
// every vector. These bounds give normal constants whose products with x stay normal (|x| > 1.3e-12);
// fast_exp's own bounds gave 1/(1+e^88) = 6e-39, a subnormal: a microcode assist in every vector that made
// the SwiGLU kernels 5-9x slower. tests/unit/test_kernels.cpp checks that no subnormal operand appears.
LB_INLINE float sigmoid(float x) {
  float t = -x < -80.0f ? -80.0f : -x;
  t = t > 60.0f ? 60.0f : t;
  return 1.0f / (1.0f + exp_in_range(t));
}

// Each row kernel is compiled three times (AVX-512, AVX2+FMA, baseline x86-64); cpu_isa() picks one.
// DEFINE_ROW(name, params, args): name_avx512 / name_avx2 / name_base and a dispatching name().
#define LB_DEFINE_ROW(name, impl, params, args)                      \
  LB_TARGET_AVX512 void name##_avx512 params { impl args; }          \
  LB_TARGET_AVX2 void name##_avx2 params { impl args; }              \
  void name##_base params { impl args; }                             \
  inline void name params {                                          \
    switch (cpu_isa()) {                                             \
      case Isa::kAvx512: name##_avx512 args; return;                 \
      case Isa::kAvx2: name##_avx2 args; return;                     \
      default: name##_base args; return;                             \
    }                                                                \
  }

}  // namespace lorabench::model::simd
