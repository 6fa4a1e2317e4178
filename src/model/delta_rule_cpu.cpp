// The gated delta rule's CPU kernel (delta_rule.hpp): the chunked algorithm of the ATen path, on raw fp32
// buffers. One task per batch row and key head (its query and key rows normalised once, its value heads one
// after another, so the key head's gradients are summed without atomics); per value head the state S (dk x dv)
// runs over the chunks. The products inside a chunk go through one register-blocked fp32 product (AVX-512,
// AVX2+FMA or baseline, chosen at run time); the inverse of the unit lower triangular L is formed by
// substitution (C^3 / 6 multiply-adds) and applied by that product, as transformers' reference does. The
// backward's forward sweep keeps, per chunk, what the reverse sweep needs (the state entering it, the decays,
// the C x C blocks, U, W and the new values): a buffer linear in T per task, no T x T buffer.
#include "delta_rule.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "lorabench/core/cpu_isa.hpp"
#include "lorabench/core/error.hpp"
#include "profile_scope.hpp"
#include "simd_math.hpp"

namespace lorabench::model::delta_rule::cpu {

namespace {

using simd::fast_exp;

// ---- the block product -------------------------------------------------------------------------------

// 16 floats: one AVX-512 register, two AVX2 ones, four SSE ones. Every function taking or returning one is
// force-inlined into its ISA variant, so the ABI note GCC gives for the baseline declaration does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v16 __attribute__((vector_size(64)));
LB_FORCE_INLINE v16 vload(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
LB_FORCE_INLINE void vstore(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }

// R rows x 16 W columns of C (ldc) = (acc ? C : 0) + alpha * op(A) (R x K) B (K x 16 W, ldb), in registers;
// op(A) = A (R x K, lda), or with kTA the transpose of A (K x R, lda): the element a broadcast is read either way.
template <int R, int W, bool kTA>
LB_FORCE_INLINE void mm_tile(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                             int64_t ldc, float alpha, bool acc) {
  v16 c[R][W];
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) c[r][w] = v16{};
  for (int64_t p = 0; p < K; ++p) {
    v16 b[W];
    for (int w = 0; w < W; ++w) b[w] = vload(B + p * ldb + 16 * w);
    for (int r = 0; r < R; ++r) {
      const float a = kTA ? A[p * lda + r] : A[r * lda + p];
      for (int w = 0; w < W; ++w) c[r][w] += a * b[w];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) {
      v16 x = alpha * c[r][w];
      if (acc) x += vload(C + r * ldc + 16 * w);
      vstore(C + r * ldc + 16 * w, x);
    }
}

template <int W, bool kTA>
LB_FORCE_INLINE void mm_strip(int64_t M, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                              int64_t ldc, float alpha, bool acc) {
  const int64_t step = kTA ? 1 : lda;  // from one row of op(A) to the next
  int64_t i = 0;
  for (; i + 4 <= M; i += 4) mm_tile<4, W, kTA>(K, A + i * step, lda, B, ldb, C + i * ldc, ldc, alpha, acc);
  for (; i < M; ++i) mm_tile<1, W, kTA>(K, A + i * step, lda, B, ldb, C + i * ldc, ldc, alpha, acc);
}

// C (M x N, ldc) = (acc ? C : 0) + alpha * op(A) (M x K) B (K x N, ldb). kWide: columns per strip / 16.
template <int kWide, bool kTA>
LB_FORCE_INLINE void mm_impl(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                             float* C, int64_t ldc, float alpha, bool acc) {
  int64_t j = 0;
  for (; j + 16 * kWide <= N; j += 16 * kWide)
    mm_strip<kWide, kTA>(M, K, A, lda, B + j, ldb, C + j, ldc, alpha, acc);
  for (; j + 16 <= N; j += 16) mm_strip<1, kTA>(M, K, A, lda, B + j, ldb, C + j, ldc, alpha, acc);
  for (int64_t i = 0; i < M && j < N; ++i)  // the last N % 16 columns
    for (int64_t jj = j; jj < N; ++jj) {
      float s = 0;
      for (int64_t p = 0; p < K; ++p) s += (kTA ? A[p * lda + i] : A[i * lda + p]) * B[p * ldb + jj];
      C[i * ldc + jj] = (acc ? C[i * ldc + jj] : 0.0f) + alpha * s;
    }
}

#define LB_MM_PARAMS                                                                                                  \
  (bool ta, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,     \
   int64_t ldc, float alpha, bool acc)
#define LB_MM_ARGS (M, N, K, A, lda, B, ldb, C, ldc, alpha, acc)
// AVX-512: 4 x 64 tiles, 16 of the 32 zmm registers; AVX2 and baseline: 4 x 16.
LB_TARGET_AVX512 void mm_avx512 LB_MM_PARAMS {
  if (ta) mm_impl<4, true> LB_MM_ARGS; else mm_impl<4, false> LB_MM_ARGS;
}
LB_TARGET_AVX2 void mm_avx2 LB_MM_PARAMS {
  if (ta) mm_impl<1, true> LB_MM_ARGS; else mm_impl<1, false> LB_MM_ARGS;
}
void mm_base LB_MM_PARAMS {
  if (ta) mm_impl<1, true> LB_MM_ARGS; else mm_impl<1, false> LB_MM_ARGS;
}
#undef LB_MM_ARGS
#define LB_MM_ARGS (ta, M, N, K, A, lda, B, ldb, C, ldc, alpha, acc)
void mm_isa(Isa isa, bool ta, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
            float* C, int64_t ldc, float alpha, bool acc) {
  switch (isa) {
    case Isa::kAvx512: mm_avx512 LB_MM_ARGS; return;
    case Isa::kAvx2: mm_avx2 LB_MM_ARGS; return;
    default: mm_base LB_MM_ARGS; return;
  }
}
// C = (acc ? C : 0) + alpha A B, and with mm_tn the transpose of A (K x M, lda) in A's place.
void mm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
        int64_t ldc, float alpha, bool acc) {
  mm_isa(cpu_isa(), false, M, N, K, A, lda, B, ldb, C, ldc, alpha, acc);
}
void mm_tn(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
           int64_t ldc, float alpha, bool acc) {
  mm_isa(cpu_isa(), true, M, N, K, A, lda, B, ldb, C, ldc, alpha, acc);
}
#undef LB_MM_PARAMS
#undef LB_MM_ARGS

// dst (cols x rows, ldd) = src^T, src (rows x cols, lds), in 16 x 16 tiles (a column of dst at a time would
// touch a new cache line with every store).
void transpose(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst, int64_t ldd) {
  constexpr int64_t kTile = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
    }
}

// ---- the tensors ---------------------------------------------------------------------------------------

// Rows of a (B, T, H, d) CPU tensor (fp32 or bf16; any strides but the last, which must be 1), as fp32.
struct Rows {
  char* base = nullptr;
  bool bf16 = false;
  int64_t sb = 0, st = 0, sh = 0, d = 1;

