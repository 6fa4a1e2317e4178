// lorabench's fused CPU kernels against what libtorch itself offers for the same operation, on the 0.5B
// model's shapes (one micro-batch of 256 tokens), one thread: is a hand-written kernel still worth keeping?
// Each row times the fused kernel and the ATen replacement that would take its place (same numerics where
// ATen has them: fp32 compute, rounded once), best of N, and checks that the two agree before it prints.
// Causal attention (one layer's 14 query and 2 key/value heads of 64) compares lorabench's blocked bf16
// kernel with libtorch's CPU flash kernel as lorabench would otherwise call it (src/model/attention.cpp),
// where the CPU has AVX-512 BF16. The gated delta rule (one Qwen3.5-0.8B linear layer) compares its CPU kernel
// with lorabench's own ATen composition of the same algorithm (libtorch has none).
//
//   OMP_NUM_THREADS=1 build/bench/lorabench-kernels-vs-aten [--reps N]      (docs/performance.md)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include "bench_cli.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "../src/model/attention.hpp"
#include "../src/model/delta_rule.hpp"
#include "../src/model/qwen3_5_ops.hpp"
#include "../src/model/kernels.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/model/qwen2.hpp"
#include "lorabench/optim/adamw.hpp"

namespace k = lorabench::model::kernels;

