#include "kernels.hpp"
#include "cuda_kernels.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>

#include "lorabench/core/cpu_isa.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/model/qwen2.hpp"
#include "profile_scope.hpp"
#include "simd_math.hpp"

namespace lorabench::model::kernels {

namespace {

using namespace simd;  // ld, st, round_to, fast_exp, sigmoid, LB_DEFINE_ROW (simd_math.hpp)

// ---- row kernels, one per storage type ----------------------------------------------------------------

template <class T>
LB_INLINE void swiglu_row(const T* g, const T* u, T* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = ld(g[i]);
    st(a + i, x * sigmoid(x) * ld(u[i]));
  }
}
LB_DEFINE_ROW(swiglu_row_f32, swiglu_row, (const float* g, const float* u, float* a, int64_t n), (g, u, a, n))
LB_DEFINE_ROW(swiglu_row_bf16, swiglu_row, (const uint16_t* g, const uint16_t* u, uint16_t* a, int64_t n),
              (g, u, a, n))

// With kA, a gets swiglu_row's values (silu * y, as it rounds them). No buffer overlaps another: with a third
// output GCC no longer vectorised the loop behind run-time alias checks.
template <bool kA, class T>
LB_INLINE void swiglu_back_loop(const T* __restrict g, const T* __restrict u, const T* __restrict da,
                                T* __restrict dg, T* __restrict du, T* __restrict a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = ld(g[i]), y = ld(u[i]), d = ld(da[i]);
    const float s = sigmoid(x);
    const float silu = x * s;
    if constexpr (kA) st(a + i, silu * y);
    st(du + i, d * silu);
    st(dg + i, d * y * s * (1.0f + x * (1.0f - s)));
  }
}
template <class T>
LB_INLINE void swiglu_back_row(const T* g, const T* u, const T* da, T* dg, T* du, T* a, int64_t n) {
  if (a != nullptr)
    swiglu_back_loop<true>(g, u, da, dg, du, a, n);
  else
    swiglu_back_loop<false>(g, u, da, dg, du, a, n);
}
LB_DEFINE_ROW(swiglu_back_row_f32, swiglu_back_row,
              (const float* g, const float* u, const float* da, float* dg, float* du, float* a, int64_t n),
              (g, u, da, dg, du, a, n))
LB_DEFINE_ROW(swiglu_back_row_bf16, swiglu_back_row,
              (const uint16_t* g, const uint16_t* u, const uint16_t* da, uint16_t* dg, uint16_t* du, uint16_t* a,
               int64_t n),
              (g, u, da, dg, du, a, n))

template <class T>
LB_INLINE float rms_row(const T* x, const T* w, T* y, int64_t n, float eps) {
  // Sum of squares in 16 independent fp32 lanes (vectorisable, and closer to ATen's cascade sum than
  // one running total), then the row statistic.
  float lanes[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) {
      const float v = ld(x[i + k]);
      lanes[k] += v * v;
    }
  float ss = 0;
  for (; i < n; ++i) ss += ld(x[i]) * ld(x[i]);
  for (int k = 0; k < 16; ++k) ss += lanes[k];
  const float r = 1.0f / std::sqrt(ss / float(n) + eps);
  for (int64_t j = 0; j < n; ++j) st(y + j, ld(w[j]) * round_to<T>(ld(x[j]) * r));
  return r;
}
// (rms_row returns rstd through its last argument so every row kernel has the same void shape.)
template <class T>
LB_INLINE void rms_row_out(const T* x, const T* w, T* y, int64_t n, float eps, float* r) {
  *r = rms_row(x, w, y, n, eps);
}
LB_DEFINE_ROW(rms_row_f32, rms_row_out, (const float* x, const float* w, float* y, int64_t n, float eps, float* r),
              (x, w, y, n, eps, r))
LB_DEFINE_ROW(rms_row_bf16, rms_row_out,
              (const uint16_t* x, const uint16_t* w, uint16_t* y, int64_t n, float eps, float* r),
              (x, w, y, n, eps, r))

template <class T>
LB_INLINE void rms_back_row(const T* dy, const T* x, const T* w, float r, T* dx, const T* res, float* dw, int64_t n) {
  float lanes[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) {
      const float dn = round_to<T>(ld(dy[i + k]) * ld(w[i + k]));
      lanes[k] += dn * ld(x[i + k]) * r;
    }
  float dot = 0;
  for (; i < n; ++i) dot += round_to<T>(ld(dy[i]) * ld(w[i])) * ld(x[i]) * r;
  for (int k = 0; k < 16; ++k) dot += lanes[k];
  dot /= float(n);
  for (int64_t j = 0; j < n; ++j) {
    const float y = ld(x[j]) * r;
    const float dn = round_to<T>(ld(dy[j]) * ld(w[j]));
    // The unfused path rounds the normalised gradient to the storage type before the residual add.
    float v = round_to<T>((dn - y * dot) * r);
    if (res) v += ld(res[j]);
    st(dx + j, v);
    if (dw) dw[j] += ld(dy[j]) * round_to<T>(y);
  }
}
LB_DEFINE_ROW(rms_back_row_f32, rms_back_row,
              (const float* dy, const float* x, const float* w, float r, float* dx, const float* res, float* dw,
               int64_t n),
              (dy, x, w, r, dx, res, dw, n))
