// CPU kernels for Qwen3.5's elementwise parts (qwen3_5_ops.hpp), forward and backward, each at the ATen path's
// rounding points, one pass per row where the ATen composition makes one per operation and dtype conversion:
// - the causal depthwise convolution with its SiLU (the pre-activation rounded to the model dtype, then silu
//   rounded). Tasks are blocks of channels over every token, so one task sums a channel's weight gradient;
// - the zero-centred RMSNorm (x / rms(x) * (1 + w) in fp32, rounded once) and the linear layers' gated norm
//   (w * round(x / rms(x)), rounded, times silu(z), rounded). Rows are split over the threads; the weight
//   gradients are summed per fixed block of rows, then the blocks added up (independent of the thread count).
// Rows are vectorised (AVX-512, AVX2+FMA or baseline, chosen at run time).
#include "qwen3_5_ops.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "lorabench/core/error.hpp"
#include "profile_scope.hpp"
#include "simd_math.hpp"

namespace lorabench::model::qwen3_5::cpu {

namespace {

using namespace simd;

constexpr int64_t kBlock = 256;  // channels per task and per row call
constexpr int64_t kMaxTaps = 8;

// pre = sum_j w[j] x[j] over the taps that exist (taps[j] null before the sequence's start), rounded to T.
template <class T>
LB_INLINE void conv_pre(const T* const* taps, const float* w, int64_t ldw, int64_t K, float* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = 0.0f;
  for (int64_t j = 0; j < K; ++j) {
    const T* x = taps[j];
    if (!x) continue;
    const float* wj = w + j * ldw;
    for (int64_t i = 0; i < n; ++i) acc[i] += wj[i] * ld(x[i]);
  }
  for (int64_t i = 0; i < n; ++i) acc[i] = round_to<T>(acc[i]);
}

template <class T>
LB_INLINE void conv_silu_row(const T* const* taps, const float* w, int64_t ldw, int64_t K, T* y, int64_t n) {
  float acc[kBlock];
  conv_pre(taps, w, ldw, K, acc, n);
  for (int64_t i = 0; i < n; ++i) st(y + i, acc[i] * sigmoid(acc[i]));
}
LB_DEFINE_ROW(conv_silu_row_f32, conv_silu_row,
              (const float* const* taps, const float* w, int64_t ldw, int64_t K, float* y, int64_t n),
              (taps, w, ldw, K, y, n))
LB_DEFINE_ROW(conv_silu_row_bf16, conv_silu_row,
              (const uint16_t* const* taps, const float* w, int64_t ldw, int64_t K, uint16_t* y, int64_t n),
              (taps, w, ldw, K, y, n))

// dpre = dy * silu'(pre), silu'(x) = s (1 + x (1 - s)), in fp32.
template <class T>
LB_INLINE void conv_dpre_row(const T* const* taps, const float* w, int64_t ldw, int64_t K, const T* dy, float* dp,
                             int64_t n) {
  float acc[kBlock];
  conv_pre(taps, w, ldw, K, acc, n);
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(acc[i]);
    dp[i] = ld(dy[i]) * (s * (1.0f + acc[i] * (1.0f - s)));
  }
}
LB_DEFINE_ROW(conv_dpre_row_f32, conv_dpre_row,
              (const float* const* taps, const float* w, int64_t ldw, int64_t K, const float* dy, float* dp, int64_t n),
              (taps, w, ldw, K, dy, dp, n))
LB_DEFINE_ROW(conv_dpre_row_bf16, conv_dpre_row,
              (const uint16_t* const* taps, const float* w, int64_t ldw, int64_t K, const uint16_t* dy, float* dp,
               int64_t n),
              (taps, w, ldw, K, dy, dp, n))

// dx[t] = sum_j dpre[t + K-1-j] w[j] (the taps that exist: dps[j] null past the sequence's end), rounded to T;
// dw[j] += dpre[t + K-1-j] x[t].
template <class T>
LB_INLINE void conv_dx_row(const float* const* dps, const T* x, const float* w, int64_t ldw, int64_t K, T* dx,
                           float* dw, int64_t n) {
  float acc[kBlock];
  for (int64_t i = 0; i < n; ++i) acc[i] = 0.0f;
  for (int64_t j = 0; j < K; ++j) {
    const float* dp = dps[j];
    if (!dp) continue;
    const float* wj = w + j * ldw;
    float* dwj = dw + j * n;
    for (int64_t i = 0; i < n; ++i) {
      acc[i] += dp[i] * wj[i];
      dwj[i] += dp[i] * ld(x[i]);
    }
  }
  for (int64_t i = 0; i < n; ++i) st(dx + i, acc[i]);
}
LB_DEFINE_ROW(conv_dx_row_f32, conv_dx_row,
              (const float* const* dps, const float* x, const float* w, int64_t ldw, int64_t K, float* dx, float* dw,
               int64_t n),
              (dps, x, w, ldw, K, dx, dw, n))
LB_DEFINE_ROW(conv_dx_row_bf16, conv_dx_row,
              (const float* const* dps, const uint16_t* x, const float* w, int64_t ldw, int64_t K, uint16_t* dx,
               float* dw, int64_t n),
              (dps, x, w, ldw, K, dx, dw, n))

template <class T>
T* rows(const at::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

// ---- the norms --------------------------------------------------------------------------------------

// 1 / sqrt(mean(x^2) + eps) as the ATen path computes it (the sum times 1/n), with 16 partial sums.
template <class T>
LB_INLINE float rstd_of(const T* x, int64_t n, float eps) {
  float lanes[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) lanes[k] += ld(x[i + k]) * ld(x[i + k]);
  float ss = 0;
  for (; i < n; ++i) ss += ld(x[i]) * ld(x[i]);
  for (int k = 0; k < 16; ++k) ss += lanes[k];
  return 1.0f / std::sqrt(ss * (1.0f / float(n)) + eps);
}

// y = x r (1 + w), rounded once.
template <class T>
LB_INLINE void zc_rms_row(const T* x, const T* w, T* y, int64_t n, float eps, float* r_out) {
  const float r = rstd_of(x, n, eps);
  *r_out = r;
  for (int64_t i = 0; i < n; ++i) st(y + i, ld(x[i]) * r * (ld(w[i]) + 1.0f));
}
LB_DEFINE_ROW(zc_rms_row_f32, zc_rms_row, (const float* x, const float* w, float* y, int64_t n, float eps, float* r),
              (x, w, y, n, eps, r))
LB_DEFINE_ROW(zc_rms_row_bf16, zc_rms_row,
              (const uint16_t* x, const uint16_t* w, uint16_t* y, int64_t n, float eps, float* r), (x, w, y, n, eps, r))

// dx = r (dn - y mean(dn y)) (+ res), dn = dy (1 + w), y = x r, rounded once; dw += dy y.
template <class T>
LB_INLINE void zc_rms_back_row(const T* dy, const T* x, const T* w, float r, T* dx, const T* res, float* dw,
                               int64_t n) {
  float lanes[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) lanes[k] += ld(dy[i + k]) * (ld(w[i + k]) + 1.0f) * (ld(x[i + k]) * r);
  float dot = 0;
  for (; i < n; ++i) dot += ld(dy[i]) * (ld(w[i]) + 1.0f) * (ld(x[i]) * r);
  for (int k = 0; k < 16; ++k) dot += lanes[k];
  dot *= 1.0f / float(n);
  for (int64_t j = 0; j < n; ++j) {
    const float y = ld(x[j]) * r, g = ld(dy[j]);
    float v = (g * (ld(w[j]) + 1.0f) - y * dot) * r;
    if (res) v += ld(res[j]);
    st(dx + j, v);
    if (dw) dw[j] += g * y;
  }
}
LB_DEFINE_ROW(zc_rms_back_row_f32, zc_rms_back_row,
              (const float* dy, const float* x, const float* w, float r, float* dx, const float* res, float* dw,
               int64_t n),
              (dy, x, w, r, dx, res, dw, n))
LB_DEFINE_ROW(zc_rms_back_row_bf16, zc_rms_back_row,
              (const uint16_t* dy, const uint16_t* x, const uint16_t* w, float r, uint16_t* dx, const uint16_t* res,
               float* dw, int64_t n),
              (dy, x, w, r, dx, res, dw, n))

// y = round(round(w round(x r)) silu(z)).
template <class T>
LB_INLINE void gated_row(const T* x, const T* z, const T* w, T* y, int64_t n, float eps, float* r_out) {
  const float r = rstd_of(x, n, eps);
  if (r_out) *r_out = r;
  for (int64_t i = 0; i < n; ++i) {
    const float wn = round_to<T>(ld(w[i]) * round_to<T>(ld(x[i]) * r));
    const float zi = ld(z[i]);
    st(y + i, wn * (zi * sigmoid(zi)));
  }
}
LB_DEFINE_ROW(gated_row_f32, gated_row,
              (const float* x, const float* z, const float* w, float* y, int64_t n, float eps, float* r),
              (x, z, w, y, n, eps, r))
LB_DEFINE_ROW(gated_row_bf16, gated_row,
              (const uint16_t* x, const uint16_t* z, const uint16_t* w, uint16_t* y, int64_t n, float eps, float* r),
              (x, z, w, y, n, eps, r))

// With u = x r, s = sigmoid(z), e = dy silu(z): dz = round(dy round(w round(u)) s (1 + z (1 - s))),
// dx = round(r (e w - u mean(e w u))), dw += e round(u).
template <class T>
LB_INLINE void gated_back_row(const T* dy, const T* x, const T* z, const T* w, float r, T* dx, T* dz, float* dw,
                              int64_t n) {
  float lanes[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) {
      const float zi = ld(z[i + k]);
      lanes[k] += ld(dy[i + k]) * (zi * sigmoid(zi)) * ld(w[i + k]) * (ld(x[i + k]) * r);
    }
  float dot = 0;
  for (; i < n; ++i) {
    const float zi = ld(z[i]);
    dot += ld(dy[i]) * (zi * sigmoid(zi)) * ld(w[i]) * (ld(x[i]) * r);
  }
  for (int k = 0; k < 16; ++k) dot += lanes[k];
  dot *= 1.0f / float(n);
  for (int64_t j = 0; j < n; ++j) {
    const float u = ld(x[j]) * r, ur = round_to<T>(u), zj = ld(z[j]), s = sigmoid(zj), g = ld(dy[j]);
    const float wn = round_to<T>(ld(w[j]) * ur);
    st(dz + j, g * wn * (s * (1.0f + zj * (1.0f - s))));
    const float e = g * (zj * s);
    st(dx + j, (e * ld(w[j]) - u * dot) * r);
    if (dw) dw[j] += e * ur;
  }
}
LB_DEFINE_ROW(gated_back_row_f32, gated_back_row,
              (const float* dy, const float* x, const float* z, const float* w, float r, float* dx, float* dz,
               float* dw, int64_t n),
              (dy, x, z, w, r, dx, dz, dw, n))
LB_DEFINE_ROW(gated_back_row_bf16, gated_back_row,
              (const uint16_t* dy, const uint16_t* x, const uint16_t* z, const uint16_t* w, float r, uint16_t* dx,
               uint16_t* dz, float* dw, int64_t n),
              (dy, x, z, w, r, dx, dz, dw, n))

// A forward norm's outputs for the rows of x (N rows of D): y like x, rstd (N, 1) in fp32.
struct NormOut {
  int64_t D, N;
  at::Tensor y, r;
  float* rp;
  explicit NormOut(const at::Tensor& x)
      : D(x.size(-1)), N(x.numel() / D), y(at::empty_like(x)), r(at::empty({N, 1}, x.options().dtype(at::kFloat))),
        rp(r.data_ptr<float>()) {}
};

// Rows of a forward norm kernel: `row(n)` for every row n, split over the threads.
template <class Row>
void each_row(int64_t N, int64_t D, Row row) {
  at::parallel_for(0, N, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, D)), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) row(n);
  });
}