  explicit Rows(const at::Tensor& t) {
    const bool ok4 = t.dim() == 4 && t.stride(3) == 1, ok3 = t.dim() == 3;
    LB_CHECK((ok4 || ok3) && t.device().is_cpu() &&
                 (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16),
             "delta_rule (CPU kernel): expected fp32 or bf16 CPU tensors with contiguous rows");
    base = static_cast<char*>(t.data_ptr());
    bf16 = t.scalar_type() == at::kBFloat16;
    sb = t.stride(0);
    st = t.stride(1);
    sh = t.stride(2);
    d = ok4 ? t.size(3) : 1;
  }
  int64_t offset(int64_t b, int64_t t, int64_t h) const { return b * sb + t * st + h * sh; }
  void load(int64_t b, int64_t t, int64_t h, float* dst) const {
    const int64_t o = offset(b, t, h);
    if (bf16) {
      const uint16_t* src = reinterpret_cast<const uint16_t*>(base) + o;
      for (int64_t i = 0; i < d; ++i) dst[i] = simd::ld(src[i]);
    } else {
      std::memcpy(dst, reinterpret_cast<const float*>(base) + o, d * sizeof(float));
    }
  }
  float load1(int64_t b, int64_t t, int64_t h) const {
    const int64_t o = offset(b, t, h);
    return bf16 ? simd::ld(reinterpret_cast<const uint16_t*>(base)[o]) : reinterpret_cast<const float*>(base)[o];
  }
  void store(int64_t b, int64_t t, int64_t h, const float* src) const {
    const int64_t o = offset(b, t, h);
    if (bf16) {
      uint16_t* dst = reinterpret_cast<uint16_t*>(base) + o;
      for (int64_t i = 0; i < d; ++i) simd::st(dst + i, src[i]);
    } else {
      std::memcpy(reinterpret_cast<float*>(base) + o, src, d * sizeof(float));
    }
  }
  void store1(int64_t b, int64_t t, int64_t h, float x) const { store(b, t, h, &x); }
};

struct Dims {
  int64_t B, T, Hk, Hv, rep, dk, dv, C, NC;
  float scale;
  Dims(const at::Tensor& q, const at::Tensor& v, int64_t chunk)
      : B(q.size(0)), T(q.size(1)), Hk(q.size(2)), Hv(v.size(2)), rep(v.size(2) / q.size(2)), dk(q.size(3)),
        dv(v.size(3)), C(chunk), NC((q.size(1) + chunk - 1) / chunk),
        scale(float(1.0 / std::sqrt(double(q.size(3))))) {}
  int64_t rows(int64_t c) const { return std::min(C, T - c * C); }
};

constexpr float kL2Eps = 1e-6f;

// The rows of one (b, key head) of x, L2-normalised and multiplied by `mul` (T x dk); rstd (T) when asked.
void load_normalised(const Rows& x, const Dims& z, int64_t b, int64_t h, float mul, float* out, float* rstd) {
  for (int64_t t = 0; t < z.T; ++t) {
    float* row = out + t * z.dk;
    x.load(b, t, h, row);
    float ss = 0;
    for (int64_t i = 0; i < z.dk; ++i) ss += row[i] * row[i];
    const float r = 1.0f / std::sqrt(ss + kL2Eps);
    if (rstd) rstd[t] = r;
    for (int64_t i = 0; i < z.dk; ++i) row[i] *= r * mul;
  }
}

// A bump allocator over one thread's scratch: one fp32 tensor from ATen's CPU allocator, so the run's memory
// accounting (and the planner's probe) sees it like every other buffer of the step.
struct Arena {
  at::Tensor buf;
  float* base = nullptr;
  int64_t size = 0, used = 0;
  explicit Arena(int64_t floats) : buf(at::empty({floats}, at::kFloat)), base(buf.data_ptr<float>()), size(floats) {}
  float* take(int64_t n) {
    float* p = base + used;
    used += n;
    LB_CHECK(used <= size, "delta_rule (CPU kernel): scratch too small");
    return p;
  }
};

// What a chunk needs from its inputs alone (not from the state), for value head h: row-major, C x C blocks with
// row stride C; n <= C rows.
struct Chunk {
  int64_t n = 0;
  float *G, *E, *F, *beta;  // (n) cumulative log decay, exp(G), exp(G_last - G), beta
  float eC = 1;             // exp(G_last)
  float *D, *KK, *QK, *Ti;  // (C x C): exp(G_i - G_j) (j <= i, else 0), K K^T, Q K^T, L^-1
  float *U, *W;             // L^-1 diag(beta) V (n x dv), L^-1 diag(beta E) K (n x dk)