LB_DEFINE_ROW(rms_back_row_bf16, rms_back_row,
              (const uint16_t* dy, const uint16_t* x, const uint16_t* w, float r, uint16_t* dx, const uint16_t* res,
               float* dw, int64_t n),
              (dy, x, w, r, dx, res, dw, n))

// The largest of x[0, n) as fp32, or -3e38 for n = 0; NaN entries are skipped (the exp pass that follows
// turns them into NaN anyway). Written with 8-wide vector types and two accumulators, because GCC leaves the
// 16-lane scalar form (lanes[k] = v > lanes[k] ? v : lanes[k]) scalar: a compare and a move per element. This
// form compiles to vmaxps-style selects on AVX2 and AVX-512 (a 16384-wide bf16 row: 0.09 against 0.97 ns per
// element on the Zen 4 VM); baseline x86-64 has no 8-wide vectors and splits them.
typedef float lb_v8f __attribute__((vector_size(32)));
typedef uint32_t lb_v8u __attribute__((vector_size(32)));
typedef uint16_t lb_v8h __attribute__((vector_size(16)));
// (Results through a pointer: a vector-typed return would change the baseline variant's ABI, and GCC warns.)
LB_INLINE void ld8(lb_v8f* f, const float* p) { std::memcpy(f, p, sizeof *f); }
LB_INLINE void ld8(lb_v8f* f, const uint16_t* p) {
  lb_v8h h;
  std::memcpy(&h, p, sizeof h);
  const lb_v8u u = __builtin_convertvector(h, lb_v8u) << 16;
  std::memcpy(f, &u, sizeof *f);
}
template <class T>
LB_INLINE float row_max(const T* x, int64_t n) {
  lb_v8f m0, m1;
  for (int k = 0; k < 8; ++k) m0[k] = m1[k] = -3.0e38f;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    lb_v8f a, b;
    ld8(&a, x + i);
    ld8(&b, x + i + 8);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
  }
  float mx = -3.0e38f;
  for (int k = 0; k < 8; ++k) {
    mx = m0[k] > mx ? m0[k] : mx;
    mx = m1[k] > mx ? m1[k] : mx;
  }
  for (; i < n; ++i) mx = ld(x[i]) > mx ? ld(x[i]) : mx;
  return mx;
}

// One vocabulary chunk of the online softmax (see online_softmax_chunk in kernels.hpp).
template <class T>
LB_INLINE void softmax_chunk_row(const T* z, int64_t n, float* m, float* se, float* rescale, T* p, int64_t t,
                                 float* zt) {
  const float mx = row_max(z, n);
  const float m_new = mx > *m ? mx : *m;
  // The exponentials a block at a time into e (a loop without a running sum, which GCC vectorises at the
  // variant's full width), then their sum in 16 lanes. With the sum in the same loop, GCC had used half the
  // AVX-512 width and kept the lanes on the stack.
  constexpr int64_t kBlock = 512;
  float e[kBlock];
  float lanes[16] = {};
  int64_t i = 0;
  while (n - i >= 16) {
    const int64_t len = n - i >= kBlock ? kBlock : (n - i) / 16 * 16;
    for (int64_t j = 0; j < len; ++j) {
      e[j] = fast_exp(ld(z[i + j]) - m_new);
      st(p + i + j, e[j]);
    }
    for (int64_t j = 0; j < len; j += 16)
      for (int k = 0; k < 16; ++k) lanes[k] += e[j + k];
    i += len;
  }
  float sum = 0;
  for (; i < n; ++i) {
    const float e = fast_exp(ld(z[i]) - m_new);
    st(p + i, e);
    sum += e;
  }
  for (int k = 0; k < 16; ++k) sum += lanes[k];
  const float rs = fast_exp(*m - m_new);
  *rescale = rs;
  *se = *se * rs + sum;
  *m = m_new;
  if (t >= 0 && t < n) *zt += ld(z[t]);
}
LB_DEFINE_ROW(softmax_chunk_row_f32, softmax_chunk_row,
              (const float* z, int64_t n, float* m, float* se, float* rs, float* p, int64_t t, float* zt),
              (z, n, m, se, rs, p, t, zt))
LB_DEFINE_ROW(softmax_chunk_row_bf16, softmax_chunk_row,
              (const uint16_t* z, int64_t n, float* m, float* se, float* rs, uint16_t* p, int64_t t, float* zt),
              (z, n, m, se, rs, p, t, zt))

// ---- rows of the blocked CPU attention (attention_cpu.cpp) ------------------------------------------

// Forward: s[0, n) are one query row's raw scores against the keys it sees. Overwrites s with
// exp(scale * s - max), writes softmax(scale * s) rounded to bf16 to pb[0, n) and zeros to pb[n, n_pad),
// and returns the row's log-sum-exp, max + log(sum).
LB_INLINE float attn_probs_row(float* s, int64_t n, int64_t n_pad, float scale, uint16_t* pb) {
  const float shift = row_max(s, n) * scale;
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) {
      const float e = fast_exp(s[i + k] * scale - shift);
      s[i + k] = e;
      lanes[k] += e;
    }
  float sum = 0;
  for (; i < n; ++i) {
    const float e = fast_exp(s[i] * scale - shift);
    s[i] = e;
    sum += e;
  }
  for (int k = 0; k < 16; ++k) sum += lanes[k];
  const float inv = 1.0f / sum;
  for (i = 0; i < n; ++i) st(pb + i, s[i] * inv);
  for (; i < n_pad; ++i) pb[i] = 0;
  return shift + std::log(sum);
}
LB_INLINE void attn_probs_row_out(float* s, int64_t n, int64_t n_pad, float scale, uint16_t* pb, float* lse) {
  *lse = attn_probs_row(s, n, n_pad, scale, pb);
}
LB_DEFINE_ROW(attn_probs_row_d, attn_probs_row_out,
              (float* s, int64_t n, int64_t n_pad, float scale, uint16_t* pb, float* lse),
              (s, n, n_pad, scale, pb, lse))

