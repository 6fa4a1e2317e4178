#include "attention_cpu.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels.hpp"
#include "lorabench/core/error.hpp"

namespace lorabench::model::cpu_attention {

// libtorch releases whose CPUBlas.h announces brgemm for bf16 and fp32 (with fp32 results); with older ones
// the blocked kernel runs only with the reference block product, and auto never picks it.
#if defined(CPUBLAS_BRGEMM_BF16BF16F32) && defined(CPUBLAS_BRGEMM_F32F32F32)
#define LB_HAVE_BRGEMM 1
#else
#define LB_HAVE_BRGEMM 0
#endif

namespace {

using bf16 = c10::BFloat16;
constexpr int64_t kRows = 32;  // query rows per block

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
uint16_t* bits(bf16* p) { return reinterpret_cast<uint16_t*>(p); }
const uint16_t* bits(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }

// C (M x N, row stride ldc) = A (M x K, lda) B, or += with add. bf16: B in pairs of rows, [K/2][ldb][2] with
// K even (brgemm's VNNI layout); fp32: B (K x N, ldb) as it is.
struct Gemm {
  BlockGemm kind;

  void operator()(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, bool add, const bf16* A,
                  const bf16* B, float* C) const {
    if (kind == BlockGemm::kBrgemm) {
      brgemm(M, N, K, lda, ldb, ldc, add, A, B, C);  // B in pairs of rows (brgemm's is_vnni, the bf16 default)
      return;
    }
    const at::Tensor a = at::from_blob(const_cast<bf16*>(A), {M, K}, {lda, 1}, at::kBFloat16).to(at::kFloat);
    const at::Tensor b = at::from_blob(const_cast<bf16*>(B), {K / 2, N, 2}, {2 * ldb, 2, 1}, at::kBFloat16)
                             .permute({0, 2, 1})
                             .reshape({K, N})
                             .to(at::kFloat);
    store(M, N, ldc, add, at::mm(a, b), C);
  }
  void operator()(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, bool add, const float* A,
                  const float* B, float* C) const {
    if (kind == BlockGemm::kBrgemm) {
      brgemm(M, N, K, lda, ldb, ldc, add, A, B, C);  // B as it is (the fp32 default)
      return;
    }
    const at::Tensor a = at::from_blob(const_cast<float*>(A), {M, K}, {lda, 1}, at::kFloat);
    const at::Tensor b = at::from_blob(const_cast<float*>(B), {K, N}, {ldb, 1}, at::kFloat);
    store(M, N, ldc, add, at::mm(a, b), C);
  }
  static void store(int64_t M, int64_t N, int64_t ldc, bool add, const at::Tensor& r, float* C) {
    at::Tensor c = at::from_blob(C, {M, N}, {ldc, 1}, at::kFloat);
    if (add)
      c.add_(r);
    else
      c.copy_(r);
  }
  // brgemm keeps per-thread state (AMX tile configuration where it uses AMX); handed back after each task.
  void release() const {
#if LB_HAVE_BRGEMM
    if (kind == BlockGemm::kBrgemm) at::native::cpublas::brgemm_release();
#endif
  }

