// The fused kernels against the unfused ATen formulas they replace (fp32 to rounding, bf16 to one or
// two bf16 ulps), and NaN propagation (the non-finite checks depend on it).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "../../src/model/attention.hpp"
#include "../../src/model/attention_cpu.hpp"
#include "../../src/model/kernels.hpp"
#include "../../src/model/qwen3_5_ops.hpp"
#include "lorabench/core/cpu_isa.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/model/gemm.hpp"
#include "lorabench/model/qwen2.hpp"

using namespace lorabench::model;

namespace {

// Largest difference relative to the reference's largest magnitude (elements near zero after
// cancellation carry only absolute rounding error).
double max_rel(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor af = a.to(at::kFloat), bf = b.to(at::kFloat);
  return (af - bf).abs().max().item<double>() / std::max(bf.abs().max().item<double>(), 1e-30);
}

// The unfused SwiGLU of the reference implementation.
at::Tensor swiglu_ref(const at::Tensor& gu) {
  const int64_t I = gu.size(1) / 2;
  at::Tensor g = gu.narrow(1, 0, I).to(at::kFloat), u = gu.narrow(1, I, I).to(at::kFloat);
  return (at::silu(g) * u).to(gu.scalar_type());
}

at::Tensor swiglu_back_ref(const at::Tensor& gu, const at::Tensor& da) {
  const int64_t I = gu.size(1) / 2;
  at::Tensor g = gu.narrow(1, 0, I).to(at::kFloat), u = gu.narrow(1, I, I).to(at::kFloat);
  at::Tensor d = da.to(at::kFloat), s = at::sigmoid(g);
  return at::cat({d * u * s * (1 + g * (1 - s)), d * g * s}, 1).to(gu.scalar_type());
}

}  // namespace

TEST(Kernels, SwigluMatchesTheUnfusedFormula) {
  at::manual_seed(3);
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    at::Tensor gu = (at::randn({37, 2 * 133}) * 4).to(dt);  // odd sizes: vector tails
    at::Tensor da = at::randn({37, 133}).to(dt);
    const double tol = dt == at::kFloat ? 2e-6 : 1e-2;
    EXPECT_LE(max_rel(kernels::swiglu_forward(true, gu), swiglu_ref(gu)), tol) << c10::toString(dt);
    EXPECT_LE(max_rel(kernels::swiglu_backward(true, gu, da), swiglu_back_ref(gu, da)), tol) << c10::toString(dt);
    // The backward's copy of the forward's output (the down projection's input) is the forward's, bit for bit,
    // and leaves dgu as it is without it; on the fused kernels and on the device-generic path.
    for (bool fused : {true, false}) {
      at::Tensor a;
      const at::Tensor dgu = kernels::swiglu_backward(fused, gu, da, &a);
      EXPECT_TRUE(at::equal(a, kernels::swiglu_forward(fused, gu))) << c10::toString(dt) << " fused " << fused;
      EXPECT_TRUE(at::equal(dgu, kernels::swiglu_backward(fused, gu, da))) << c10::toString(dt) << " fused " << fused;
    }
  }
}

TEST(Kernels, SwigluExtremesAndNan) {
  at::Tensor gu = at::tensor({-200.f, -30.f, 0.f, 30.f, 200.f, NAN, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f}).view({1, 12});
  at::Tensor a = kernels::swiglu_forward(true, gu);
  EXPECT_NEAR(a[0][0].item<float>(), 0.f, 1e-23);   // silu(-200) = -200 e^-200; the kernel floors sigmoid at 8.8e-27
  EXPECT_NEAR(a[0][3].item<float>(), 30.f, 1e-4);   // silu(30) ~ 30
  EXPECT_NEAR(a[0][4].item<float>(), 200.f, 1e-3);
  EXPECT_TRUE(std::isnan(a[0][5].item<float>())) << "a NaN must stay a NaN";
  at::Tensor d = kernels::swiglu_backward(true, gu, at::ones({1, 6}));
  EXPECT_TRUE(std::isnan(d[0][5].item<float>()));
  EXPECT_TRUE(at::isfinite(d.narrow(1, 0, 5)).all().item<bool>());
  at::Tensor bf = kernels::swiglu_forward(true, gu.to(at::kBFloat16));
  EXPECT_TRUE(std::isnan(bf[0][5].item<float>()));
}

