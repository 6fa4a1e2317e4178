// CPU kernels for Qwen3.5's linear layers' elementwise parts (qwen3_5_ops.hpp): the causal depthwise convolution
// with its SiLU, forward and backward, at the ATen path's rounding points (the pre-activation rounded to the
// model dtype, then silu rounded). Tasks are blocks of channels over every token, so the weight gradient of a
// channel is summed by one task; rows are vectorised over the channels (AVX-512, AVX2+FMA or baseline).
#include "qwen3_5_ops.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

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

void check_conv(const at::Tensor& x, const at::Tensor& w, int64_t B, int64_t T) {
  LB_CHECK(x.device().is_cpu() && x.dim() == 2 && x.stride(1) == 1 && x.size(0) == B * T &&
               (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16),
           "conv_silu (CPU kernel): x must be (B*T, C) fp32 or bf16 rows on the CPU");
  LB_CHECK(w.dim() == 2 && w.size(0) == x.size(1) && w.size(1) <= kMaxTaps,
           "conv_silu (CPU kernel): w must be (C, K) with K <= 8");
}

template <class T>
T* rows(const at::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
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
    std::vector<float> dp(size_t(T_ * kBlock)), dw(size_t(K * kBlock));
    const T* taps[kMaxTaps];
    const float* dps[kMaxTaps];
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t c0 = blk * kBlock, n = std::min(kBlock, C - c0);
      std::fill(dw.begin(), dw.end(), 0.0f);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t t = 0; t < T_; ++t) {
          for (int64_t j = 0; j < K; ++j) {
            const int64_t s = t - (K - 1) + j;
            taps[j] = s >= 0 ? xp + (b * T_ + s) * ldx + c0 : nullptr;
          }
          dpre_row(taps, w + c0, C, K, dyp + (b * T_ + t) * lddy + c0, dp.data() + t * n, n);
        }
        for (int64_t t = 0; t < T_; ++t) {
          for (int64_t j = 0; j < K; ++j) {
            const int64_t s = t + (K - 1) - j;  // the output token that tap j of token t fed
            dps[j] = s < T_ ? dp.data() + s * n : nullptr;
          }
          dx_row(dps, xp + (b * T_ + t) * ldx + c0, w + c0, C, K, dxp + (b * T_ + t) * C + c0, dw.data(), n);
        }
      }
      if (dwa)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < K; ++j) dwa[(c0 + i) * K + j] += dw[size_t(j * n + i)];
    }
  });
}

}  // namespace

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