// Backward, two query rows j = 0, 1 at once: p_j = exp(scale * s_j - lse_j) over [0, n_j), ds_j = p_j * (dp_j
// - D_j), and p_j rounded to bf16 into pb[2c + j] (the pair layout brgemm takes as B); all zero over [n_j,
// n_pad). No buffer overlaps another (so the loop vectorises without run-time alias checks).
LB_INLINE void attn_grad_rows(const float* __restrict s0, const float* __restrict s1, const float* __restrict dp0,
                              const float* __restrict dp1, int64_t n0, int64_t n1, int64_t n_pad, float scale,
                              float lse0, float lse1, float D0, float D1, uint16_t* __restrict pb,
                              float* __restrict ds0, float* __restrict ds1) {
  const int64_t both = n0 < n1 ? n0 : n1;
  int64_t c = 0;
  // The pair as one 32-bit word (row 0 in the low half), so the loop vectorises with contiguous stores.
  for (; c < both; ++c) {
    const float p0 = fast_exp(s0[c] * scale - lse0), p1 = fast_exp(s1[c] * scale - lse1);
    uint16_t h0, h1;
    st(&h0, p0);
    st(&h1, p1);
    const uint32_t pair = uint32_t(h0) | (uint32_t(h1) << 16);
    std::memcpy(pb + 2 * c, &pair, 4);
    ds0[c] = p0 * (dp0[c] - D0);
    ds1[c] = p1 * (dp1[c] - D1);
  }
  for (; c < n_pad; ++c) {
    const float p0 = c < n0 ? fast_exp(s0[c] * scale - lse0) : 0.0f;
    const float p1 = c < n1 ? fast_exp(s1[c] * scale - lse1) : 0.0f;
    st(pb + 2 * c, p0);
    st(pb + 2 * c + 1, p1);
    ds0[c] = c < n0 ? p0 * (dp0[c] - D0) : 0.0f;
    ds1[c] = c < n1 ? p1 * (dp1[c] - D1) : 0.0f;
  }
}
LB_DEFINE_ROW(attn_grad_rows_d, attn_grad_rows,
              (const float* s0, const float* s1, const float* dp0, const float* dp1, int64_t n0, int64_t n1,
               int64_t n_pad, float scale, float lse0, float lse1, float D0, float D1, uint16_t* pb, float* ds0,
               float* ds1),
              (s0, s1, dp0, dp1, n0, n1, n_pad, scale, lse0, lse1, D0, D1, pb, ds0, ds1))

// dst = scale * src rounded to bf16.
LB_INLINE void round_scaled(const float* src, uint16_t* dst, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) st(dst + i, src[i] * scale);
}
LB_DEFINE_ROW(round_scaled_d, round_scaled, (const float* src, uint16_t* dst, int64_t n, float scale),
              (src, dst, n, scale))

// sum of a[i] * b[i] over two bf16 rows, in fp32.
LB_INLINE float dot_bf16(const uint16_t* a, const uint16_t* b, int64_t n) {
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) lanes[k] += ld(a[i + k]) * ld(b[i + k]);
  float sum = 0;
  for (; i < n; ++i) sum += ld(a[i]) * ld(b[i]);
  for (int k = 0; k < 16; ++k) sum += lanes[k];
  return sum;
}
LB_INLINE void dot_bf16_out(const uint16_t* a, const uint16_t* b, int64_t n, float* out) { *out = dot_bf16(a, b, n); }
LB_DEFINE_ROW(dot_bf16_d, dot_bf16_out, (const uint16_t* a, const uint16_t* b, int64_t n, float* out), (a, b, n, out))

// Rotary embedding of one head vector in place (d = 2 * half): forward x1' = x1 c - x2 s, x2' = x2 c + x1 s;
// the inverse (the backward) rotates by -angle: x1 = x1' c + x2' s, x2 = x2' c - x1' s. fp32, one rounding.
template <class T>
LB_INLINE void rope_vec(T* x, const float* c, const float* sn, int64_t half, float dir) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = ld(x[i]), b = ld(x[half + i]), si = dir * sn[i];
    st(x + i, a * c[i] - b * si);
    st(x + half + i, b * c[i] + a * si);
  }
}
// One token (row of qkv): rotate its query and key heads (the first `heads` head vectors) in place.
template <class T>
LB_INLINE void rope_token(T* row, const float* c, const float* sn, int64_t heads, int64_t d, float dir) {
  for (int64_t h = 0; h < heads; ++h) rope_vec(row + h * d, c, sn, d / 2, dir);
}
LB_DEFINE_ROW(rope_token_f32, rope_token,
              (float* row, const float* c, const float* sn, int64_t heads, int64_t d, float dir),
              (row, c, sn, heads, d, dir))