#if defined(__x86_64__)
// A subnormal operand or result costs a microcode assist in every vector that meets one; the sigmoid's
// clamps once made GCC multiply by a subnormal constant in every vector (5-9x slower SwiGLU kernels). On
// ordinary inputs (gates within +-60, where neither clamp is active), the kernels must not raise MXCSR's
// denormal-operand or underflow flag. (Lanes beyond the clamps may: the vector computes the unclamped
// polynomial for them too before it blends in the clamped value. Such gates are rare.)
TEST(Kernels, SwigluMeetsNoSubnormalNumbers) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);  // MXCSR flags are per thread: keep the kernels on this one
  at::manual_seed(5);
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    at::Tensor gu = (at::randn({16, 2 * 515}) * 8).clamp(-60, 60).to(dt), da = at::randn({16, 515}).to(dt);
    _mm_setcsr(_mm_getcsr() & ~0x3fu);
    at::Tensor a = kernels::swiglu_forward(true, gu);
    at::Tensor dgu = kernels::swiglu_backward(true, gu, da);
    const unsigned flags = _mm_getcsr() & 0x3fu;
    EXPECT_EQ(flags & 0x02u, 0u) << c10::toString(dt) << ": a subnormal operand (MXCSR DE)";
    EXPECT_EQ(flags & 0x10u, 0u) << c10::toString(dt) << ": a subnormal result (MXCSR UE)";
    EXPECT_TRUE(at::isfinite(a).all().item<bool>() && at::isfinite(dgu).all().item<bool>());
  }
  at::set_num_threads(threads);
}
#endif

TEST(Kernels, RmsnormMatchesTheReference) {
  at::manual_seed(5);
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    at::Tensor x = (at::randn({19, 77}) * 3).to(dt), w = (at::randn({77}) + 1).to(dt);
    at::Tensor dy = at::randn({19, 77}).to(dt), res = at::randn({19, 77}).to(dt);
    at::Tensor r1, r2;
    at::Tensor y1 = kernels::rmsnorm_forward(true, x, w, 1e-6, &r1);
    at::Tensor y2 = rmsnorm_forward_reference(x, w, 1e-6, &r2);
    const double tol = dt == at::kFloat ? 2e-6 : 1e-2;
    EXPECT_LE(max_rel(y1, y2), tol);
    EXPECT_LE(max_rel(r1, r2), 2e-6);
    at::Tensor dw1 = at::zeros({77}), dw2 = at::zeros({77});
    at::Tensor dx1 = kernels::rmsnorm_backward(true, dy, x, w, r2, dw1, res);
    at::Tensor dx2 = (rmsnorm_backward_reference(dy, x, w, r2, dw2) + res).to(dt);
    EXPECT_LE(max_rel(dx1, dx2), dt == at::kFloat ? 1e-5 : 2e-2) << c10::toString(dt);
    EXPECT_LE(max_rel(dw1, dw2), 1e-5);
  }
}