  static int64_t floats(const Dims& z) { return 4 * z.C + 4 * z.C * z.C + z.C * (z.dv + z.dk); }
  void carve(Arena& a, const Dims& z) {
    G = a.take(z.C), E = a.take(z.C), F = a.take(z.C), beta = a.take(z.C);
    D = a.take(z.C * z.C), KK = a.take(z.C * z.C), QK = a.take(z.C * z.C), Ti = a.take(z.C * z.C);
    U = a.take(z.C * z.dv), W = a.take(z.C * z.dk);
  }
};

// Per-task temporaries: one chunk's worth of each.
struct Scratch {
  float *Kt, *X, *Y, *Vb, *S, *O, *Vn;
  static int64_t floats(const Dims& z) {
    const int64_t m = std::max({z.C, z.dk, z.dv});
    return 3 * m * m + z.C * z.dv * 3 + z.dk * z.dv;
  }
  void carve(Arena& a, const Dims& z) {
    const int64_t m = std::max({z.C, z.dk, z.dv});
    Kt = a.take(m * m), X = a.take(m * m), Y = a.take(m * m);
    Vb = a.take(z.C * z.dv), O = a.take(z.C * z.dv), Vn = a.take(z.C * z.dv), S = a.take(z.dk * z.dv);
  }
};

// Fills ch for chunk c of value head h of batch row b: Q, K the chunk's normalised rows (n x dk, ld dk).
void build_chunk(const Dims& z, const Rows& v, const Rows& g, const Rows& beta, int64_t b, int64_t h, int64_t c,
                 const float* Q, const float* K, Chunk& ch, Scratch& s) {
  const int64_t n = z.rows(c), C = z.C, dk = z.dk, dv = z.dv, t0 = c * C;
  ch.n = n;
  float acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc += g.load1(b, t0 + i, h);
    ch.G[i] = acc;
    ch.beta[i] = beta.load1(b, t0 + i, h);
  }
  const float last = ch.G[n - 1];
  for (int64_t i = 0; i < n; ++i) {
    ch.E[i] = std::exp(ch.G[i]);
    ch.F[i] = std::exp(last - ch.G[i]);
  }
  ch.eC = std::exp(last);
  for (int64_t i = 0; i < n; ++i) {
    float* d = ch.D + i * C;
    const float gi = ch.G[i];
    for (int64_t j = 0; j <= i; ++j) d[j] = fast_exp(gi - ch.G[j]);
    for (int64_t j = i + 1; j < n; ++j) d[j] = 0;
  }
  transpose(K, n, dk, dk, s.Kt, C);  // K^T (dk x n, ld C)
  mm(n, n, dk, K, dk, s.Kt, C, ch.KK, C, 1, false);
  mm(n, n, dk, Q, dk, s.Kt, C, ch.QK, C, 1, false);
  // L^-1 by forward substitution, row i of Ti = e_i - sum_{j<i} A_ij Ti_j, A = beta_i KK_ij D_ij (j < i).
  for (int64_t i = 0; i < n; ++i) {
    float* ti = ch.Ti + i * C;
    for (int64_t j = 0; j < n; ++j) ti[j] = 0;
    ti[i] = 1;
    for (int64_t j = 0; j < i; ++j) {
      const float a = ch.beta[i] * ch.KK[i * C + j] * ch.D[i * C + j];
      const float* tj = ch.Ti + j * C;
      for (int64_t m = 0; m <= j; ++m) ti[m] -= a * tj[m];
    }
  }
  for (int64_t i = 0; i < n; ++i) {  // diag(beta) V and diag(beta E) K
    v.load(b, t0 + i, h, s.Vb + i * dv);
    for (int64_t m = 0; m < dv; ++m) s.Vb[i * dv + m] *= ch.beta[i];
    const float be = ch.beta[i] * ch.E[i];
    for (int64_t m = 0; m < dk; ++m) s.X[i * dk + m] = be * K[i * dk + m];
  }
  mm(n, dv, n, ch.Ti, C, s.Vb, dv, ch.U, dv, 1, false);
  mm(n, dk, n, ch.Ti, C, s.X, dk, ch.W, dk, 1, false);
}