LB_DEFINE_ROW(rope_token_bf16, rope_token,
              (uint16_t* row, const float* c, const float* sn, int64_t heads, int64_t d, float dir),
              (row, c, sn, heads, d, dir))

// Qwen3's q/k norms and the rotation, one token (row of qkv): each of the H query and K key heads is copied
// to its slot of q_pre / k_pre (the norm's input, kept for the backward), normalised from there into its
// place in the row (rms_row: the norm's rounding points) and rotated in place (rope_vec), so the values are
// those of the norm followed by the rotation.
template <class T>
LB_INLINE void qk_norm_rope_token(T* row, T* q_pre, T* k_pre, const T* wq, const T* wk, float eps, const float* c,
                                  const float* sn, int64_t H, int64_t K, int64_t d, float* rq, float* rk) {
  for (int64_t h = 0; h < H + K; ++h) {
    const bool q = h < H;
    T* x = row + h * d;
    T* pre = q ? q_pre + h * d : k_pre + (h - H) * d;
    for (int64_t i = 0; i < d; ++i) pre[i] = x[i];
    const float r = rms_row(pre, q ? wq : wk, x, d, eps);
    if (q) rq[h] = r;
    else rk[h - H] = r;
    rope_vec(x, c, sn, d / 2, 1.0f);
  }
}
LB_DEFINE_ROW(qk_norm_rope_token_f32, qk_norm_rope_token,
              (float* row, float* q_pre, float* k_pre, const float* wq, const float* wk, float eps, const float* c,
               const float* sn, int64_t H, int64_t K, int64_t d, float* rq, float* rk),
              (row, q_pre, k_pre, wq, wk, eps, c, sn, H, K, d, rq, rk))
LB_DEFINE_ROW(qk_norm_rope_token_bf16, qk_norm_rope_token,
              (uint16_t* row, uint16_t* q_pre, uint16_t* k_pre, const uint16_t* wq, const uint16_t* wk, float eps,
               const float* c, const float* sn, int64_t H, int64_t K, int64_t d, float* rq, float* rk),
              (row, q_pre, k_pre, wq, wk, eps, c, sn, H, K, d, rq, rk))

// Its backward for one token: each head's gradient rotated back in place, copied to `scratch` (d values: the
// norm's backward reads its input again after writing its output) and taken through the norm into its
// place; the weight gradients accumulate into dwq / dwk when not null.
template <class T>
LB_INLINE void qk_norm_rope_back_token(T* drow, const T* q_pre, const T* k_pre, const T* wq, const T* wk, const float* c,
                                       const float* sn, int64_t H, int64_t K, int64_t d, const float* rq, const float* rk,
                                       float* dwq, float* dwk, T* scratch) {
  for (int64_t h = 0; h < H + K; ++h) {
    const bool q = h < H;
    T* dx = drow + h * d;
    rope_vec(dx, c, sn, d / 2, -1.0f);
    for (int64_t i = 0; i < d; ++i) scratch[i] = dx[i];
    rms_back_row(scratch, q ? q_pre + h * d : k_pre + (h - H) * d, q ? wq : wk, q ? rq[h] : rk[h - H], dx,
                 static_cast<const T*>(nullptr), q ? dwq : dwk, d);
  }
}
LB_DEFINE_ROW(qk_norm_rope_back_token_f32, qk_norm_rope_back_token,
              (float* drow, const float* q_pre, const float* k_pre, const float* wq, const float* wk, const float* c,
               const float* sn, int64_t H, int64_t K, int64_t d, const float* rq, const float* rk, float* dwq, float* dwk,
               float* scratch),
              (drow, q_pre, k_pre, wq, wk, c, sn, H, K, d, rq, rk, dwq, dwk, scratch))
LB_DEFINE_ROW(qk_norm_rope_back_token_bf16, qk_norm_rope_back_token,
              (uint16_t* drow, const uint16_t* q_pre, const uint16_t* k_pre, const uint16_t* wq, const uint16_t* wk,
               const float* c, const float* sn, int64_t H, int64_t K, int64_t d, const float* rq, const float* rk,
               float* dwq, float* dwk, uint16_t* scratch),
              (drow, q_pre, k_pre, wq, wk, c, sn, H, K, d, rq, rk, dwq, dwk, scratch))

void check(const at::Tensor& t, at::ScalarType dt, const char* what) {
  LB_CHECK(t.is_contiguous() && t.scalar_type() == dt && t.device().is_cpu(),
           std::string(what) + ": expected a contiguous CPU tensor of the model dtype");
}

bool is_bf16(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16; }
template <class T>
T* ptr(const at::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

// Rows per task: enough work per task to amortise scheduling (the rows are short).
int64_t grain(int64_t row_len) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, row_len)); }