// Qwen3's q/k norms + rotation in one pass: bit for bit what the fused norm and rotation kernels give one
// after the other (the same rounding points), and the device-generic composition's values to rounding;
// forward and backward, fp32 and bf16, head sizes on and off the norm's 16-wide blocks.
TEST(Kernels, QkNormRopeIsTheNormThenTheRotation) {
  at::manual_seed(21);
  for (auto dt : {at::kFloat, at::kBFloat16})
    for (int64_t d : {18, 32, 64}) {
      const int64_t B = 2, T = 5, H = 4, K = 2, N = B * T, half = d / 2;
      SCOPED_TRACE(std::string(c10::toString(dt)) + " d=" + std::to_string(d));
      const at::Tensor qkv = (at::randn({N, (H + 2 * K) * d}) * 2).to(dt);
      const at::Tensor wq = (at::rand({d}) + 0.5).to(dt), wk = (at::rand({d}) + 0.5).to(dt);
      const at::Tensor ang = at::arange(T, at::kFloat).unsqueeze(1) * at::rand({1, half});
      const at::Tensor cos = ang.cos(), sin = ang.sin();
      const at::Tensor dout = at::randn({N, (H + 2 * K) * d}).to(dt);

      struct Out {
        at::Tensor qkv, q_pre, k_pre, rq, rk, dqkv, dwq, dwk;
      };
      // mode 0: the one-pass kernel; 1: the fused kernels one after the other; 2: the device-generic path.
      auto pass = [&](int mode) {
        Out o;
        o.qkv = qkv.clone();
        o.dqkv = dout.clone();
        o.dwq = at::zeros({d});
        o.dwk = at::zeros({d});
        if (mode == 1) {
          for (int part = 0; part < 2; ++part) {
            const int64_t heads = part == 0 ? H : K;
            at::Tensor cols = o.qkv.narrow(1, part == 0 ? 0 : H * d, heads * d);
            at::Tensor in = cols.reshape({N * heads, d}).contiguous();
            cols.copy_(kernels::rmsnorm_forward(true, in, part == 0 ? wq : wk, 1e-6, part == 0 ? &o.rq : &o.rk)
                           .view({N, heads * d}));
            (part == 0 ? o.q_pre : o.k_pre) = in;
          }
          kernels::rope_qkv(true, o.qkv, cos, sin, B, T, H, K, d, false);
          kernels::rope_qkv(true, o.dqkv, cos, sin, B, T, H, K, d, true);
          for (int part = 0; part < 2; ++part) {
            const int64_t heads = part == 0 ? H : K;
            at::Tensor cols = o.dqkv.narrow(1, part == 0 ? 0 : H * d, heads * d);
            cols.copy_(kernels::rmsnorm_backward(true, cols.reshape({N * heads, d}).contiguous(),
                                                 part == 0 ? o.q_pre : o.k_pre, part == 0 ? wq : wk,
                                                 part == 0 ? o.rq : o.rk, part == 0 ? o.dwq : o.dwk, at::Tensor())
                           .view({N, heads * d}));
          }
        } else {
          kernels::qk_norm_rope(mode == 0, o.qkv, wq, wk, 1e-6, cos, sin, B, T, H, K, d, &o.q_pre, &o.k_pre, &o.rq, &o.rk);
          kernels::qk_norm_rope_backward(mode == 0, o.dqkv, wq, wk, cos, sin, B, T, H, K, d, o.q_pre, o.k_pre, o.rq, o.rk,
                                         o.dwq, o.dwk);
        }
        return o;
      };
      const Out one = pass(0), two = pass(1), generic = pass(2);
      EXPECT_TRUE(at::equal(one.qkv, two.qkv));
      EXPECT_TRUE(at::equal(one.q_pre, two.q_pre) && at::equal(one.k_pre, two.k_pre));
      EXPECT_TRUE(at::equal(one.rq, two.rq) && at::equal(one.rk, two.rk));
      EXPECT_TRUE(at::equal(one.dqkv, two.dqkv));
      EXPECT_LE(max_rel(one.dwq, two.dwq), 1e-6);  // summed over rows in other blocks
      EXPECT_LE(max_rel(one.dwk, two.dwk), 1e-6);
      const double tol = dt == at::kFloat ? 2e-6 : 1e-2;
      EXPECT_LE(max_rel(one.qkv, generic.qkv), tol);
      EXPECT_LE(max_rel(one.dqkv, generic.dqkv), dt == at::kFloat ? 1e-5 : 2e-2);
      EXPECT_LE(max_rel(one.dwq, generic.dwq), 1e-5);
      EXPECT_LE(max_rel(one.dwk, generic.dwk), 1e-5);
      // The value heads are left alone by both.
      EXPECT_TRUE(at::equal(one.qkv.narrow(1, (H + K) * d, K * d), qkv.narrow(1, (H + K) * d, K * d)));
      EXPECT_TRUE(at::equal(one.dqkv.narrow(1, (H + K) * d, K * d), dout.narrow(1, (H + K) * d, K * d)));
    }
}