 private:
  template <class T>
  static void brgemm(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, bool add, const T* A,
                     const T* B, float* C) {
#if LB_HAVE_BRGEMM
    at::native::cpublas::brgemm(M, N, K, lda, ldb, ldc, add, A, B, C);
#else
    LB_CHECK(false, "blocked CPU attention: this libtorch has no brgemm for bf16 and fp32");
#endif
  }
};

// dst[p][t][j] = src[t][2p + j] for t < rows (src: rows x d, row stride ld_src): src^T in pairs of rows, the B
// of a product over d. dst's row stride is ld_dst (>= rows).
void pack_transposed(const bf16* src, int64_t ld_src, int64_t rows, int64_t d, bf16* dst, int64_t ld_dst) {
  for (int64_t p = 0; p < d / 2; ++p)
    for (int64_t t = 0; t < rows; ++t) std::memcpy(dst + 2 * (p * ld_dst + t), src + t * ld_src + 2 * p, 4);
}

// dst[p][c][j] = src[2p + j][c] for c < cols, zero for rows >= rows up to rows_pad (even): src in pairs of
// rows, the B of a product over its rows. dst's row stride is ld_dst (>= cols).
void pack_rows(const bf16* src, int64_t ld_src, int64_t rows, int64_t rows_pad, int64_t cols, bf16* dst,
               int64_t ld_dst) {
  for (int64_t p = 0; p < rows_pad / 2; ++p) {
    bf16* out = dst + 2 * p * ld_dst;
    for (int j = 0; j < 2; ++j) {
      const int64_t r = 2 * p + j;
      if (r < rows)
        for (int64_t c = 0; c < cols; ++c) out[2 * c + j] = src[r * ld_src + c];
      else
        for (int64_t c = 0; c < cols; ++c) out[2 * c + j] = bf16(0.0f);
    }
  }
}

// dst[c][r] = src[r][c] (rows x cols, src row stride ld_src) as T, zero for rows <= r < rows_pad; dst's row
// stride is ld_dst.
template <class T>
void transpose(const bf16* src, int64_t ld_src, int64_t rows, int64_t rows_pad, int64_t cols, T* dst, int64_t ld_dst) {
  for (int64_t c = 0; c < cols; ++c) {
    T* out = dst + c * ld_dst;
    for (int64_t r = 0; r < rows; ++r) out[r] = T(src[r * ld_src + c]);
    for (int64_t r = rows; r < rows_pad; ++r) out[r] = T(0.0f);
  }
}

void check_input(const at::Tensor& t, const char* what) {
  LB_CHECK(t.device().is_cpu() && t.scalar_type() == at::kBFloat16 && t.is_contiguous(),
           std::string("blocked CPU attention: ") + what + " must be a contiguous bf16 CPU tensor");
}

struct Dims {
  int64_t B, T, H, K, d, ld, G, Tp, Te;
  float scale;
  Dims(int64_t B_, int64_t T_, int64_t H_, int64_t K_, int64_t d_)
      : B(B_), T(T_), H(H_), K(K_), d(d_), ld((H_ + 2 * K_) * d_), G(H_ / K_), Tp(round_up(T_, 16)),
        Te(round_up(T_, 2)), scale(float(1.0 / std::sqrt(double(d_)))) {
    LB_CHECK(H % K == 0 && d % 2 == 0, "blocked CPU attention: needs H a multiple of K and d even");
  }
};

}  // namespace

bool brgemm_available() {
  static const bool ok = [] {
    __builtin_cpu_init();
    if (!LB_HAVE_BRGEMM || !__builtin_cpu_supports("avx512bf16")) return false;
    // A probe product of each kind against the reference: brgemm's bf16 route also needs libtorch built with
    // oneDNN's micro-kernels, which only a call shows.
    try {
      const int64_t M = 5, N = 24, Kd = 8;
      const at::Tensor a = at::arange(M * Kd, at::kFloat).div(7).sin().to(at::kBFloat16).view({M, Kd});
      const at::Tensor b = at::arange(Kd * N, at::kFloat).div(5).cos().to(at::kBFloat16).view({Kd, N});
      const at::Tensor bp = b.view({Kd / 2, 2, N}).permute({0, 2, 1}).contiguous();
      const at::Tensor af = a.to(at::kFloat), bf = b.to(at::kFloat);
      at::Tensor c1 = at::zeros({M, N}), c2 = at::zeros({M, N});
      const Gemm g{BlockGemm::kBrgemm};
      g(M, N, Kd, Kd, N, N, false, a.data_ptr<bf16>(), bp.data_ptr<bf16>(), c1.data_ptr<float>());
      g(M, N, Kd, Kd, N, N, false, af.data_ptr<float>(), bf.data_ptr<float>(), c2.data_ptr<float>());
      g.release();
      const at::Tensor want = at::mm(af, bf);
      return at::allclose(c1, want, 1e-5, 1e-5) && at::allclose(c2, want, 1e-5, 1e-5);
    } catch (const std::exception&) {
      return false;
    }
  }();
  return ok;
}

at::Tensor forward(const at::Tensor& qkv, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d, at::Tensor* lse,
                   BlockGemm kind) {
  check_input(qkv, "qkv");
  const Dims z(B, T, H, K, d);
  const Gemm gemm{kind};
  const bf16* x = qkv.data_ptr<bf16>();
  // Per batch row and key/value head: k^T in pairs over d (the scores' B), v in pairs of rows (the output's).
  at::Tensor kt = at::empty({B * K, d * z.Tp}, at::kBFloat16), vp = at::empty({B * K, z.Te * d}, at::kBFloat16);
  bf16* ktp = kt.data_ptr<bf16>();
  bf16* vpp = vp.data_ptr<bf16>();
  at::parallel_for(0, B * K, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t bg = i0; bg < i1; ++bg) {
      const bf16* rows = x + (bg / K) * T * z.ld;
      pack_transposed(rows + (H + bg % K) * d, z.ld, T, d, ktp + bg * d * z.Tp, z.Tp);
      pack_rows(rows + (H + K + bg % K) * d, z.ld, T, z.Te, d, vpp + bg * z.Te * d, d);
    }
  });
  at::Tensor out = at::empty({B * T, H * d}, at::kBFloat16);
  *lse = at::empty({B, H, T}, at::kFloat);
  bf16* op = out.data_ptr<bf16>();
  float* lp = lse->data_ptr<float>();
  at::parallel_for(0, B * H, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> S(kRows * z.Tp), O(kRows * d);
    std::vector<bf16> P(kRows * z.Tp);
    for (int64_t bh = i0; bh < i1; ++bh) {
      const int64_t b = bh / H, h = bh % H, bg = b * K + h / z.G;
      const bf16* q = x + b * T * z.ld + h * d;
      bf16* o = op + b * T * H * d + h * d;
      float* L = lp + bh * T;
      for (int64_t r0 = 0; r0 < T; r0 += kRows) {
        const int64_t m = std::min(kRows, T - r0), end = r0 + m, endp = round_up(end, 2);
        gemm(m, end, d, z.ld, z.Tp, z.Tp, false, q + r0 * z.ld, ktp + bg * d * z.Tp, S.data());
        for (int64_t r = 0; r < m; ++r)
          L[r0 + r] = kernels::attention_probs_row(S.data() + r * z.Tp, r0 + r + 1, endp, z.scale,
                                                   bits(P.data() + r * z.Tp));
        gemm(m, d, endp, z.Tp, d, d, false, P.data(), vpp + bg * z.Te * d, O.data());
        for (int64_t r = 0; r < m; ++r) kernels::round_row_bf16(O.data() + r * d, bits(o + (r0 + r) * H * d), d, 1.0f);
      }
    }
    gemm.release();
  });
  return out;
}