namespace {

int g_reps = 15;

double best_ms(const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < g_reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor x = a.to(at::kFloat), y = b.to(at::kFloat);
  return (x - y).abs().max().item<double>() / std::max(y.abs().max().item<double>(), 1e-30);
}

void row(const char* op, const char* dtype, const char* aten_name, double fused, double aten, double rel, double tol) {
  if (!(rel <= tol)) {
    std::fprintf(stderr, "kernels_vs_aten: %s %s: fused and ATen differ by %.3g (> %.3g)\n", op, dtype, rel, tol);
    std::exit(1);
  }
  std::printf("| %s | %s | %s | %.3f | %.3f | %.2fx | %.1e |\n", op, dtype, aten_name, fused, aten, aten / fused, rel);
}

void run(at::ScalarType dt, const char* name) {
  const int64_t N = 256, D = 896, I = 4864;
  const double tol = dt == at::kFloat ? 1e-5 : 2e-2;
  const auto o = at::TensorOptions().dtype(dt);
  at::manual_seed(0);

  // SwiGLU: a = silu(g) * u over gu = [g | u] (N, 2I), and its backward.
  {
    at::Tensor gu = at::randn({N, 2 * I}, o), da = at::randn({N, I}, o);
    auto aten_fwd = [&] {
      at::Tensor g = gu.narrow(1, 0, I).to(at::kFloat), u = gu.narrow(1, I, I).to(at::kFloat);
      return (at::silu(g) * u).to(dt);
    };
    auto aten_bwd = [&] {
      at::Tensor g = gu.narrow(1, 0, I).to(at::kFloat), u = gu.narrow(1, I, I).to(at::kFloat);
      at::Tensor s = at::sigmoid(g), a = da.to(at::kFloat);
      return at::cat({a * u * s * (1 + g * (1 - s)), a * g * s}, 1).to(dt);
    };
    row("SwiGLU forward", name, "silu(g) * u (fp32)", best_ms([&] { k::swiglu_forward(true, gu); }), best_ms(aten_fwd),
        max_rel(k::swiglu_forward(true, gu), aten_fwd()), tol);
    row("SwiGLU backward", name, "composed (fp32)", best_ms([&] { k::swiglu_backward(true, gu, da); }), best_ms(aten_bwd),
        max_rel(k::swiglu_backward(true, gu, da), aten_bwd()), tol);
    // What the model's backward runs: the gradients and the forward's output (the down projection's input).
    at::Tensor a;
    const double rel_dgu = max_rel(k::swiglu_backward(true, gu, da, &a), aten_bwd());
    const double rel = std::max(rel_dgu, max_rel(a, aten_fwd()));
    row("SwiGLU backward + a", name, "composed backward + forward (fp32)",
        best_ms([&] { k::swiglu_backward(true, gu, da, &a); }), best_ms([&] {
          aten_bwd();
          aten_fwd();
        }), rel, tol);
  }
  // RMSNorm forward: libtorch's own at::rms_norm (computes in fp32 for reduced types).
  {
    at::Tensor x = at::randn({N, D}, o), w = at::rand({D}, o).add_(0.5);
    at::Tensor rstd;
    auto aten = [&] { return at::rms_norm(x, {D}, w, 1e-6); };
    row("RMSNorm forward", name, "at::rms_norm", best_ms([&] { k::rmsnorm_forward(true, x, w, 1e-6, &rstd); }),
        best_ms(aten), max_rel(k::rmsnorm_forward(true, x, w, 1e-6, &rstd), aten()), tol);
    // Backward with the residual add and the weight-gradient accumulation, at the same rounding points.
    at::Tensor dy = at::randn({N, D}, o), res = at::randn({N, D}, o), dw = at::zeros({D}), dw2 = at::zeros({D});
    auto aten_bwd = [&] {
      at::Tensor y = x.to(at::kFloat) * rstd, dn = (dy.to(at::kFloat) * w.to(at::kFloat)).to(dt).to(at::kFloat);
      at::Tensor dot = (dn * y).mean(-1, true);
      dw2.add_((dy.to(at::kFloat) * y.to(dt).to(at::kFloat)).sum(0));
      return (((dn - y * dot) * rstd).to(dt).to(at::kFloat) + res.to(at::kFloat)).to(dt);
    };
    row("RMSNorm backward", name, "composed (fp32)",
        best_ms([&] { k::rmsnorm_backward(true, dy, x, w, rstd, dw, res); }), best_ms(aten_bwd),
        max_rel(k::rmsnorm_backward(true, dy, x, w, rstd, dw, res), aten_bwd()), tol);
  }
  // Rotary embedding of the q and k heads of one layer's q|k|v projection (14 + 2 heads of 64, in place).
  {
    const int64_t H = 14, K = 2, d = 64, half = d / 2;
    at::Tensor qkv = at::randn({N, (H + 2 * K) * d}, o);
    at::Tensor cos = at::rand({N, half}), sin = at::rand({N, half});
    auto aten = [&] {
      at::Tensor x = qkv.view({N, H + 2 * K, d}).narrow(1, 0, H + K).to(at::kFloat);
      at::Tensor x1 = x.narrow(2, 0, half), x2 = x.narrow(2, half, half);
      at::Tensor c = cos.unsqueeze(1), sn = sin.unsqueeze(1);
      at::Tensor out = qkv.clone();
      out.view({N, H + 2 * K, d}).narrow(1, 0, H + K).copy_(at::cat({x1 * c - x2 * sn, x2 * c + x1 * sn}, 2));
      return out;
    };
    auto ours = [&] {
      at::Tensor out = qkv.clone();
      k::rope_qkv(true, out, cos, sin, 1, N, H, K, d, /*inverse=*/false);
      return out;
    };
    row("RoPE on q and k", name, "rotate-half composed (fp32)", best_ms(ours), best_ms(aten), max_rel(ours(), aten()),
        tol);
  }
  // Qwen3's per-head q/k RMSNorm and the rotation, on Qwen3-0.6B's heads (16 query and 8 key/value heads of
  // 128), in place: the one-pass kernel against at::rms_norm over the heads and the rotate-half rotation.
  {
    const int64_t H = 16, K = 8, d = 128, half = d / 2;
    at::Tensor qkv = at::randn({N, (H + 2 * K) * d}, o);
    at::Tensor wq = at::rand({d}, o).add_(0.5), wk = at::rand({d}, o).add_(0.5);
    at::Tensor cos = at::rand({N, half}), sin = at::rand({N, half});
    auto aten = [&] {
      at::Tensor out = qkv.clone();
      at::Tensor heads = out.view({N, H + 2 * K, d});
      at::Tensor q = at::rms_norm(heads.narrow(1, 0, H), {d}, wq, 1e-6);
      at::Tensor kk = at::rms_norm(heads.narrow(1, H, K), {d}, wk, 1e-6);
      at::Tensor x = at::cat({q, kk}, 1).to(at::kFloat);
      at::Tensor x1 = x.narrow(2, 0, half), x2 = x.narrow(2, half, half);
      at::Tensor c = cos.unsqueeze(1), sn = sin.unsqueeze(1);
      heads.narrow(1, 0, H + K).copy_(at::cat({x1 * c - x2 * sn, x2 * c + x1 * sn}, 2));
      return out;
    };
    at::Tensor q_pre, k_pre, rq, rk;
    auto ours = [&] {
      at::Tensor out = qkv.clone();
      k::qk_norm_rope(true, out, wq, wk, 1e-6, cos, sin, 1, N, H, K, d, &q_pre, &k_pre, &rq, &rk);
      return out;
    };
    row("Qwen3 q/k norms + RoPE", name, "at::rms_norm + rotate-half (fp32)", best_ms(ours), best_ms(aten),
        max_rel(ours(), aten()), tol);
    // The same in the unfused model's steps: the fused norm and rotation kernels one after the other, with
    // the copies out of and back into the strided q|k|v rows (what the layer ran before the one-pass kernel).
    auto two_kernels = [&] {
      at::Tensor out = qkv.clone();
      for (int part = 0; part < 2; ++part) {
        const int64_t heads = part == 0 ? H : K;
        at::Tensor cols = out.narrow(1, part == 0 ? 0 : H * d, heads * d);
        at::Tensor in = cols.reshape({N * heads, d}).contiguous();
        cols.copy_(k::rmsnorm_forward(true, in, part == 0 ? wq : wk, 1e-6, part == 0 ? &rq : &rk).view({N, heads * d}));
      }
      k::rope_qkv(true, out, cos, sin, 1, N, H, K, d, /*inverse=*/false);
      return out;
    };
    row("Qwen3 q/k norms + RoPE", name, "lorabench's norm and RoPE kernels, two passes", best_ms(ours),
        best_ms(two_kernels), max_rel(ours(), two_kernels()), 0.0);
    // The backward (LoRA: no weight gradients), against the two kernels' backward the same way.
    at::Tensor dout = at::randn({N, (H + 2 * K) * d}, o);
    ours();  // q_pre, k_pre, rq, rk of this input
    auto ours_bwd = [&] {
      at::Tensor g = dout.clone();
      k::qk_norm_rope_backward(true, g, wq, wk, cos, sin, 1, N, H, K, d, q_pre, k_pre, rq, rk, at::Tensor(), at::Tensor());
      return g;
    };
    auto two_bwd = [&] {
      at::Tensor g = dout.clone();
      k::rope_qkv(true, g, cos, sin, 1, N, H, K, d, /*inverse=*/true);
      for (int part = 0; part < 2; ++part) {
        const int64_t heads = part == 0 ? H : K;
        at::Tensor cols = g.narrow(1, part == 0 ? 0 : H * d, heads * d);
        cols.copy_(k::rmsnorm_backward(true, cols.reshape({N * heads, d}).contiguous(), part == 0 ? q_pre : k_pre,
                                       part == 0 ? wq : wk, part == 0 ? rq : rk, at::Tensor(), at::Tensor())
                       .view({N, heads * d}));
      }
      return g;
    };
    row("Qwen3 q/k norms + RoPE backward", name, "lorabench's RoPE and norm kernels, two passes", best_ms(ours_bwd),
        best_ms(two_bwd), max_rel(ours_bwd(), two_bwd()), 0.0);
  }
  // One 16384-wide vocabulary chunk of the LM head's online softmax (the default model.head_chunk).
  {
    const int64_t C = 16384;
    at::Tensor z = (at::randn({N, C}) * 3).to(dt), target = at::randint(0, C, {N}, at::kLong);
    at::Tensor m, se, rs, p, zt;
    auto fresh = [&] {
      m = at::full({N}, -3.0e38, at::kFloat), se = at::zeros({N}), rs = at::zeros({N}), zt = at::zeros({N});
    };
    auto ours = [&] {
      fresh();
      k::online_softmax_chunk(true, z, m, se, rs, p, target, zt);
      return se;
    };
    auto aten = [&] {
      at::Tensor m0 = at::full({N}, -3.0e38, at::kFloat), se0 = at::zeros({N});
      at::Tensor zf = z.to(at::kFloat), m_new = at::maximum(m0, zf.amax(1));
      at::Tensor e = at::exp(zf - m_new.unsqueeze(1));
      at::Tensor pe = e.to(dt);                                         // what the head's next GEMM reads
      at::Tensor zt0 = zf.gather(1, target.unsqueeze(1)).squeeze(1);  // the target logit
      return se0 * at::exp(m0 - m_new) + e.sum(1);
    };
    row("head softmax chunk", name, "composed (fp32)", best_ms([&] { ours(); }), best_ms(aten), max_rel(ours(), aten()),
        tol);
  }
}

// One layer's causal attention, forward and backward: the blocked kernel against libtorch's flash kernel.
void run_attention() {
  namespace m = lorabench::model;
  if (!m::cpu_blocked_attention_available()) {
    std::printf("| attention | bf16 | - | not run: this CPU has no AVX-512 BF16 | | | |\n");
    return;
  }
  const int64_t B = 1, T = 256, H = 14, K = 2, d = 64;
  at::manual_seed(0);
  const at::Tensor qkv = at::randn({B * T, (H + 2 * K) * d}).to(at::kBFloat16);
  const at::Tensor dout = at::randn({B * T, H * d}).to(at::kBFloat16);
  struct Pass {
    at::Tensor out, lse, dqkv;
  };
  auto options = [](m::CpuAttention kernel) {
    m::KernelOptions ko;
    ko.cpu_attention = kernel;
    return ko;
  };
  auto with = [&](m::CpuAttention kernel, bool backward) {
    const m::KernelOptions ko = options(kernel);
    Pass p;
    p.out = m::attention_forward(ko, qkv, B, T, H, K, d, &p.lse);
    if (backward) p.dqkv = m::attention_backward(ko, dout, qkv, p.out, p.lse, B, T, H, K, d);
    return p;
  };
  const Pass blocked = with(m::CpuAttention::kBlocked, true), flash = with(m::CpuAttention::kFlash, true);
  // The backward of each from its own forward.
  auto bwd_ms = [&](m::CpuAttention kernel, const Pass& p) {
    const m::KernelOptions ko = options(kernel);
    return best_ms([&] { m::attention_backward(ko, dout, qkv, p.out, p.lse, B, T, H, K, d); });
  };
  const double f_ours = best_ms([&] { with(m::CpuAttention::kBlocked, false); });
  const double f_aten = best_ms([&] { with(m::CpuAttention::kFlash, false); });
  const double b_ours = bwd_ms(m::CpuAttention::kBlocked, blocked), b_aten = bwd_ms(m::CpuAttention::kFlash, flash);
  row("attention forward (one layer)", "bf16", "libtorch's flash kernel", f_ours, f_aten,
      max_rel(blocked.out, flash.out), 2e-2);
  row("attention backward (one layer)", "bf16", "libtorch's flash kernel, in fp32", b_ours, b_aten,
      max_rel(blocked.dqkv, flash.dqkv), 2e-2);
}

// One Qwen3.5-0.8B linear-attention layer's gated delta rule (16 key and 16 value heads of 128), forward and
// backward: the CPU kernel against the ATen composition (delta_rule.hpp's two implementations).
void run_delta_rule() {
  namespace dr = lorabench::model::delta_rule;
  const int64_t B = 1, T = 256, H = 16, d = 128;
  at::manual_seed(0);
  const at::Tensor q = at::randn({B, T, H, d}).to(at::kBFloat16), k = at::randn({B, T, H, d}).to(at::kBFloat16);
  const at::Tensor v = at::randn({B, T, H, d}).to(at::kBFloat16), dout = at::randn({B, T, H, d}).to(at::kBFloat16);
  const at::Tensor g = at::rand({B, T, H}).mul(-1.0), beta = at::rand({B, T, H}).to(at::kBFloat16);
  auto bwd = [&](bool fused) {
    const dr::Grads d = dr::backward(fused, q, k, v, g, beta, dout);
    return at::cat({d.dq.flatten(), d.dk.flatten(), d.dv.flatten()});
  };
  row("gated delta rule forward (one layer)", "bf16", "lorabench's ATen composition",
      best_ms([&] { dr::forward(true, q, k, v, g, beta); }), best_ms([&] { dr::forward(false, q, k, v, g, beta); }),
      max_rel(dr::forward(true, q, k, v, g, beta), dr::forward(false, q, k, v, g, beta)), 2e-2);
  row("gated delta rule backward (one layer)", "bf16", "lorabench's ATen composition", best_ms([&] { bwd(true); }),
      best_ms([&] { bwd(false); }), max_rel(bwd(true), bwd(false)), 2e-2);
  // The causal convolution + SiLU before it, over the layer's q|k|v columns (6144 of the projection's 8224).
  namespace q35 = lorabench::model::qwen3_5;
  const int64_t C = 6144, N = B * T;
  const at::Tensor proj = at::randn({N, 8224}).to(at::kBFloat16), x = proj.narrow(1, 0, C);
  const at::Tensor w = (at::randn({C, 4}) * 0.5).to(at::kBFloat16), dy = at::randn({N, C}).to(at::kBFloat16);
  at::Tensor dw = at::zeros({C, 4});
  row("causal conv + SiLU forward (one layer)", "bf16", "lorabench's ATen composition",
      best_ms([&] { q35::conv_silu_forward(true, x, w, B, T); }),
      best_ms([&] { q35::conv_silu_forward(false, x, w, B, T); }),
      max_rel(q35::conv_silu_forward(true, x, w, B, T), q35::conv_silu_forward(false, x, w, B, T)), 2e-2);
  row("causal conv + SiLU backward (one layer)", "bf16", "lorabench's ATen composition",
      best_ms([&] { q35::conv_silu_backward(true, dy, x, w, B, T, dw); }),
      best_ms([&] { q35::conv_silu_backward(false, dy, x, w, B, T, dw); }),
      max_rel(q35::conv_silu_backward(true, dy, x, w, B, T, dw), q35::conv_silu_backward(false, dy, x, w, B, T, dw)),
      2e-2);
}

void run_adamw() {
  // The LoRA parameters of the 0.5B shape, r16 on all seven projections: 8.8M fp32 values.
  const int64_t n = 8798208;
  at::manual_seed(0);
  at::Tensor p = at::randn({n}), g = at::randn({n}), m = at::zeros({n}), v = at::zeros({n});
  at::Tensor p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
  lorabench::optim::AdamWConfig c;
  const lorabench::optim::Ranges all{{0, n}};
  int64_t step = 0, step2 = 0;
  auto ours = [&] { lorabench::optim::adamw_update(p, g, m, v, ++step, 1e-4, c, all); };
  at::Tensor st = at::zeros({}, at::kFloat);
  auto aten = [&] {
    ++step2;
    st.fill_(static_cast<double>(step2));
    at::_fused_adamw_({p2}, {g}, {m2}, {v2}, {}, {st}, 1e-4, c.beta1, c.beta2, c.weight_decay, c.eps, false, false);
  };
  const double t_ours = best_ms(ours), t_aten = best_ms(aten);
  // Both did the same number of steps from the same start.
  row("AdamW (8.8M LoRA values)", "fp32", "at::_fused_adamw_", t_ours, t_aten, max_rel(p, p2), 1e-5);
}

}  // namespace

int main(int argc, char** argv) {
  lorabench::bench::parse_flags(argc, argv, "lorabench-kernels-vs-aten [--reps 15]", {{"--reps", nullptr, &g_reps, {}}});
  lorabench::sys::keep_freed_memory_in_heap();  // as lorabench's main: both sides reuse their buffers as in a step
  at::set_num_threads(1);
  std::printf("libtorch %s, 1 thread, best of %d; times in ms (0.5B shapes, 256 tokens)\n\n", TORCH_VERSION, g_reps);
  std::printf("| operation | dtype | ATen replacement | fused (ms) | ATen (ms) | ATen / fused | max rel diff |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  run(at::kFloat, "fp32");
  run(at::kBFloat16, "bf16");
  run_attention();
  run_delta_rule();
  run_adamw();
  return 0;
}