// One vocabulary chunk of the head's online softmax against the formula, two chunks in a row (the second
// rescales the first's sum). Each row's largest logit is far above the rest (80 against [-3, 3]) and sits at
// a different column, in the vector body and in the tail of rows of every width around the 16-wide blocks:
// a maximum that missed any column would be wrong exactly, and exp(z - m) would overflow.
TEST(Kernels, HeadSoftmaxChunkMatchesTheFormula) {
  at::manual_seed(11);
  for (auto dt : {at::kFloat, at::kBFloat16})
    for (int64_t C : {1, 7, 15, 16, 17, 31, 40, 100, 511, 512, 513, 1040, 1111}) {  // and around its 512 blocks
      const int64_t N = 9;
      auto chunk = [&](int64_t peak_row_offset) {
        at::Tensor z = at::rand({N, C}).mul_(6).sub_(3);
        for (int64_t n = 0; n < N; ++n) z[n][(n + peak_row_offset) % C] = 80.0 - n;
        return z.to(dt);
      };
      const at::Tensor z1 = chunk(0), z2 = chunk(C / 2 + 1);
      at::Tensor m = at::full({N}, -std::numeric_limits<float>::infinity()), se = at::zeros({N}),
                 rescale = at::empty({N}), zt = at::zeros({N}), p;
      const at::Tensor target = at::arange(N, at::kLong).remainder(C + 1);  // some rows' target lies outside
      kernels::online_softmax_chunk(true, z1, m, se, rescale, p, target, zt);
      const at::Tensor z1d = z1.to(at::kDouble), m1 = z1d.amax(1);
      EXPECT_TRUE(at::equal(m.to(at::kDouble), m1)) << c10::toString(dt) << " C=" << C;
      const at::Tensor p1 = (z1d - m1.unsqueeze(1)).exp();
      EXPECT_LE(max_rel(p.narrow(0, 0, N * C).view({N, C}), p1), dt == at::kFloat ? 1e-6 : 4e-3) << C;
      EXPECT_LE(max_rel(se, p1.sum(1)), 1e-6) << c10::toString(dt) << " C=" << C;
      kernels::online_softmax_chunk(true, z2, m, se, rescale, p, target, zt);
      const at::Tensor z2d = z2.to(at::kDouble), m2 = at::maximum(m1, z2d.amax(1));
      EXPECT_TRUE(at::equal(m.to(at::kDouble), m2)) << c10::toString(dt) << " C=" << C;
      EXPECT_LE(max_rel(rescale, (m1 - m2).exp()), 1e-6) << C;
      const at::Tensor se2 = p1.sum(1) * (m1 - m2).exp() + (z2d - m2.unsqueeze(1)).exp().sum(1);
      EXPECT_LE(max_rel(se, se2), 1e-6) << c10::toString(dt) << " C=" << C;
      const at::Tensor in = target.lt(C), t = target.clamp_max(C - 1).unsqueeze(1);
      const at::Tensor zt_want = at::where(in, z1d.gather(1, t).squeeze(1) + z2d.gather(1, t).squeeze(1), 0.0);
      EXPECT_LE(max_rel(zt, zt_want), 1e-6) << C;
    }
  // A NaN logit makes its row's sum NaN (the loss's non-finite check depends on it), whichever column it is in.
  for (int64_t col : {0, 5, 16, 18, 530, 600}) {
    at::Tensor z = at::randn({2, col < 19 ? 19 : 611});
    z[1][col] = std::numeric_limits<float>::quiet_NaN();
    at::Tensor m = at::full({2}, -std::numeric_limits<float>::infinity()), se = at::zeros({2}),
               rescale = at::empty({2}), zt = at::zeros({2}), p;
    kernels::online_softmax_chunk(true, z, m, se, rescale, p, at::full({2}, -1, at::kLong), zt);
    EXPECT_TRUE(std::isfinite(se[0].item<float>())) << col;
    EXPECT_TRUE(std::isnan(se[1].item<float>())) << col;
  }
}

// The accumulate-into-a-column-slice form the LoRA B GEMMs use: only the slice changes.
TEST(Kernels, Qwen3_5ConvSiluMatchesTheAtenPath) {
  // Qwen3.5's causal depthwise convolution + SiLU, on column slices of a wider projection output (the layer's
  // q|k|v columns), two sequences (no tap may cross into the previous one), channels past one 256-wide block,
  // and sequences shorter than the kernel. fp32 to rounding; bf16 to one ulp of the rounded pre-activation.
  for (auto dt : {at::kFloat, at::kBFloat16})
    for (auto [B, T, C] : {std::tuple{2, 37, 300}, std::tuple{1, 3, 40}, std::tuple{3, 1, 17}}) {
      SCOPED_TRACE(std::string(dt == at::kFloat ? "fp32" : "bf16") + " B " + std::to_string(B) + " T " +
                   std::to_string(T) + " C " + std::to_string(C));
      at::manual_seed(B * 100 + T);
      const int64_t K = 4, N = B * T;
      at::Tensor wide = at::randn({N, C + 9}).to(dt);
      at::Tensor x = wide.narrow(1, 3, C);
      at::Tensor w = (at::randn({C, K}) * 0.5).to(dt);
      at::Tensor dy = at::randn({N, C}).to(dt);
      const double tol = dt == at::kFloat ? 1e-5 : 1.6e-2;
      EXPECT_LE(max_rel(qwen3_5::conv_silu_forward(true, x, w, B, T), qwen3_5::conv_silu_forward(false, x, w, B, T)),
                tol);
      at::Tensor dw1 = at::zeros({C, K}), dw2 = at::zeros({C, K});
      at::Tensor dx1 = qwen3_5::conv_silu_backward(true, dy, x, w, B, T, dw1);
      at::Tensor dx2 = qwen3_5::conv_silu_backward(false, dy, x, w, B, T, dw2);
      EXPECT_LE(max_rel(dx1, dx2), tol);
      EXPECT_LE(max_rel(dw1, dw2), dt == at::kFloat ? 1e-5 : 2e-2);
      EXPECT_GT(dw2.abs().max().item<double>(), 0.1);  // the comparison can fail
      // The sequence boundary: token 0 of the second sequence sees only its own tap.
      if (B > 1 && T > 1) {
        at::Tensor lone = x.narrow(0, T, 1).to(at::kFloat) * w.select(1, K - 1).to(at::kFloat);
        lone = lone.to(dt).to(at::kFloat);
        EXPECT_LE(max_rel(qwen3_5::conv_silu_forward(true, x, w, B, T).narrow(0, T, 1), at::silu(lone).to(dt)), tol);
      }
    }
}