// One chunk of the scan: Vn = U - W S, O = diag(E) Q S + (QK * D) Vn, S = eC S + (diag(F) K)^T Vn.
void scan_chunk(const Dims& z, const Chunk& ch, const float* Q, const float* K, float* S, float* Vn, float* O,
                Scratch& s) {
  const int64_t n = ch.n, C = z.C, dk = z.dk, dv = z.dv;
  std::memcpy(Vn, ch.U, n * dv * sizeof(float));
  mm(n, dv, dk, ch.W, dk, S, dv, Vn, dv, -1, true);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t m = 0; m < dk; ++m) s.X[i * dk + m] = ch.E[i] * Q[i * dk + m];
  mm(n, dv, dk, s.X, dk, S, dv, O, dv, 1, false);
  for (int64_t i = 0; i < n; ++i)  // P = QK * D (D is 0 above the diagonal)
    for (int64_t j = 0; j < n; ++j) s.Y[i * C + j] = ch.QK[i * C + j] * ch.D[i * C + j];
  mm(n, dv, n, s.Y, C, Vn, dv, O, dv, 1, true);
  for (int64_t i = 0; i < n; ++i)  // diag(F) K
    for (int64_t m = 0; m < dk; ++m) s.X[i * dk + m] = ch.F[i] * K[i * dk + m];
  for (int64_t e = 0; e < dk * dv; ++e) S[e] *= ch.eC;
  mm_tn(dk, dv, n, s.X, dk, Vn, dv, S, dv, 1, true);
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                  const at::Tensor& beta, int64_t chunk) {
  LB_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.dim() == 4 && v.size(0) == q.size(0) &&
               v.size(1) == q.size(1) && v.size(2) % q.size(2) == 0 && g.dim() == 3 && g.size(0) == v.size(0) &&
               g.size(1) == v.size(1) && g.size(2) == v.size(2) && beta.sizes() == g.sizes(),
           "delta_rule: inconsistent shapes of q, k, v, g, beta");
  LB_CHECK(chunk > 0 && q.size(1) > 0, "delta_rule: needs a positive chunk size and at least one token");
}