// ---- the device-generic path ------------------------------------------------------------------------
// The same operations at the same rounding points, composed of ATen ops: what non-CPU tensors take, and CPU
// tensors with the fused kernels switched off (model.fused_kernels = false), which is how the CPU tests
// check them against the fused path. RMSNorm's is the reference implementation of qwen2.hpp.
namespace generic {

at::Tensor f32(const at::Tensor& t) { return t.to(at::kFloat); }

at::Tensor swiglu_forward(const at::Tensor& gu) {
  const int64_t I = gu.size(1) / 2;
  return (at::silu(f32(gu.narrow(1, 0, I))) * f32(gu.narrow(1, I, I))).to(gu.scalar_type());
}

at::Tensor swiglu_backward(const at::Tensor& gu, const at::Tensor& da) {
  const int64_t I = gu.size(1) / 2;
  at::Tensor g = f32(gu.narrow(1, 0, I)), u = f32(gu.narrow(1, I, I)), d = f32(da);
  at::Tensor s = at::sigmoid(g);
  return at::cat({d * u * s * (1 + g * (1 - s)), d * g * s}, 1).to(gu.scalar_type());
}

void online_softmax_chunk(const at::Tensor& z, at::Tensor& m, at::Tensor& se, at::Tensor& rescale, at::Tensor& p,
                          const at::Tensor& target_local, at::Tensor& zt) {
  const int64_t N = z.size(0), C = z.size(1);
  at::Tensor zf = f32(z);
  at::Tensor m_new = at::maximum(m, zf.amax(1));
  at::Tensor e = at::exp(zf - m_new.unsqueeze(1));
  rescale.copy_(at::exp(m - m_new));
  se.mul_(rescale).add_(e.sum(1));
  m.copy_(m_new);
  if (!p.defined() || p.numel() < N * C || p.scalar_type() != z.scalar_type() || p.device() != z.device())
    p = at::empty({N * C}, z.options());
  p.narrow(0, 0, N * C).view({N, C}).copy_(e);
  at::Tensor in_chunk = (target_local >= 0).logical_and(target_local < C);
  at::Tensor picked = zf.gather(1, target_local.clamp(0, C - 1).unsqueeze(1)).squeeze(1);
  zt.add_(at::where(in_chunk, picked, at::zeros_like(picked)));
}

void rope_qkv(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H,
              int64_t K, int64_t d, bool inverse) {
  const int64_t half = d / 2;
  at::Tensor heads = qkv.view({B, T, H + 2 * K, d}).narrow(2, 0, H + K);  // q and k heads, in place
  at::Tensor x1 = f32(heads.narrow(3, 0, half)), x2 = f32(heads.narrow(3, half, half));
  at::Tensor c = cos.narrow(0, 0, T).view({1, T, 1, half}), s = sin.narrow(0, 0, T).view({1, T, 1, half});
  if (inverse) s = -s;
  // Both halves are computed before either is written (for fp32, x1 and x2 are views of qkv itself).
  at::Tensor o1 = x1 * c - x2 * s, o2 = x2 * c + x1 * s;
  heads.narrow(3, 0, half).copy_(o1);
  heads.narrow(3, half, half).copy_(o2);
}

}  // namespace generic

// The fused kernels run on CPU tensors when asked for; everything else takes the device-generic path.
bool fused_for(bool fused, const at::Tensor& t) { return fused && t.device().is_cpu(); }
// ... and lorabench's CUDA kernels on CUDA tensors, where the build has them (cuda_kernels.hpp).
bool cuda_fused_for(bool fused, const at::Tensor& t) { return fused && t.is_cuda() && cuda::available(); }

}  // namespace

at::Tensor swiglu_forward(bool fused, const at::Tensor& gu) {
  if (cuda_fused_for(fused, gu)) return cuda::swiglu_forward(gu);
  if (!fused_for(fused, gu)) return generic::swiglu_forward(gu);
  ProfileScope scope("lb::swiglu");
  check(gu, gu.scalar_type(), "swiglu gu");
  const int64_t N = gu.size(0), I = gu.size(1) / 2;
  at::Tensor a = at::empty({N, I}, gu.options());
  at::parallel_for(0, N, grain(I), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      if (is_bf16(gu)) {
        const uint16_t* row = ptr<uint16_t>(gu) + n * 2 * I;
        swiglu_row_bf16(row, row + I, ptr<uint16_t>(a) + n * I, I);
      } else {
        const float* row = ptr<float>(gu) + n * 2 * I;
        swiglu_row_f32(row, row + I, ptr<float>(a) + n * I, I);
      }
    }
  });
  return a;
}

at::Tensor swiglu_backward(bool fused, const at::Tensor& gu, const at::Tensor& da_in, at::Tensor* a) {
  if (!fused_for(fused, gu)) {
    if (a != nullptr) *a = swiglu_forward(fused, gu);
    return cuda_fused_for(fused, gu) ? cuda::swiglu_backward(gu, da_in) : generic::swiglu_backward(gu, da_in);
  }
  ProfileScope scope("lb::swiglu");
  at::Tensor da = da_in.contiguous();
  const auto dt = gu.scalar_type();
  check(gu, dt, "swiglu gu");
  check(da, dt, "swiglu da");
  const int64_t N = gu.size(0), I = gu.size(1) / 2;
  at::Tensor dgu = at::empty({N, 2 * I}, gu.options());
  if (a != nullptr) *a = at::empty({N, I}, gu.options());
  at::parallel_for(0, N, grain(I), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      if (dt == at::kBFloat16) {
        const uint16_t* row = ptr<uint16_t>(gu) + n * 2 * I;
        uint16_t* drow = ptr<uint16_t>(dgu) + n * 2 * I;
        uint16_t* arow = a != nullptr ? ptr<uint16_t>(*a) + n * I : nullptr;
        swiglu_back_row_bf16(row, row + I, ptr<uint16_t>(da) + n * I, drow, drow + I, arow, I);
      } else {
        const float* row = ptr<float>(gu) + n * 2 * I;
        float* drow = ptr<float>(dgu) + n * 2 * I;
        float* arow = a != nullptr ? ptr<float>(*a) + n * I : nullptr;
        swiglu_back_row_f32(row, row + I, ptr<float>(da) + n * I, drow, drow + I, arow, I);
      }
    }
  });
  return dgu;
}