// Rows of a norm kernel's backward: `row(n, dw)` for every row n, dw the fp32 partial sum of the row's block (null without
// dw_acc); the partial sums added into dw_acc at the end.
template <class Row>
void norm_rows(int64_t N, int64_t D, const at::Tensor& dw_acc, Row row) {
  const int64_t g = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, D));  // rows per block
  const int64_t blocks = (N + g - 1) / g;
  at::Tensor partial = dw_acc.defined() ? at::zeros({blocks, D}, at::kFloat) : at::Tensor();
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      float* dw = partial.defined() ? partial.data_ptr<float>() + blk * D : nullptr;
      for (int64_t n = blk * g; n < std::min(N, (blk + 1) * g); ++n) row(n, dw);
    }
  });
  if (dw_acc.defined()) dw_acc.add_(partial.sum(0));
}

void check_rows(const at::Tensor& t, at::ScalarType dt, const char* what) {
  LB_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == dt &&
               (dt == at::kFloat || dt == at::kBFloat16),
           std::string("Qwen3.5 norm (CPU kernel): ") + what + " must be a contiguous fp32 or bf16 CPU tensor of x's dtype");
}

void check_conv(const at::Tensor& x, const at::Tensor& w, int64_t B, int64_t T) {
  LB_CHECK(x.device().is_cpu() && x.dim() == 2 && x.stride(1) == 1 && x.size(0) == B * T &&
               (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16),
           "conv_silu (CPU kernel): x must be (B*T, C) fp32 or bf16 rows on the CPU");
  LB_CHECK(w.dim() == 2 && w.size(0) == x.size(1) && w.size(1) <= kMaxTaps,
           "conv_silu (CPU kernel): w must be (C, K) with K <= 8");
}