// Tensors with the last dimension contiguous (the layer's column slices are): others are copied.
at::Tensor rows_contiguous(const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

}  // namespace

void block_product(Isa isa, bool transpose_a, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float* C, int64_t ldc, float alpha, bool acc) {
  mm_isa(isa, transpose_a, M, N, K, A, lda, B, ldb, C, ldc, alpha, acc);
}

at::Tensor forward(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const at::Tensor& g_in,
                   const at::Tensor& beta_in, int64_t chunk) {
  ProfileScope scope("lb::delta_rule");
  check_inputs(q_in, k_in, v_in, g_in, beta_in, chunk);
  const at::Tensor q = rows_contiguous(q_in), k = rows_contiguous(k_in), v = rows_contiguous(v_in);
  const at::Tensor g = g_in.contiguous(), beta = beta_in.contiguous();
  const Dims z(q, v, chunk);
  at::Tensor out = at::empty(v.sizes(), v.options().memory_format(at::MemoryFormat::Contiguous));
  const Rows rq(q), rk(k), rv(v), rg(g), rb(beta), ro(out);
  at::parallel_for(0, z.B * z.Hk, 1, [&](int64_t begin, int64_t end) {
    Arena a(2 * z.T * z.dk + Chunk::floats(z) + Scratch::floats(z));
    float* Qn = a.take(z.T * z.dk);
    float* Kn = a.take(z.T * z.dk);
    Chunk ch;
    ch.carve(a, z);
    Scratch s;
    s.carve(a, z);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / z.Hk, hk = task % z.Hk;
      load_normalised(rq, z, b, hk, z.scale, Qn, nullptr);
      load_normalised(rk, z, b, hk, 1.0f, Kn, nullptr);
      for (int64_t r = 0; r < z.rep; ++r) {
        const int64_t h = hk * z.rep + r;
        std::fill(s.S, s.S + z.dk * z.dv, 0.0f);
        for (int64_t c = 0; c < z.NC; ++c) {
          const float* Q = Qn + c * z.C * z.dk;
          const float* K = Kn + c * z.C * z.dk;
          build_chunk(z, rv, rg, rb, b, h, c, Q, K, ch, s);
          scan_chunk(z, ch, Q, K, s.S, s.Vn, s.O, s);
          for (int64_t i = 0; i < ch.n; ++i) ro.store(b, c * z.C + i, h, s.O + i * z.dv);
        }
      }
    }
  });
  return out;
}