at::Tensor rmsnorm_forward(bool fused, const at::Tensor& x_in, const at::Tensor& w_in, double eps, at::Tensor* rstd) {
  if (cuda_fused_for(fused, x_in)) return cuda::rmsnorm_forward(x_in, w_in, eps, rstd);
  if (!fused_for(fused, x_in)) return rmsnorm_forward_reference(x_in, w_in, eps, rstd);
  ProfileScope scope("lb::norm");
  at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const auto dt = x.scalar_type();
  check(w, dt, "rmsnorm weight");
  const int64_t D = x.size(-1), N = x.numel() / D;
  at::Tensor y = at::empty_like(x);
  at::Tensor r = at::empty({N, 1}, x.options().dtype(at::kFloat));
  float* rp = ptr<float>(r);
  at::parallel_for(0, N, grain(D), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      if (dt == at::kBFloat16) {
        rms_row_bf16(ptr<uint16_t>(x) + n * D, ptr<uint16_t>(w), ptr<uint16_t>(y) + n * D, D, float(eps), rp + n);
      } else {
        rms_row_f32(ptr<float>(x) + n * D, ptr<float>(w), ptr<float>(y) + n * D, D, float(eps), rp + n);
      }
    }
  });
  if (rstd) *rstd = r;
  return y;
}

at::Tensor rmsnorm_backward(bool fused, const at::Tensor& dy_in, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& rstd, const at::Tensor& dw_acc, const at::Tensor& residual) {
  if (!fused_for(fused, x)) {
    at::Tensor dx = rmsnorm_backward_reference(dy_in, x, w, rstd, dw_acc);
    return residual.defined() ? dx + residual : dx;  // one rounding of the sum, as the fused kernel
  }
  ProfileScope scope("lb::norm");
  at::Tensor dy = dy_in.contiguous();
  const auto dt = x.scalar_type();
  check(x, dt, "rmsnorm x");
  check(dy, dt, "rmsnorm dy");
  if (residual.defined()) check(residual, dt, "rmsnorm residual");
  const int64_t D = x.size(-1), N = x.numel() / D;
  at::Tensor dx = at::empty_like(x);
  const float* rp = ptr<float>(rstd);
  // dw sums over rows: rows are cut into fixed blocks, each block accumulates its own partial sum (so no
  // two threads share one), and the partial sums are added up afterwards.
  const int64_t g = grain(D);
  const int64_t blocks = (N + g - 1) / g;
  at::Tensor partial = dw_acc.defined() ? at::zeros({blocks, D}, at::kFloat) : at::Tensor();
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      float* dw = partial.defined() ? ptr<float>(partial) + blk * D : nullptr;
      for (int64_t n = blk * g; n < std::min(N, (blk + 1) * g); ++n) {
        if (dt == at::kBFloat16) {
          rms_back_row_bf16(ptr<uint16_t>(dy) + n * D, ptr<uint16_t>(x) + n * D, ptr<uint16_t>(w), rp[n],
                            ptr<uint16_t>(dx) + n * D, residual.defined() ? ptr<uint16_t>(residual) + n * D : nullptr,
                            dw, D);
        } else {
          rms_back_row_f32(ptr<float>(dy) + n * D, ptr<float>(x) + n * D, ptr<float>(w), rp[n], ptr<float>(dx) + n * D,
                           residual.defined() ? ptr<float>(residual) + n * D : nullptr, dw, D);
        }
      }
    }
  });
  if (dw_acc.defined()) dw_acc.add_(partial.sum(0));
  return dx;
}

void online_softmax_chunk(bool fused, const at::Tensor& z, at::Tensor& m, at::Tensor& se, at::Tensor& rescale, at::Tensor& p,
                          const at::Tensor& target_local, at::Tensor& zt) {
  if (cuda_fused_for(fused, z)) return cuda::online_softmax_chunk(z, m, se, rescale, p, target_local, zt);
  if (!fused_for(fused, z)) return generic::online_softmax_chunk(z, m, se, rescale, p, target_local, zt);
  ProfileScope scope("lb::head_loss");
  const auto dt = z.scalar_type();
  check(z, dt, "softmax chunk logits");
  const int64_t N = z.size(0), C = z.size(1);
  if (!p.defined() || p.numel() < N * C || p.scalar_type() != dt) p = at::empty({N * C}, z.options());
  const int64_t* t = target_local.data_ptr<int64_t>();
  float *mp = m.data_ptr<float>(), *sp = se.data_ptr<float>(), *rp = rescale.data_ptr<float>(),
        *zp = zt.data_ptr<float>();
  at::parallel_for(0, N, grain(C), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      if (dt == at::kBFloat16) {
        softmax_chunk_row_bf16(ptr<uint16_t>(z) + n * C, C, mp + n, sp + n, rp + n, ptr<uint16_t>(p) + n * C, t[n],
                               zp + n);
      } else {
        softmax_chunk_row_f32(ptr<float>(z) + n * C, C, mp + n, sp + n, rp + n, ptr<float>(p) + n * C, t[n], zp + n);
      }
    }
  });
}