// w (C, K) -> fp32 (K, C): each tap's weights contiguous over the channels.
at::Tensor taps_major(const at::Tensor& w) { return w.to(at::kFloat).t().contiguous(); }

template <class T, class Row>
void forward_typed(const at::Tensor& x, const at::Tensor& wt, int64_t B, int64_t T_, const at::Tensor& y, Row row) {
  const int64_t C = x.size(1), K = wt.size(0), ldx = x.stride(0);
  const T* xp = rows<T>(x);
  T* yp = rows<T>(y);
  const float* w = wt.data_ptr<float>();
  at::parallel_for(0, (C + kBlock - 1) / kBlock, 1, [&](int64_t begin, int64_t end) {
    const T* taps[kMaxTaps];
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t c0 = blk * kBlock, n = std::min(kBlock, C - c0);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T_; ++t) {
          for (int64_t j = 0; j < K; ++j) {
            const int64_t s = t - (K - 1) + j;
            taps[j] = s >= 0 ? xp + (b * T_ + s) * ldx + c0 : nullptr;
          }
          row(taps, w + c0, C, K, yp + (b * T_ + t) * C + c0, n);
        }
    }
  });
}

template <class T, class DpreRow, class DxRow>
void backward_typed(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& wt, int64_t B, int64_t T_,
                    const at::Tensor& dx, const at::Tensor& dw_acc, DpreRow dpre_row, DxRow dx_row) {
  const int64_t C = x.size(1), K = wt.size(0), ldx = x.stride(0), lddy = dy.stride(0);
  const T* xp = rows<T>(x);
  const T* dyp = rows<T>(dy);
  T* dxp = rows<T>(dx);
  const float* w = wt.data_ptr<float>();
  float* dwa = dw_acc.defined() ? dw_acc.data_ptr<float>() : nullptr;
  at::parallel_for(0, (C + kBlock - 1) / kBlock, 1, [&](int64_t begin, int64_t end) {
    // Scratch from ATen's allocator (counted with the step's other buffers): dpre of the block, its dw.
    at::Tensor scratch = at::empty({T_ * kBlock + K * kBlock}, at::kFloat);
    float* dp = scratch.data_ptr<float>();
    float* dw = dp + T_ * kBlock;
    const T* taps[kMaxTaps];
    const float* dps[kMaxTaps];
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t c0 = blk * kBlock, n = std::min(kBlock, C - c0);
      std::fill(dw, dw + K * kBlock, 0.0f);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t t = 0; t < T_; ++t) {
          for (int64_t j = 0; j < K; ++j) {
            const int64_t s = t - (K - 1) + j;
            taps[j] = s >= 0 ? xp + (b * T_ + s) * ldx + c0 : nullptr;
          }
          dpre_row(taps, w + c0, C, K, dyp + (b * T_ + t) * lddy + c0, dp + t * n, n);
        }
        for (int64_t t = 0; t < T_; ++t) {
          for (int64_t j = 0; j < K; ++j) {
            const int64_t s = t + (K - 1) - j;  // the output token that tap j of token t fed
            dps[j] = s < T_ ? dp + s * n : nullptr;
          }
          dx_row(dps, xp + (b * T_ + t) * ldx + c0, w + c0, C, K, dxp + (b * T_ + t) * C + c0, dw, n);
        }
      }
      if (dwa)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < K; ++j) dwa[(c0 + i) * K + j] += dw[j * n + i];
    }
  });
}

}  // namespace