Grads backward(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const at::Tensor& g_in,
               const at::Tensor& beta_in, const at::Tensor& dout_in, int64_t chunk) {
  ProfileScope scope("lb::delta_rule");
  check_inputs(q_in, k_in, v_in, g_in, beta_in, chunk);
  LB_CHECK(dout_in.sizes() == v_in.sizes(), "delta_rule: dout must have v's shape");
  const at::Tensor q = rows_contiguous(q_in), k = rows_contiguous(k_in), v = rows_contiguous(v_in);
  const at::Tensor g = g_in.contiguous(), beta = beta_in.contiguous(), dout = rows_contiguous(dout_in);
  const Dims z(q, v, chunk);
  const int64_t C = z.C, dk = z.dk, dv = z.dv;
  Grads out;
  out.dq = at::empty(q.sizes(), q.options().memory_format(at::MemoryFormat::Contiguous));
  out.dk = at::empty(k.sizes(), k.options().memory_format(at::MemoryFormat::Contiguous));
  out.dv = at::empty(v.sizes(), v.options().memory_format(at::MemoryFormat::Contiguous));
  out.dg = at::empty(g.sizes(), g.options());
  out.dbeta = at::empty(beta.sizes(), beta.options());
  const Rows rq(q), rk(k), rv(v), rg(g), rb(beta), rdo(dout);
  const Rows rdq(out.dq), rdk(out.dk), rdv(out.dv), rdg(out.dg), rdb(out.dbeta);
  const int64_t per_chunk = Chunk::floats(z) + C * dv + dk * dv;  // the chunk, its new values, the state entering it
  at::parallel_for(0, z.B * z.Hk, 1, [&](int64_t begin, int64_t end) {
    const int64_t m = std::max({C, dk, dv});
    Arena a(4 * z.T * dk + 2 * dk + z.T * 2 + z.NC * per_chunk + Scratch::floats(z) + 12 * m * m + C);
    float* Qn = a.take(z.T * dk);
    float* Kn = a.take(z.T * dk);
    float* dQ = a.take(z.T * dk);  // d(scaled normalised q), summed over the key head's value heads
    float* dK = a.take(z.T * dk);
    float* rsq = a.take(z.T);
    float* rsk = a.take(z.T);
    float* oq = a.take(dk);  // one row of dq, dk in fp32 before it is stored in the input's dtype
    float* ok = a.take(dk);
    std::vector<Chunk> chunks(size_t(z.NC));
    std::vector<float*> S0(size_t(z.NC)), Vn(size_t(z.NC));
    for (int64_t c = 0; c < z.NC; ++c) {
      chunks[size_t(c)].carve(a, z);
      Vn[size_t(c)] = a.take(C * dv);
      S0[size_t(c)] = a.take(dk * dv);
    }
    Scratch s;
    s.carve(a, z);
    float* dO = a.take(C * dv);
    float* dVn = a.take(C * dv);
    float* dS = a.take(dk * dv);
    float* dKd = a.take(C * dk);
    float* dQe = a.take(C * dk);
    float* dW = a.take(C * dk);
    float* dVb = a.take(C * dv);
    float* dXw = a.take(C * dk);
    float* dP = a.take(m * m);
    float* dM = a.take(m * m);
    float* T1 = a.take(m * m);
    float* dKb = a.take(C * dk);
    float* dG = a.take(C);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / z.Hk, hk = task % z.Hk;
      load_normalised(rq, z, b, hk, z.scale, Qn, rsq);
      load_normalised(rk, z, b, hk, 1.0f, Kn, rsk);
      std::fill(dQ, dQ + z.T * dk, 0.0f);
      std::fill(dK, dK + z.T * dk, 0.0f);
      for (int64_t r = 0; r < z.rep; ++r) {
        const int64_t h = hk * z.rep + r;
        // The forward sweep, keeping each chunk and the state entering it.
        std::fill(s.S, s.S + dk * dv, 0.0f);
        for (int64_t c = 0; c < z.NC; ++c) {
          const float* Q = Qn + c * C * dk;
          const float* K = Kn + c * C * dk;
          Chunk& ch = chunks[size_t(c)];
          build_chunk(z, rv, rg, rb, b, h, c, Q, K, ch, s);
          std::memcpy(S0[size_t(c)], s.S, dk * dv * sizeof(float));
          if (c + 1 < z.NC) scan_chunk(z, ch, Q, K, s.S, Vn[size_t(c)], s.O, s);
          else {  // the last chunk's new values only: its state and outputs are not needed
            std::memcpy(Vn[size_t(c)], ch.U, ch.n * dv * sizeof(float));
            mm(ch.n, dv, dk, ch.W, dk, s.S, dv, Vn[size_t(c)], dv, -1, true);
          }
        }
        // The reverse sweep: dS enters chunk c from chunk c + 1.
        std::fill(dS, dS + dk * dv, 0.0f);
        for (int64_t c = z.NC - 1; c >= 0; --c) {
          const Chunk& ch = chunks[size_t(c)];
          const int64_t n = ch.n, t0 = c * C;
          const float* Q = Qn + t0 * dk;
          const float* K = Kn + t0 * dk;
          const float* vn = Vn[size_t(c)];
          const float* s0 = S0[size_t(c)];
          for (int64_t i = 0; i < n; ++i) rdo.load(b, t0 + i, h, dO + i * dv);
          // P = QK * D into Y (D is 0 above the diagonal); dVn = P^T dO + diag(F) K dS
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) s.Y[i * C + j] = ch.QK[i * C + j] * ch.D[i * C + j];
          mm_tn(n, dv, n, s.Y, C, dO, dv, dVn, dv, 1, false);
          for (int64_t i = 0; i < n; ++i)
            for (int64_t e = 0; e < dk; ++e) s.X[i * dk + e] = ch.F[i] * K[i * dk + e];
          mm(n, dv, dk, s.X, dk, dS, dv, dVn, dv, 1, true);
          // dKd = Vn dS^T
          transpose(dS, dk, dv, dv, s.Kt, dk);  // dS^T (dv x dk)
          mm(n, dk, dv, vn, dv, s.Kt, dk, dKd, dk, 1, false);
          float deC = 0;
          for (int64_t e = 0; e < dk * dv; ++e) deC += s0[e] * dS[e];
          // dS <- eC dS + (diag(E) Q)^T dO - W^T dVn
          for (int64_t e = 0; e < dk * dv; ++e) dS[e] *= ch.eC;
          for (int64_t i = 0; i < n; ++i)
            for (int64_t e = 0; e < dk; ++e) s.X[i * dk + e] = ch.E[i] * Q[i * dk + e];
          mm_tn(dk, dv, n, s.X, dk, dO, dv, dS, dv, 1, true);
          mm_tn(dk, dv, n, ch.W, dk, dVn, dv, dS, dv, -1, true);
          // The chunk's own gradients. S0^T (dv x dk) into X.
          transpose(s0, dk, dv, dv, s.X, dk);
          mm(n, dk, dv, dO, dv, s.X, dk, dQe, dk, 1, false);   // dQe = dO S0^T
          mm(n, dk, dv, dVn, dv, s.X, dk, dW, dk, -1, false);  // dW = -dVn S0^T
          transpose(vn, n, dv, dv, s.Kt, C);                   // Vn^T (dv x n)
          mm(n, n, dv, dO, dv, s.Kt, C, dP, C, 1, false);      // dO Vn^T, then * D below the diagonal
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) dP[i * C + j] *= ch.D[i * C + j];
          mm_tn(n, dv, n, ch.Ti, C, dVn, dv, dVb, dv, 1, false);  // dVb = L^-T dVn
          mm_tn(n, dk, n, ch.Ti, C, dW, dk, dXw, dk, 1, false);   // dXw = L^-T dW
          transpose(ch.U, n, dv, dv, s.Kt, C);                 // U^T (dv x n)
          mm(n, n, dv, dVb, dv, s.Kt, C, dM, C, -1, false);
          transpose(ch.W, n, dk, dk, s.Kt, C);                 // W^T (dk x n)
          mm(n, n, dk, dXw, dk, s.Kt, C, dM, C, -1, true);
          // dMD = dM * D, strictly lower (into dM); Gd = dP * QK + dMD * beta_i KK (into T1).
          for (int64_t i = 0; i < n; ++i) {
            float* dm = dM + i * C;
            const float* d = ch.D + i * C;
            for (int64_t j = 0; j < i; ++j) dm[j] *= d[j];
            for (int64_t j = i; j < n; ++j) dm[j] = 0.0f;
            for (int64_t j = 0; j < n; ++j) T1[i * C + j] = dP[i * C + j] * ch.QK[i * C + j] + dm[j] * ch.beta[i] * ch.KK[i * C + j];
          }
          // Kb = diag(beta) K into X; dKb = dMD K + dXw * E
          for (int64_t i = 0; i < n; ++i)
            for (int64_t e = 0; e < dk; ++e) {
              s.X[i * dk + e] = ch.beta[i] * K[i * dk + e];
              dKb[i * dk + e] = dXw[i * dk + e] * ch.E[i];
            }
          mm(n, dk, n, dM, C, K, dk, dKb, dk, 1, true);
          // dq += dP K + dQe * E
          float* dq = dQ + t0 * dk;
          float* dkk = dK + t0 * dk;
          mm(n, dk, n, dP, C, K, dk, dq, dk, 1, true);
          for (int64_t i = 0; i < n; ++i)
            for (int64_t e = 0; e < dk; ++e) dq[i * dk + e] += dQe[i * dk + e] * ch.E[i];
          // dk += dMD^T Kb + dP^T Q + dKd * F + dKb * beta
          mm_tn(n, dk, n, dM, C, s.X, dk, dkk, dk, 1, true);
          mm_tn(n, dk, n, dP, C, Q, dk, dkk, dk, 1, true);
          float to_last = deC * ch.eC;
          for (int64_t i = 0; i < n; ++i) {
            float via_f = 0, xw = 0, qe = 0, bk = 0, vb = 0;
            float* vrow = s.Vb;  // v's row i
            rv.load(b, t0 + i, h, vrow);
            for (int64_t e = 0; e < dk; ++e) {
              const float kv = K[i * dk + e];
              dkk[i * dk + e] += dKd[i * dk + e] * ch.F[i] + dKb[i * dk + e] * ch.beta[i];
              via_f += dKd[i * dk + e] * kv;
              xw += dXw[i * dk + e] * s.X[i * dk + e];
              qe += dQe[i * dk + e] * Q[i * dk + e];
              bk += dKb[i * dk + e] * kv;
            }
            for (int64_t e = 0; e < dv; ++e) {
              vb += dVb[i * dv + e] * vrow[e];
              s.O[e] = dVb[i * dv + e] * ch.beta[i];
            }
            rdv.store(b, t0 + i, h, s.O);
            rdb.store1(b, t0 + i, h, vb + bk);
            via_f *= ch.F[i];
            to_last += via_f;
            dG[i] = (xw + qe) * ch.E[i] - via_f;
          }
          dG[n - 1] += to_last;
          for (int64_t i = 0; i < n; ++i) {
            float row = 0, col = 0;
            for (int64_t j = 0; j < n; ++j) {
              row += T1[i * C + j];
              col += T1[j * C + i];
            }
            dG[i] += row - col;
          }
          float run = 0;  // the cumulative sum's adjoint: a reverse cumulative sum
          for (int64_t i = n - 1; i >= 0; --i) {
            run += dG[i];
            rdg.store1(b, t0 + i, h, run);
          }
        }
      }
      // Through the scale and the L2 norms: dx = r (dxn - xn (xn . dxn)) with xn the unscaled normalised rows.
      for (int64_t t = 0; t < z.T; ++t) {
        float* qrow = Qn + t * dk;
        float* krow = Kn + t * dk;
        float* dqr = dQ + t * dk;
        float* dkr = dK + t * dk;
        float dotq = 0, dotk = 0;
        for (int64_t e = 0; e < dk; ++e) {
          dqr[e] *= z.scale;
          qrow[e] /= z.scale;
          dotq += qrow[e] * dqr[e];
          dotk += krow[e] * dkr[e];
        }
        for (int64_t e = 0; e < dk; ++e) {
          oq[e] = rsq[t] * (dqr[e] - qrow[e] * dotq);
          ok[e] = rsk[t] * (dkr[e] - krow[e] * dotk);
        }
        rdq.store(b, t, hk, oq);
        rdk.store(b, t, hk, ok);
      }
    }
  });
  return out;
}

}  // namespace lorabench::model::delta_rule::cpu
