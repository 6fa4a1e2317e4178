#include "attention.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <string>
#include <tuple>

#include "attention_cpu.hpp"
#include "profile_scope.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/model/qwen2.hpp"

namespace lorabench::model {

namespace {

// Whether CPU tensors of this dtype go to lorabench's blocked kernel (else libtorch's CPU flash kernel).
bool use_blocked(const KernelOptions& k, at::ScalarType dt) {
  if (k.cpu_attention == CpuAttention::kFlash) return false;
  if (k.cpu_attention == CpuAttention::kBlocked) {
    LB_CHECK(dt == at::kBFloat16, "attention: model.cpu_attention = blocked is a bf16 kernel (model.dtype = fp32 "
                                  "runs libtorch's flash kernel: use auto or flash)");
    LB_CHECK(cpu_attention::brgemm_available(),
             "attention: model.cpu_attention = blocked needs a CPU with AVX-512 BF16 and libtorch's brgemm for it "
             "(this one has not: use auto or flash)");
    return true;
  }
  return dt == at::kBFloat16 && cpu_attention::brgemm_available();
}

// Whether CUDA tensors of this dtype go to FlashAttention-2 (else the memory-efficient kernel).
bool use_flash(const KernelOptions& k, at::ScalarType dt) {
  if (k.cuda_attention == CudaAttention::kEfficient) return false;
  if (dt == at::kFloat) {
    LB_CHECK(k.cuda_attention == CudaAttention::kAuto,
             "attention: model.cuda_attention = flash has no fp32 kernel (FlashAttention-2 takes bf16)");
    return false;
  }
  return true;
}

struct Heads {
  at::Tensor q, k, v;  // (B, heads, T, d) views of the token-major qkv rows
};

Heads split(const at::Tensor& qkv, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d) {
  at::Tensor x = qkv.view({B, T, H + 2 * K, d});
  return {x.narrow(2, 0, H).transpose(1, 2), x.narrow(2, H, K).transpose(1, 2), x.narrow(2, H + K, K).transpose(1, 2)};
}

// GQA with the memory-efficient kernel: it takes as many key/value heads as query heads.
at::Tensor expand_kv(const at::Tensor& t, int64_t H, int64_t K) { return H == K ? t : t.repeat_interleave(H / K, 1); }
// ... and its gradients are summed back over each group of H / K query heads.
at::Tensor fold_kv(const at::Tensor& g, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d) {
  return H == K ? g : g.reshape({B, K, H / K, T, d}).sum(2);
}

void require_supported(const at::Tensor& t) {
  LB_CHECK(t.device().is_cpu() || t.device().is_cuda(), "attention: no kernel for tensors on " + t.device().str());
}

}  // namespace

at::Tensor attention_forward(const KernelOptions& k, const at::Tensor& qkv, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d,
                             at::Tensor* lse) {
  require_supported(qkv);
  const Heads h = split(qkv, B, T, H, K, d);
  const double scale = 1.0 / std::sqrt(double(d));
  at::Tensor out;
  if (qkv.is_cuda() && use_flash(k, qkv.scalar_type())) {
    // FlashAttention-2 (bf16 on sm_80+): the K key/value heads as they are; lse (B, H, T). No dropout: the
    // philox seed and offset it returns are not read by its backward.
    auto res = at::_scaled_dot_product_flash_attention(h.q, h.k, h.v, 0.0, /*is_causal=*/true,
                                                       /*return_debug_mask=*/false, scale);
    out = std::get<0>(res);
    *lse = std::get<1>(res);
  } else if (qkv.is_cuda()) {
    // The memory-efficient kernel (fp32 and bf16 on sm_80+); lse comes back padded per head, kept as it is
    // for the backward. No dropout: the philox seed and offset it returns are unused.
    auto res = at::_scaled_dot_product_efficient_attention(h.q, expand_kv(h.k, H, K), expand_kv(h.v, H, K),
                                                           std::nullopt, /*compute_log_sumexp=*/true, 0.0,
                                                           /*is_causal=*/true, scale);
    out = std::get<0>(res);
    *lse = std::get<1>(res);
  } else if (use_blocked(k, qkv.scalar_type())) {
    ProfileScope scope("lb::attention_kernel");
    return cpu_attention::forward(qkv.contiguous(), B, T, H, K, d, lse, cpu_attention::BlockGemm::kBrgemm);
  } else {
    std::tie(out, *lse) = at::_scaled_dot_product_flash_attention_for_cpu(h.q, h.k, h.v, 0.0, /*is_causal=*/true,
                                                                          {}, scale);
  }
  // out is (B, H, T, d) over token-major storage: (B, T, H, d) is its contiguous order.
  return out.transpose(1, 2).reshape({B * T, H * d});
}

at::Tensor attention_backward(const KernelOptions& k, const at::Tensor& dout, const at::Tensor& qkv,
                              const at::Tensor& out, const at::Tensor& lse, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d) {
  require_supported(qkv);
  auto as_heads = [&](const at::Tensor& t) { return t.reshape({B, T, H, d}).transpose(1, 2); };
  const double scale = 1.0 / std::sqrt(double(d));
  if (qkv.is_cuda()) {
    const Heads h = split(qkv, B, T, H, K, d);
    const at::Tensor none = at::empty({}, at::kLong);  // no dropout: the philox seed and offset are not read
    at::Tensor dq, dk, dv;
    if (use_flash(k, qkv.scalar_type())) {
      // Dense (no cumulative sequence lengths); dk and dv come back with the K key/value heads, each summed
      // over its group by the kernel.
      std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_backward(
          as_heads(dout), h.q, h.k, h.v, as_heads(out), lse, at::Tensor(), at::Tensor(), T, T, 0.0,
          /*is_causal=*/true, none, none, scale);
    } else {
      auto res = at::_scaled_dot_product_efficient_attention_backward(
          as_heads(dout), h.q, expand_kv(h.k, H, K), expand_kv(h.v, H, K), at::Tensor(), as_heads(out), lse, none,
          none, 0.0, {true, true, true, false}, /*is_causal=*/true, scale);
      dq = std::get<0>(res);
      dk = fold_kv(std::get<1>(res), B, T, H, K, d);
      dv = fold_kv(std::get<2>(res), B, T, H, K, d);
    }
    return at::cat({dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)}, 2).reshape({B * T, (H + 2 * K) * d});
  }
  if (use_blocked(k, qkv.scalar_type())) {
    ProfileScope scope("lb::attention_kernel");
    return cpu_attention::backward(dout, qkv.contiguous(), out.contiguous(), lse, B, T, H, K, d,
                                   cpu_attention::BlockGemm::kBrgemm);
  }
  // libtorch's kernel: bf16 runs its backward in fp32 (its inputs and results are one layer's q|k|v rows, cast once
  // each way; for fp32 the casts are no-ops): its bf16 kernel took 1.4x as long as the fp32 one plus the
  // casts (0.5B shape, T = 256, one thread: 10.3 against 7.2 ms per layer) and was further from the fp64
  // formula (max relative error of dq, dk, dv 5e-3..1.4e-2 against 2.5e-3..3.1e-3; test_kernels). The
  // forward stays in the model's dtype (there bf16 is the faster one).
  const Heads h = split(qkv.to(at::kFloat), B, T, H, K, d);
  auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      as_heads(dout.to(at::kFloat)), h.q, h.k, h.v, as_heads(out.to(at::kFloat)), lse, 0.0, /*is_causal=*/true,
      {}, scale);
  // Back to token-major rows: [dq | dk | dv] per token.
  return at::cat({dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)}, 2)
      .view({B * T, (H + 2 * K) * d})
      .to(qkv.scalar_type());
}

bool cpu_blocked_attention_available() { return cpu_attention::brgemm_available(); }
CpuAttention parse_cpu_attention(const std::string& name) {
  if (name == "auto") return CpuAttention::kAuto;
  if (name == "flash") return CpuAttention::kFlash;
  if (name == "blocked") return CpuAttention::kBlocked;
  throw Error("model.cpu_attention: unknown kernel \"" + name + "\" (expected auto, flash or blocked)");
}
std::string attention_kernel(const KernelOptions& k, bool cuda, bool bf16) {
  if (!cuda) return use_blocked(k, bf16 ? at::kBFloat16 : at::kFloat) ? "cpu_blocked" : "cpu_flash";
  return use_flash(k, bf16 ? at::kBFloat16 : at::kFloat) ? "flash" : "efficient";
}
CudaAttention parse_cuda_attention(const std::string& name) {
  if (name == "auto") return CudaAttention::kAuto;
  if (name == "flash") return CudaAttention::kFlash;
  if (name == "efficient") return CudaAttention::kEfficient;
  throw Error("model.cuda_attention: unknown kernel \"" + name + "\" (expected auto, flash or efficient)");
}

}  // namespace lorabench::model