at::Tensor zc_rmsnorm_forward(const at::Tensor& x_in, const at::Tensor& w_in, double eps, at::Tensor* rstd) {
  ProfileScope scope("lb::norm");
  const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const auto dt = x.scalar_type();
  check_rows(x, dt, "x");
  check_rows(w, dt, "the weight");
  NormOut o(x);
  const int64_t D = o.D;
  each_row(o.N, D, [&](int64_t n) {
    if (dt == at::kBFloat16)
      zc_rms_row_bf16(rows<uint16_t>(x) + n * D, rows<uint16_t>(w), rows<uint16_t>(o.y) + n * D, D, float(eps), o.rp + n);
    else
      zc_rms_row_f32(rows<float>(x) + n * D, rows<float>(w), rows<float>(o.y) + n * D, D, float(eps), o.rp + n);
  });
  if (rstd) *rstd = o.r;
  return o.y;
}

at::Tensor zc_rmsnorm_backward(const at::Tensor& dy_in, const at::Tensor& x_in, const at::Tensor& w_in,
                               const at::Tensor& rstd, const at::Tensor& dw_acc, const at::Tensor& residual_in) {
  ProfileScope scope("lb::norm");
  const at::Tensor x = x_in.contiguous(), w = w_in.contiguous(), dy = dy_in.contiguous();
  const at::Tensor res = residual_in.defined() ? residual_in.contiguous() : residual_in;
  const auto dt = x.scalar_type();
  check_rows(dy, dt, "dy");
  check_rows(w, dt, "the weight");
  if (res.defined()) check_rows(res, dt, "the residual");
  const int64_t D = x.size(-1), N = x.numel() / D;
  at::Tensor dx = at::empty_like(x);
  const at::Tensor r = rstd.contiguous();
  const float* rp = r.data_ptr<float>();
  norm_rows(N, D, dw_acc, [&](int64_t n, float* dw) {
    if (dt == at::kBFloat16)
      zc_rms_back_row_bf16(rows<uint16_t>(dy) + n * D, rows<uint16_t>(x) + n * D, rows<uint16_t>(w), rp[n],
                           rows<uint16_t>(dx) + n * D, res.defined() ? rows<uint16_t>(res) + n * D : nullptr, dw, D);
    else
      zc_rms_back_row_f32(rows<float>(dy) + n * D, rows<float>(x) + n * D, rows<float>(w), rp[n],
                          rows<float>(dx) + n * D, res.defined() ? rows<float>(res) + n * D : nullptr, dw, D);
  });
  return dx;
}