void rope_qkv(bool fused, at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H,
              int64_t K, int64_t d, bool inverse) {
  if (cuda_fused_for(fused, qkv)) return cuda::rope_qkv(qkv, cos, sin, B, T, H, K, d, inverse);
  if (!fused_for(fused, qkv)) return generic::rope_qkv(qkv, cos, sin, B, T, H, K, d, inverse);
  ProfileScope scope("lb::attention");
  check(qkv, qkv.scalar_type(), "qkv");
  LB_CHECK(qkv.numel() == B * T * (H + 2 * K) * d && d % 2 == 0, "rope_qkv: qkv is not (B*T, (H + 2K) d)");
  const float *c = cos.data_ptr<float>(), *sn = sin.data_ptr<float>();
  const int64_t half = d / 2, width = (H + 2 * K) * d;
  const float dir = inverse ? -1.0f : 1.0f;
  at::parallel_for(0, B * T, grain(width), [&](int64_t b0, int64_t e0) {
    for (int64_t r = b0; r < e0; ++r) {
      const int64_t t = r % T;
      if (is_bf16(qkv)) rope_token_bf16(ptr<uint16_t>(qkv) + r * width, c + t * half, sn + t * half, H + K, d, dir);
      else rope_token_f32(ptr<float>(qkv) + r * width, c + t * half, sn + t * half, H + K, d, dir);
    }
  });
}

namespace {

// The q/k norms and the rotation composed of the other entries: each head's norm on a contiguous copy of the
// heads, written back, then rope_qkv (the device-generic path; on CUDA tensors their CUDA kernels).
void qk_norm_rope_composed(bool fused, at::Tensor& qkv, const at::Tensor& wq, const at::Tensor& wk, double eps,
                           const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H, int64_t K,
                           int64_t d, at::Tensor* q_pre, at::Tensor* k_pre, at::Tensor* rstd_q, at::Tensor* rstd_k) {
  const int64_t N = B * T;
  for (int part = 0; part < 2; ++part) {
    const int64_t heads = part == 0 ? H : K;
    at::Tensor cols = qkv.narrow(1, part == 0 ? 0 : H * d, heads * d);
    at::Tensor in = cols.reshape({N * heads, d}).contiguous();
    cols.copy_(rmsnorm_forward(fused, in, part == 0 ? wq : wk, eps, part == 0 ? rstd_q : rstd_k).view({N, heads * d}));
    *(part == 0 ? q_pre : k_pre) = in;
  }
  rope_qkv(fused, qkv, cos, sin, B, T, H, K, d, /*inverse=*/false);
}

void qk_norm_rope_backward_composed(bool fused, at::Tensor& dqkv, const at::Tensor& wq, const at::Tensor& wk,
                                    const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H,
                                    int64_t K, int64_t d, const at::Tensor& q_pre, const at::Tensor& k_pre,
                                    const at::Tensor& rstd_q, const at::Tensor& rstd_k, const at::Tensor& dwq,
                                    const at::Tensor& dwk) {
  rope_qkv(fused, dqkv, cos, sin, B, T, H, K, d, /*inverse=*/true);
  const int64_t N = B * T;
  for (int part = 0; part < 2; ++part) {
    const int64_t heads = part == 0 ? H : K;
    at::Tensor cols = dqkv.narrow(1, part == 0 ? 0 : H * d, heads * d);
    const at::Tensor dy = cols.reshape({N * heads, d}).contiguous();
    cols.copy_(rmsnorm_backward(fused, dy, part == 0 ? q_pre : k_pre, part == 0 ? wq : wk, part == 0 ? rstd_q : rstd_k,
                                part == 0 ? dwq : dwk, at::Tensor())
                   .view({N, heads * d}));
  }
}

}  // namespace

void qk_norm_rope(bool fused, at::Tensor& qkv, const at::Tensor& wq, const at::Tensor& wk, double eps,
                  const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d,
                  at::Tensor* q_pre, at::Tensor* k_pre, at::Tensor* rstd_q, at::Tensor* rstd_k) {
  ProfileScope scope("lb::norm");  // the rotation included, on every path
  if (!fused_for(fused, qkv))
    return qk_norm_rope_composed(fused, qkv, wq, wk, eps, cos, sin, B, T, H, K, d, q_pre, k_pre, rstd_q, rstd_k);
  const auto dt = qkv.scalar_type();
  check(qkv, dt, "qkv");
  const at::Tensor wqc = wq.contiguous(), wkc = wk.contiguous();
  check(wqc, dt, "q_norm weight");
  check(wkc, dt, "k_norm weight");
  const int64_t N = B * T, width = (H + 2 * K) * d, half = d / 2;
  LB_CHECK(qkv.numel() == N * width && d % 2 == 0, "qk_norm_rope: qkv is not (B*T, (H + 2K) d)");
  *q_pre = at::empty({N * H, d}, qkv.options());
  *k_pre = at::empty({N * K, d}, qkv.options());
  *rstd_q = at::empty({N * H, 1}, qkv.options().dtype(at::kFloat));
  *rstd_k = at::empty({N * K, 1}, qkv.options().dtype(at::kFloat));
  const float *c = cos.data_ptr<float>(), *sn = sin.data_ptr<float>();
  float *rq = ptr<float>(*rstd_q), *rk = ptr<float>(*rstd_k);
  at::parallel_for(0, N, grain(width), [&](int64_t b0, int64_t e0) {
    for (int64_t r = b0; r < e0; ++r) {
      const int64_t t = r % T;
      if (dt == at::kBFloat16) {
        qk_norm_rope_token_bf16(ptr<uint16_t>(qkv) + r * width, ptr<uint16_t>(*q_pre) + r * H * d,
                                ptr<uint16_t>(*k_pre) + r * K * d, ptr<uint16_t>(wqc), ptr<uint16_t>(wkc), float(eps),
                                c + t * half, sn + t * half, H, K, d, rq + r * H, rk + r * K);
      } else {
        qk_norm_rope_token_f32(ptr<float>(qkv) + r * width, ptr<float>(*q_pre) + r * H * d, ptr<float>(*k_pre) + r * K * d,
                               ptr<float>(wqc), ptr<float>(wkc), float(eps), c + t * half, sn + t * half, H, K, d,
                               rq + r * H, rk + r * K);
      }
    }
  });
}