TEST(Kernels, Qwen3_5NormsMatchTheAtenPath) {
  // The zero-centred RMSNorm (layer norms, per-head q/k norms) with the residual and the weight gradient, and
  // the linear layers' gated norm with dz: rows of 1024 (a residual stream), 128 (a head) and 37 (a tail past
  // the 16-lane sums). fp32 to rounding, bf16 to one or two ulps at the same rounding points.
  for (auto dt : {at::kFloat, at::kBFloat16})
    for (int64_t D : {1024, 128, 37}) {
      SCOPED_TRACE(std::string(dt == at::kFloat ? "fp32" : "bf16") + " D " + std::to_string(D));
      at::manual_seed(D);
      const int64_t N = 300;
      at::Tensor x = at::randn({N, D}).to(dt), z = at::randn({N, D}).mul(2).to(dt), dy = at::randn({N, D}).to(dt);
      at::Tensor res = at::randn({N, D}).to(dt), w = at::randn({D}).mul(0.3).to(dt);
      const double tol = dt == at::kFloat ? 1e-5 : 1.6e-2;
      at::Tensor r1, r2;
      EXPECT_LE(max_rel(qwen3_5::zc_rmsnorm_forward(true, x, w, 1e-6, &r1), qwen3_5::zc_rmsnorm_forward(false, x, w, 1e-6, &r2)),
                tol);
      EXPECT_LE(max_rel(r1, r2), 1e-6);
      at::Tensor dw1 = at::zeros({D}), dw2 = at::zeros({D});
      EXPECT_LE(max_rel(qwen3_5::zc_rmsnorm_backward(true, dy, x, w, r2, dw1, res),
                        qwen3_5::zc_rmsnorm_backward(false, dy, x, w, r2, dw2, res)),
                tol);
      EXPECT_LE(max_rel(dw1, dw2), 1e-5);
      EXPECT_LE(max_rel(qwen3_5::gated_norm_forward(true, x, z, w, 1e-6, &r1),
                        qwen3_5::gated_norm_forward(false, x, z, w, 1e-6, &r2)),
                tol);
      at::Tensor dz1, dz2;
      dw1.zero_();
      dw2.zero_();
      EXPECT_LE(max_rel(qwen3_5::gated_norm_backward(true, dy, x, z, w, r2, &dz1, dw1),
                        qwen3_5::gated_norm_backward(false, dy, x, z, w, r2, &dz2, dw2)),
                tol);
      EXPECT_LE(max_rel(dz1, dz2), tol);
      EXPECT_LE(max_rel(dw1, dw2), dt == at::kFloat ? 1e-5 : 1e-4);
      EXPECT_GT(dw2.abs().max().item<double>(), 1.0);  // the comparisons can fail
    }
}

TEST(Gemm, IntoAColumnSliceLeavesTheRestAlone) {
  at::manual_seed(9);
  at::Tensor a = at::randn({33, 47}), b = at::randn({47, 29}), wide = at::randn({33, 50});
  at::Tensor w = wide.clone();
  at::Tensor slice = w.narrow(1, 7, 29);
  gemm_into(slice, a, b, 0.5, 1.0);
  EXPECT_LE(max_rel(w.narrow(1, 7, 29), wide.narrow(1, 7, 29) + 0.5 * at::mm(a, b)), 1e-6);
  EXPECT_TRUE(at::equal(w.narrow(1, 0, 7), wide.narrow(1, 0, 7))) << "columns before the slice changed";
  EXPECT_TRUE(at::equal(w.narrow(1, 36, 14), wide.narrow(1, 36, 14))) << "columns after the slice changed";
}