at::Tensor gated_norm_forward(const at::Tensor& core_in, const at::Tensor& z_in, const at::Tensor& w_in, double eps,
                              at::Tensor* rstd) {
  ProfileScope scope("lb::norm");
  const at::Tensor x = core_in.contiguous(), z = z_in.contiguous(), w = w_in.contiguous();
  const auto dt = x.scalar_type();
  check_rows(z, dt, "z");
  check_rows(w, dt, "the weight");
  NormOut o(x);
  const int64_t D = o.D;
  each_row(o.N, D, [&](int64_t n) {
    if (dt == at::kBFloat16)
      gated_row_bf16(rows<uint16_t>(x) + n * D, rows<uint16_t>(z) + n * D, rows<uint16_t>(w),
                     rows<uint16_t>(o.y) + n * D, D, float(eps), o.rp + n);
    else
      gated_row_f32(rows<float>(x) + n * D, rows<float>(z) + n * D, rows<float>(w), rows<float>(o.y) + n * D, D,
                    float(eps), o.rp + n);
  });
  if (rstd) *rstd = o.r;
  return o.y;
}

at::Tensor gated_norm_backward(const at::Tensor& dy_in, const at::Tensor& core_in, const at::Tensor& z_in,
                               const at::Tensor& w_in, const at::Tensor& rstd, at::Tensor* dz, const at::Tensor& dw_acc) {
  ProfileScope scope("lb::norm");
  const at::Tensor x = core_in.contiguous(), z = z_in.contiguous(), w = w_in.contiguous(), dy = dy_in.contiguous();
  const auto dt = x.scalar_type();
  check_rows(dy, dt, "dy");
  check_rows(z, dt, "z");
  check_rows(w, dt, "the weight");
  const int64_t D = x.size(-1), N = x.numel() / D;
  at::Tensor dx = at::empty_like(x);
  *dz = at::empty_like(z);
  const at::Tensor r = rstd.contiguous();
  const float* rp = r.data_ptr<float>();
  norm_rows(N, D, dw_acc, [&](int64_t n, float* dw) {
    if (dt == at::kBFloat16)
      gated_back_row_bf16(rows<uint16_t>(dy) + n * D, rows<uint16_t>(x) + n * D, rows<uint16_t>(z) + n * D,
                          rows<uint16_t>(w), rp[n], rows<uint16_t>(dx) + n * D, rows<uint16_t>(*dz) + n * D, dw, D);
    else
      gated_back_row_f32(rows<float>(dy) + n * D, rows<float>(x) + n * D, rows<float>(z) + n * D, rows<float>(w),
                         rp[n], rows<float>(dx) + n * D, rows<float>(*dz) + n * D, dw, D);
  });
  return dx;
}

