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
#include "../../src/model/kernels.hpp"
#include "lorabench/core/cpu_isa.hpp"
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
    EXPECT_LE(max_rel(kernels::swiglu_forward(gu), swiglu_ref(gu)), tol) << c10::toString(dt);
    EXPECT_LE(max_rel(kernels::swiglu_backward(gu, da), swiglu_back_ref(gu, da)), tol) << c10::toString(dt);
  }
}

TEST(Kernels, SwigluExtremesAndNan) {
  at::Tensor gu = at::tensor({-200.f, -30.f, 0.f, 30.f, 200.f, NAN, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f}).view({1, 12});
  at::Tensor a = kernels::swiglu_forward(gu);
  EXPECT_NEAR(a[0][0].item<float>(), 0.f, 1e-23);   // silu(-200) = -200 e^-200; the kernel floors sigmoid at 8.8e-27
  EXPECT_NEAR(a[0][3].item<float>(), 30.f, 1e-4);   // silu(30) ~ 30
  EXPECT_NEAR(a[0][4].item<float>(), 200.f, 1e-3);
  EXPECT_TRUE(std::isnan(a[0][5].item<float>())) << "a NaN must stay a NaN";
  at::Tensor d = kernels::swiglu_backward(gu, at::ones({1, 6}));
  EXPECT_TRUE(std::isnan(d[0][5].item<float>()));
  EXPECT_TRUE(at::isfinite(d.narrow(1, 0, 5)).all().item<bool>());
  at::Tensor bf = kernels::swiglu_forward(gu.to(at::kBFloat16));
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
    at::Tensor a = kernels::swiglu_forward(gu);
    at::Tensor dgu = kernels::swiglu_backward(gu, da);
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
    at::Tensor y1 = kernels::rmsnorm_forward(x, w, 1e-6, &r1);
    at::Tensor y2 = rmsnorm_forward_reference(x, w, 1e-6, &r2);
    const double tol = dt == at::kFloat ? 2e-6 : 1e-2;
    EXPECT_LE(max_rel(y1, y2), tol);
    EXPECT_LE(max_rel(r1, r2), 2e-6);
    at::Tensor dw1 = at::zeros({77}), dw2 = at::zeros({77});
    at::Tensor dx1 = kernels::rmsnorm_backward(dy, x, w, r2, dw1, res);
    at::Tensor dx2 = (rmsnorm_backward_reference(dy, x, w, r2, dw2) + res).to(dt);
    EXPECT_LE(max_rel(dx1, dx2), dt == at::kFloat ? 1e-5 : 2e-2) << c10::toString(dt);
    EXPECT_LE(max_rel(dw1, dw2), 1e-5);
  }
}

// The accumulate-into-a-column-slice form the LoRA B GEMMs use: only the slice changes.
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

// Causal grouped-query attention's backward against the formula in fp64 (probabilities materialised):
// fp32 to rounding, and bf16 within 4e-3 of each gradient's largest value. The bf16 bound is what computing
// in fp32 and rounding the results once gives (measured 2.5e-3..3.1e-3 on this shape); libtorch's bf16
// CPU kernel, which attention_backward used before, was 5e-3..1.4e-2 off.
TEST(Attention, BackwardMatchesTheFp64Formula) {
  const int64_t B = 1, T = 256, H = 14, K = 2, d = 64, N = B * T;
  at::manual_seed(0);
  const at::Tensor qkv64 = at::randn({N, (H + 2 * K) * d}, at::kDouble);
  const at::Tensor dout64 = at::randn({N, H * d}, at::kDouble);
  // The reference, from the same (rounded) inputs.
  auto reference = [&](const at::Tensor& qkv_in, const at::Tensor& dout_in) {
    const at::Tensor x = qkv_in.to(at::kDouble).view({B, T, H + 2 * K, d});
    const at::Tensor q = x.narrow(2, 0, H).transpose(1, 2);
    const at::Tensor k = x.narrow(2, H, K).transpose(1, 2).repeat_interleave(H / K, 1);
    const at::Tensor v = x.narrow(2, H + K, K).transpose(1, 2).repeat_interleave(H / K, 1);
    const at::Tensor dO = dout_in.to(at::kDouble).view({B, T, H, d}).transpose(1, 2);
    const double scale = 1.0 / std::sqrt(double(d));
    const at::Tensor causal = at::ones({T, T}, at::kBool).tril();
    const at::Tensor P = (at::matmul(q, k.transpose(-1, -2)) * scale).masked_fill(~causal, -INFINITY).softmax(-1);
    const at::Tensor dP = at::matmul(dO, v.transpose(-1, -2));
    const at::Tensor dS = P * (dP - (dP * P).sum(-1, true));
    const at::Tensor dq = at::matmul(dS, k) * scale;
    const at::Tensor dk = (at::matmul(dS.transpose(-1, -2), q) * scale).view({B, K, H / K, T, d}).sum(2);
    const at::Tensor dv = at::matmul(P.transpose(-1, -2), dO).view({B, K, H / K, T, d}).sum(2);
    return at::cat({dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)}, 2).reshape({N, (H + 2 * K) * d});
  };
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    const at::Tensor qkv = qkv64.to(dt), dout = dout64.to(dt);
    at::Tensor lse;
    const at::Tensor out = attention_forward(qkv, B, T, H, K, d, &lse);
    const at::Tensor got = attention_backward(dout, qkv, out, lse, B, T, H, K, d);
    ASSERT_EQ(got.scalar_type(), dt);
    const at::Tensor want = reference(qkv, dout);
    const double tol = dt == at::kFloat ? 2e-5 : 4e-3;
    const char* names[] = {"dq", "dk", "dv"};
    const int64_t widths[] = {H * d, K * d, K * d};
    int64_t c0 = 0;
    for (int i = 0; i < 3; ++i) {
      const at::Tensor g = got.narrow(1, c0, widths[i]).to(at::kDouble), w = want.narrow(1, c0, widths[i]);
      const double err = (g - w).abs().max().item<double>() / w.abs().max().item<double>();
      EXPECT_LE(err, tol) << names[i] << " " << c10::toString(dt);
      c0 += widths[i];
    }
  }
}