// bf16 through fp32 (the route on CPUs without AVX-512) against libtorch's own bf16 GEMM, both routes taken
// on whatever CPU runs the test (small shapes: libtorch's reference loops are slow, not wrong): the same
// dtype out, each element within one bf16 rounding (2^-8 relative) of the other route's, for the plain
// product, the accumulate-into-a-column-slice form (nothing outside the slice touched) and the biased form;
// and fp32 tensors are the same on both routes.
TEST(Gemm, Bf16ThroughFp32MatchesLibtorchsBf16Gemm) {
  at::manual_seed(11);
  const auto native = CpuBf16Gemm::kNative, wide = CpuBf16Gemm::kViaFp32;
  at::Tensor a = at::randn({37, 64}).to(at::kBFloat16), b = at::randn({29, 64}).to(at::kBFloat16).t();
  at::Tensor bias = at::randn({29}).to(at::kBFloat16);
  // Each element's error bound: one rounding of the result plus fp32 summation-order noise, against |a||b|.
  const at::Tensor scale = at::mm(a.to(at::kFloat).abs(), b.to(at::kFloat).abs()) + 1e-3;
  auto close = [&](const at::Tensor& x, const at::Tensor& y) {
    EXPECT_EQ(x.scalar_type(), at::kBFloat16);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    return ((x.to(at::kFloat) - y.to(at::kFloat)).abs() / scale).max().item<double>();
  };
  EXPECT_LE(close(gemm(a, b, wide), gemm(a, b, native)), 1.0 / 128);
  const at::Tensor exact = at::mm(a.to(at::kFloat), b.to(at::kFloat));
  EXPECT_LE(((gemm(a, b, wide).to(at::kFloat) - exact).abs() / scale).max().item<double>(), 1.0 / 256)
      << "not one rounding of the fp32 product";
  EXPECT_LE(close(gemm_bias(bias, a, b, wide), gemm_bias(bias, a, b, native)), 1.0 / 128);
  for (double beta : {0.0, 1.0}) {
    const at::Tensor wide0 = at::randn({37, 40}).to(at::kBFloat16);
    at::Tensor w1 = wide0.clone(), w2 = wide0.clone();
    at::Tensor s1 = w1.narrow(1, 5, 29), s2 = w2.narrow(1, 5, 29);
    gemm_into(s1, a, b, 0.5, beta, wide);
    gemm_into(s2, a, b, 0.5, beta, native);
    EXPECT_LE(close(s1, s2), 1.0 / 64) << "beta " << beta;
    EXPECT_TRUE(at::equal(w1.narrow(1, 0, 5), wide0.narrow(1, 0, 5))) << "columns before the slice changed";
    EXPECT_TRUE(at::equal(w1.narrow(1, 34, 6), wide0.narrow(1, 34, 6))) << "columns after the slice changed";
  }
  // Shapes the fp32 route widens a block of b at a time (gemm.cpp, mm_widened): a wide transposed weight
  // (N >= 4K, several blocks of rows) and a tall row-major b (K >= 4N, several blocks of K).
  for (auto [m, k, n, transposed] : {std::tuple<int64_t, int64_t, int64_t, bool>{5, 64, 9000, true},
                                     std::tuple<int64_t, int64_t, int64_t, bool>{5, 70000, 16, false}}) {
    at::Tensor x = at::randn({m, k}).to(at::kBFloat16);
    at::Tensor w = transposed ? at::randn({n, k}).to(at::kBFloat16).t() : at::randn({k, n}).to(at::kBFloat16);
    const at::Tensor want = at::mm(x.to(at::kFloat), w.to(at::kFloat));
    const at::Tensor sc = at::mm(x.to(at::kFloat).abs(), w.to(at::kFloat).abs()) + 1e-3;
    EXPECT_LE(((gemm(x, w, wide).to(at::kFloat) - want).abs() / sc).max().item<double>(), 1.0 / 256)
        << m << "x" << k << "x" << n;
    at::Tensor acc = at::randn({m, n}).to(at::kBFloat16);
    const at::Tensor acc_want = acc.to(at::kFloat) - 2 * want;
    gemm_into(acc, x, w, -2.0, 1.0, wide);
    EXPECT_LE(((acc.to(at::kFloat) - acc_want).abs() / (2 * sc + acc_want.abs())).max().item<double>(), 1.0 / 128)
        << "into, " << m << "x" << k << "x" << n;
  }
  const at::Tensor af = at::randn({8, 16}), bf = at::randn({16, 4});
  EXPECT_TRUE(at::equal(gemm(af, bf, wide), at::mm(af, bf)));
  // The route this CPU takes is the one its features call for.
  EXPECT_EQ(cpu_bf16_gemm(), lorabench::cpu_isa() == lorabench::Isa::kAvx512 ? native : wide);
}

// Causal grouped-query attention against the formula in fp64 (probabilities materialised), for each kernel
// a CPU runs it with: libtorch's flash kernel (fp32 and bf16) and lorabench's blocked bf16 kernel, with the
// reference block product (every CPU) and with brgemm (CPUs with AVX-512 BF16; its own test below).
enum class CpuKernel { kFlash, kBlockedReference, kBlockedBrgemm };
const char* name_of(CpuKernel k) {
  return k == CpuKernel::kFlash ? "flash" : k == CpuKernel::kBlockedReference ? "blocked/reference" : "blocked/brgemm";
}