void qk_norm_rope_backward(bool fused, at::Tensor& dqkv, const at::Tensor& wq, const at::Tensor& wk,
                           const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H, int64_t K,
                           int64_t d, const at::Tensor& q_pre, const at::Tensor& k_pre, const at::Tensor& rstd_q,
                           const at::Tensor& rstd_k, const at::Tensor& dwq, const at::Tensor& dwk) {
  ProfileScope scope("lb::norm");
  if (!fused_for(fused, dqkv))
    return qk_norm_rope_backward_composed(fused, dqkv, wq, wk, cos, sin, B, T, H, K, d, q_pre, k_pre, rstd_q, rstd_k,
                                          dwq, dwk);
  const auto dt = dqkv.scalar_type();
  check(dqkv, dt, "dqkv");
  check(q_pre, dt, "q_pre");
  check(k_pre, dt, "k_pre");
  const at::Tensor wqc = wq.contiguous(), wkc = wk.contiguous();
  const int64_t N = B * T, width = (H + 2 * K) * d, half = d / 2;
  LB_CHECK(dqkv.numel() == N * width && d % 2 == 0, "qk_norm_rope_backward: dqkv is not (B*T, (H + 2K) d)");
  const float *c = cos.data_ptr<float>(), *sn = sin.data_ptr<float>();
  const float *rq = ptr<float>(rstd_q), *rk = ptr<float>(rstd_k);
  // The weight gradients sum over rows: fixed blocks of rows, each with its own partial sums, added up
  // afterwards (as rmsnorm_backward does), so the result does not depend on the thread count.
  const int64_t g = grain(width), blocks = (N + g - 1) / g;
  const bool dw = dwq.defined() || dwk.defined();
  at::Tensor partial = dw ? at::zeros({blocks, 2, d}, at::kFloat) : at::Tensor();
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    at::Tensor scratch = at::empty({d}, dqkv.options());
    for (int64_t blk = b0; blk < b1; ++blk) {
      float* pq = dw ? ptr<float>(partial) + blk * 2 * d : nullptr;
      float* pk = dw ? pq + d : nullptr;
      for (int64_t r = blk * g; r < std::min(N, (blk + 1) * g); ++r) {
        const int64_t t = r % T;
        if (dt == at::kBFloat16) {
          qk_norm_rope_back_token_bf16(ptr<uint16_t>(dqkv) + r * width, ptr<uint16_t>(q_pre) + r * H * d,
                                       ptr<uint16_t>(k_pre) + r * K * d, ptr<uint16_t>(wqc), ptr<uint16_t>(wkc),
                                       c + t * half, sn + t * half, H, K, d, rq + r * H, rk + r * K, pq, pk,
                                       ptr<uint16_t>(scratch));
        } else {
          qk_norm_rope_back_token_f32(ptr<float>(dqkv) + r * width, ptr<float>(q_pre) + r * H * d,
                                      ptr<float>(k_pre) + r * K * d, ptr<float>(wqc), ptr<float>(wkc), c + t * half,
                                      sn + t * half, H, K, d, rq + r * H, rk + r * K, pq, pk, ptr<float>(scratch));
        }
      }
    }
  });
  if (dw) {
    const at::Tensor sums = partial.sum(0);
    if (dwq.defined()) dwq.add_(sums[0]);
    if (dwk.defined()) dwk.add_(sums[1]);
  }
}

float attention_probs_row(float* s, int64_t n, int64_t n_pad, float scale, uint16_t* pb) {
  float lse;
  attn_probs_row_d(s, n, n_pad, scale, pb, &lse);
  return lse;
}
void attention_grad_rows(const float* s0, const float* s1, const float* dp0, const float* dp1, int64_t n0, int64_t n1,
                         int64_t n_pad, float scale, float lse0, float lse1, float D0, float D1, uint16_t* pb,
                         float* ds0, float* ds1) {
  attn_grad_rows_d(s0, s1, dp0, dp1, n0, n1, n_pad, scale, lse0, lse1, D0, D1, pb, ds0, ds1);
}
void round_row_bf16(const float* src, uint16_t* dst, int64_t n, float scale) { round_scaled_d(src, dst, n, scale); }
float dot_row_bf16(const uint16_t* a, const uint16_t* b, int64_t n) {
  float out;
  dot_bf16_d(a, b, n, &out);
  return out;
}

}  // namespace lorabench::model::kernels