at::Tensor backward(const at::Tensor& dout_in, const at::Tensor& qkv, const at::Tensor& out, const at::Tensor& lse,
                    int64_t B, int64_t T, int64_t H, int64_t K, int64_t d, BlockGemm kind) {
  const at::Tensor dout = dout_in.contiguous();
  check_input(qkv, "qkv");
  check_input(dout, "d(out)");
  check_input(out, "out");
  LB_CHECK(lse.scalar_type() == at::kFloat && lse.is_contiguous() && lse.numel() == B * H * T,
           "blocked CPU attention: lse must be the forward's (B, H, T) fp32 log-sum-exp");
  const Dims z(B, T, H, K, d);
  const Gemm gemm{kind};
  const bf16* x = qkv.data_ptr<bf16>();
  const bf16* dop = dout.data_ptr<bf16>();
  const bf16* op = out.data_ptr<bf16>();
  const float* lp = lse.data_ptr<float>();
  // Per batch row and key/value head: k^T and v^T in pairs over d (the B of the scores and of dP = dO v^T),
  // k in fp32 (the B of dq = dS k).
  at::Tensor kt = at::empty({B * K, d * z.Tp}, at::kBFloat16), vt = at::empty({B * K, d * z.Tp}, at::kBFloat16);
  at::Tensor kf = at::empty({B * K, T * d}, at::kFloat);
  bf16* ktp = kt.data_ptr<bf16>();
  bf16* vtp = vt.data_ptr<bf16>();
  float* kfp = kf.data_ptr<float>();
  at::parallel_for(0, B * K, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t bg = i0; bg < i1; ++bg) {
      const bf16* rows = x + (bg / K) * T * z.ld;
      const int64_t g = bg % K;
      pack_transposed(rows + (H + g) * d, z.ld, T, d, ktp + bg * d * z.Tp, z.Tp);
      pack_transposed(rows + (H + K + g) * d, z.ld, T, d, vtp + bg * d * z.Tp, z.Tp);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < d; ++c) kfp[bg * T * d + t * d + c] = float(rows[t * z.ld + (H + g) * d + c]);
    }
  });
  // dk^T and dv^T of each query head (d x T, fp32), summed over each group of heads at the end.
  at::Tensor dkt = at::zeros({B * H, d * z.Tp}, at::kFloat), dvt = at::zeros({B * H, d * z.Tp}, at::kFloat);
  float* dktp = dkt.data_ptr<float>();
  float* dvtp = dvt.data_ptr<float>();
  at::Tensor dqkv = at::empty({B * T, z.ld}, at::kBFloat16);
  bf16* gp = dqkv.data_ptr<bf16>();
  at::parallel_for(0, B * H, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> S(kRows * z.Tp), dP(kRows * z.Tp), dS(kRows * z.Tp), dQ(kRows * d), Qt(d * kRows);
    std::vector<bf16> Pp(kRows * z.Tp), dOt(d * kRows);
    for (int64_t bh = i0; bh < i1; ++bh) {
      const int64_t b = bh / H, h = bh % H, bg = b * K + h / z.G;
      const bf16* q = x + b * T * z.ld + h * d;
      const bf16* dO = dop + b * T * H * d + h * d;
      const bf16* O = op + b * T * H * d + h * d;
      const float* L = lp + bh * T;
      bf16* dq = gp + b * T * z.ld + h * d;
      for (int64_t r0 = 0; r0 < T; r0 += kRows) {
        const int64_t m = std::min(kRows, T - r0), mp = round_up(m, 2), end = r0 + m;
        gemm(m, end, d, z.ld, z.Tp, z.Tp, false, q + r0 * z.ld, ktp + bg * d * z.Tp, S.data());
        gemm(m, end, d, H * d, z.Tp, z.Tp, false, dO + r0 * H * d, vtp + bg * d * z.Tp, dP.data());
        // Rows in pairs: P goes straight into brgemm's pair layout (pair r / 2 at Pp + r Tp). A lone last
        // row (m odd) pairs with a row of zeros; buffer row m exists then (m < kRows).
        for (int64_t r = 0; r < m; r += 2) {
          const int64_t t = r0 + r;
          const bool two = r + 1 < m;
          const float D0 = kernels::dot_row_bf16(bits(dO + t * H * d), bits(O + t * H * d), d);
          const float D1 = two ? kernels::dot_row_bf16(bits(dO + (t + 1) * H * d), bits(O + (t + 1) * H * d), d) : 0;
          const float* s0 = S.data() + r * z.Tp;
          const float* p0 = dP.data() + r * z.Tp;
          float* g0 = dS.data() + r * z.Tp;
          kernels::attention_grad_rows(s0, s0 + z.Tp, p0, p0 + z.Tp, t + 1, two ? t + 2 : 0, end, z.scale, L[t],
                                       two ? L[t + 1] : 0.0f, D0, D1, bits(Pp.data() + r * z.Tp), g0, g0 + z.Tp);
        }
        // dv^T += dO^T P (bf16 operands), over this block's rows.
        transpose(dO + r0 * H * d, H * d, m, mp, d, dOt.data(), kRows);
        gemm(d, end, mp, kRows, z.Tp, z.Tp, true, dOt.data(), Pp.data(), dvtp + bh * d * z.Tp);
        // dq = scale dS k and dk^T += scale q^T dS, in fp32.
        gemm(m, d, end, z.Tp, d, d, false, dS.data(), kfp + bg * T * d, dQ.data());
        for (int64_t r = 0; r < m; ++r)
          kernels::round_row_bf16(dQ.data() + r * d, bits(dq + (r0 + r) * z.ld), d, z.scale);
        transpose(q + r0 * z.ld, z.ld, m, m, d, Qt.data(), kRows);
        gemm(d, end, m, kRows, z.Tp, z.Tp, true, Qt.data(), dS.data(), dktp + bh * d * z.Tp);
      }
    }
    gemm.release();
  });
  // dk and dv of each key/value head: its group's sum, back to token-major rows.
  at::parallel_for(0, B * K, 1, [&](int64_t i0, int64_t i1) {
    const int64_t n = d * z.Tp;
    std::vector<float> acc(2 * n), col(d);
    for (int64_t bg = i0; bg < i1; ++bg) {
      const int64_t b = bg / K, g = bg % K;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < z.G; ++j) {
        const int64_t bh = b * H + g * z.G + j;
        for (int64_t i = 0; i < n; ++i) acc[i] += dktp[bh * n + i];
        for (int64_t i = 0; i < n; ++i) acc[n + i] += dvtp[bh * n + i];
      }
      for (int64_t t = 0; t < T; ++t) {
        bf16* row = gp + (b * T + t) * z.ld;
        for (int w = 0; w < 2; ++w) {
          for (int64_t c = 0; c < d; ++c) col[c] = acc[w * n + c * z.Tp + t];
          kernels::round_row_bf16(col.data(), bits(row + (H + w * K + g) * d), d, w == 0 ? z.scale : 1.0f);
        }
      }
    }
  });
  return dqkv;
}

}  // namespace lorabench::model::cpu_attention