struct AttentionRun {
  at::Tensor out, lse, dqkv;
};
AttentionRun run_attention(CpuKernel k, const at::Tensor& qkv, const at::Tensor& dout, int64_t B, int64_t T, int64_t H,
                           int64_t K, int64_t d) {
  AttentionRun r;
  if (k == CpuKernel::kFlash) {
    KernelOptions flash;
    flash.cpu_attention = CpuAttention::kFlash;
    r.out = attention_forward(flash, qkv, B, T, H, K, d, &r.lse);
    r.dqkv = attention_backward(flash, dout, qkv, r.out, r.lse, B, T, H, K, d);
    return r;
  }
  const auto g =
      k == CpuKernel::kBlockedBrgemm ? cpu_attention::BlockGemm::kBrgemm : cpu_attention::BlockGemm::kReference;
  r.out = cpu_attention::forward(qkv, B, T, H, K, d, &r.lse, g);
  r.dqkv = cpu_attention::backward(dout, qkv, r.out, r.lse, B, T, H, K, d, g);
  return r;
}

// The formula in fp64 from the same (rounded) inputs: out (N, H d), lse (B, H, T), d(qkv).
AttentionRun fp64_attention(const at::Tensor& qkv_in, const at::Tensor& dout_in, int64_t B, int64_t T, int64_t H,
                            int64_t K, int64_t d) {
  const int64_t N = B * T;
  const at::Tensor x = qkv_in.to(at::kDouble).view({B, T, H + 2 * K, d});
  const at::Tensor q = x.narrow(2, 0, H).transpose(1, 2);
  const at::Tensor k = x.narrow(2, H, K).transpose(1, 2).repeat_interleave(H / K, 1);
  const at::Tensor v = x.narrow(2, H + K, K).transpose(1, 2).repeat_interleave(H / K, 1);
  const at::Tensor dO = dout_in.to(at::kDouble).view({B, T, H, d}).transpose(1, 2);
  const double scale = 1.0 / std::sqrt(double(d));
  const at::Tensor causal = at::ones({T, T}, at::kBool).tril();
  const at::Tensor Sc = (at::matmul(q, k.transpose(-1, -2)) * scale).masked_fill(~causal, -INFINITY);
  const at::Tensor P = Sc.softmax(-1);
  const at::Tensor dP = at::matmul(dO, v.transpose(-1, -2));
  const at::Tensor dS = P * (dP - (dP * P).sum(-1, true));
  const at::Tensor dq = at::matmul(dS, k) * scale;
  const at::Tensor dk = (at::matmul(dS.transpose(-1, -2), q) * scale).view({B, K, H / K, T, d}).sum(2);
  const at::Tensor dv = at::matmul(P.transpose(-1, -2), dO).view({B, K, H / K, T, d}).sum(2);
  return {at::matmul(P, v).transpose(1, 2).reshape({N, H * d}), Sc.logsumexp(-1),
          at::cat({dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)}, 2).reshape({N, (H + 2 * K) * d})};
}

// out, lse and dq, dk, dv against the fp64 formula: each within tol (out: out_tol) of its largest value; lse
// absolutely.
void expect_attention_matches(CpuKernel kern, at::ScalarType dt, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d,
                              double tol, double out_tol) {
  SCOPED_TRACE(std::string(name_of(kern)) + " " + c10::toString(dt) + " B=" + std::to_string(B) + " T=" +
               std::to_string(T) + " H=" + std::to_string(H) + " K=" + std::to_string(K) + " d=" + std::to_string(d));
  const int64_t N = B * T;
  at::manual_seed(0);
  const at::Tensor qkv = at::randn({N, (H + 2 * K) * d}, at::kDouble).to(dt);
  const at::Tensor dout = at::randn({N, H * d}, at::kDouble).to(dt);
  const AttentionRun got = run_attention(kern, qkv, dout, B, T, H, K, d);
  ASSERT_EQ(got.out.scalar_type(), dt);
  ASSERT_EQ(got.dqkv.scalar_type(), dt);
  // The gradients from the outputs this kernel gave (the backward reads them, as in training).
  const AttentionRun want = fp64_attention(qkv, dout, B, T, H, K, d);
  EXPECT_LE(max_rel(got.out.to(at::kDouble), want.out), out_tol) << "out";
  // (libtorch's bf16 flash kernel gives its log-sum-exp to 6e-5)
  EXPECT_LE((got.lse.to(at::kDouble).view({B, H, T}) - want.lse).abs().max().item<double>(),
            dt == at::kFloat ? 1e-5 : 1e-4)
      << "lse";
  const char* names[] = {"dq", "dk", "dv"};
  const int64_t widths[] = {H * d, K * d, K * d};
  int64_t c0 = 0;
  for (int i = 0; i < 3; ++i) {
    const at::Tensor g = got.dqkv.narrow(1, c0, widths[i]).to(at::kDouble), w = want.dqkv.narrow(1, c0, widths[i]);
    // (with one key, dq and dk are zero: then the error is taken against 1e-3)
    EXPECT_LE((g - w).abs().max().item<double>() / std::max(w.abs().max().item<double>(), 1e-3), tol) << names[i];
    c0 += widths[i];
  }
}