at::Tensor conv_silu_forward(const at::Tensor& x, const at::Tensor& w, int64_t B, int64_t T) {
  ProfileScope scope("lb::conv");
  check_conv(x, w, B, T);
  at::Tensor y = at::empty({x.size(0), x.size(1)}, x.options());
  const at::Tensor wt = taps_major(w);
  if (x.scalar_type() == at::kBFloat16)
    forward_typed<uint16_t>(x, wt, B, T, y, conv_silu_row_bf16);
  else
    forward_typed<float>(x, wt, B, T, y, conv_silu_row_f32);
  return y;
}

at::Tensor conv_silu_backward(const at::Tensor& dy_in, const at::Tensor& x, const at::Tensor& w, int64_t B, int64_t T,
                              const at::Tensor& dw_acc) {
  ProfileScope scope("lb::conv");
  check_conv(x, w, B, T);
  const at::Tensor dy = dy_in.stride(1) == 1 && dy_in.scalar_type() == x.scalar_type() ? dy_in
                                                                                         : dy_in.to(x.scalar_type()).contiguous();
  LB_CHECK(dy.sizes() == x.sizes(), "conv_silu (CPU kernel): dy must have x's shape");
  LB_CHECK(!dw_acc.defined() || (dw_acc.scalar_type() == at::kFloat && dw_acc.is_contiguous() &&
                                 dw_acc.sizes() == w.sizes()),
           "conv_silu (CPU kernel): the weight gradient must be a contiguous fp32 (C, K) tensor");
  at::Tensor dx = at::empty({x.size(0), x.size(1)}, x.options());
  const at::Tensor wt = taps_major(w);
  if (x.scalar_type() == at::kBFloat16)
    backward_typed<uint16_t>(dy, x, wt, B, T, dx, dw_acc, conv_dpre_row_bf16, conv_dx_row_bf16);
  else
    backward_typed<float>(dy, x, wt, B, T, dx, dw_acc, conv_dpre_row_f32, conv_dx_row_f32);
  return dx;
}

}  // namespace lorabench::model::qwen3_5::cpu