// The 0.5B shape: fp32 to rounding, and bf16 within 4e-3 of each gradient's largest value. The bf16 bound is
// what computing in fp32 and rounding the results once gives (measured 2.5e-3..3.1e-3 on this shape);
// libtorch's bf16 CPU kernel, which attention_backward used before, was 5e-3..1.4e-2 off. The output in bf16
// within 2 bf16 ulps of its largest value.
TEST(Attention, BackwardMatchesTheFp64Formula) {
  expect_attention_matches(CpuKernel::kFlash, at::kFloat, 1, 256, 14, 2, 64, 2e-5, 2e-6);
  for (CpuKernel k : {CpuKernel::kFlash, CpuKernel::kBlockedReference})
    expect_attention_matches(k, at::kBFloat16, 1, 256, 14, 2, 64, 4e-3, 1.0 / 128);
}

// The blocked kernel's edges with the reference block product (so on every CPU): a sequence that is not a
// multiple of the 32-row block and odd (the last block's keys padded to an even count), two batch rows,
// plain multi-head attention (K = H) and one key/value head for all.
TEST(Attention, BlockedKernelEdges) {
  for (auto [B, T, H, K, d] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{2, 77, 4, 2, 16},
                               {1, 33, 3, 3, 8},
                               {2, 1, 2, 1, 16},
                               {1, 64, 6, 1, 32}})
    expect_attention_matches(CpuKernel::kBlockedReference, at::kBFloat16, B, T, H, K, d, 4e-3, 1.0 / 128);
}

// The same with brgemm's bf16 route, where the CPU has it, and against the reference block product.
TEST(Attention, BlockedKernelWithBrgemm) {
  if (!cpu_blocked_attention_available())
    GTEST_SKIP() << "this CPU has no AVX-512 BF16 (or libtorch no brgemm for it): the blocked kernel runs with the "
                    "reference block product only (BlockedKernelEdges)";
  expect_attention_matches(CpuKernel::kBlockedBrgemm, at::kBFloat16, 1, 256, 14, 2, 64, 4e-3, 1.0 / 128);
  for (auto [B, T, H, K, d] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{2, 77, 4, 2, 16},
                               {1, 33, 3, 3, 8},
                               {2, 1, 2, 1, 16},
                               {1, 64, 6, 1, 32}}) {
    expect_attention_matches(CpuKernel::kBlockedBrgemm, at::kBFloat16, B, T, H, K, d, 4e-3, 1.0 / 128);
    // Both block products see the same operands: the results differ by accumulation order only.
    at::manual_seed(1);
    const at::Tensor qkv = at::randn({B * T, (H + 2 * K) * d}).to(at::kBFloat16);
    const at::Tensor dout = at::randn({B * T, H * d}).to(at::kBFloat16);
    const AttentionRun a = run_attention(CpuKernel::kBlockedBrgemm, qkv, dout, B, T, H, K, d);
    const AttentionRun r = run_attention(CpuKernel::kBlockedReference, qkv, dout, B, T, H, K, d);
    EXPECT_LE(max_rel(a.out, r.out), 1.0 / 128);
    EXPECT_LE((a.lse - r.lse).abs().max().item<double>(), 1e-5);
    EXPECT_LE(max_rel(a.dqkv, r.dqkv), 1.0 / 128);
  }
}

// model.cpu_attention: auto takes the blocked kernel for bf16 exactly where brgemm has its bf16 route, and
// libtorch's flash kernel for fp32; blocked is refused for fp32, and where the CPU cannot run it.
TEST(Attention, CpuKernelChoice) {
  const bool blocked = cpu_blocked_attention_available();
  KernelOptions k;
  EXPECT_EQ(attention_kernel(k, false, true), blocked ? "cpu_blocked" : "cpu_flash");
  EXPECT_EQ(attention_kernel(k, false, false), "cpu_flash");
  k.cpu_attention = CpuAttention::kFlash;
  EXPECT_EQ(attention_kernel(k, false, true), "cpu_flash");
  k.cpu_attention = CpuAttention::kBlocked;
  EXPECT_THROW(attention_kernel(k, false, false), lorabench::Error);
  if (blocked)
    EXPECT_EQ(attention_kernel(k, false, true), "cpu_blocked");
  else
    EXPECT_THROW(attention_kernel(k, false, true), lorabench::Error);
  EXPECT_EQ(parse_cpu_attention("blocked"), CpuAttention::kBlocked);
  EXPECT_THROW(parse_cpu_attention("fast"), lorabench::Error);
}
