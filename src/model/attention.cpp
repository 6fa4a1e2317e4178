#include "attention.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "lorabench/core/error.hpp"

namespace lorabench::model {

namespace {

struct Heads {
  at::Tensor q, k, v;  // (B, heads, T, d) views of the token-major qkv rows
};

Heads split(const at::Tensor& qkv, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d) {
  at::Tensor x = qkv.view({B, T, H + 2 * K, d});
  return {x.narrow(2, 0, H).transpose(1, 2), x.narrow(2, H, K).transpose(1, 2), x.narrow(2, H + K, K).transpose(1, 2)};
}

void require_cpu(const at::Tensor& t) {
  // The CUDA kernels of the same operation take other arguments (cumulative lengths, RNG state); they come
  // with the GPU path.
  LB_CHECK(t.device().is_cpu(), "attention: only CPU tensors are supported so far, got " + t.device().str());
}

}  // namespace

at::Tensor attention_forward(const at::Tensor& qkv, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d,
                             at::Tensor* lse) {
  require_cpu(qkv);
  const Heads h = split(qkv, B, T, H, K, d);
  auto [out, l] = at::_scaled_dot_product_flash_attention_for_cpu(h.q, h.k, h.v, 0.0, /*is_causal=*/true, {},
                                                                  1.0 / std::sqrt(double(d)));
  *lse = l;
  // out is (B, H, T, d) over token-major storage: (B, T, H, d) is its contiguous order.
  return out.transpose(1, 2).reshape({B * T, H * d});
}

at::Tensor attention_backward(const at::Tensor& dout, const at::Tensor& qkv, const at::Tensor& out,
                              const at::Tensor& lse, int64_t B, int64_t T, int64_t H, int64_t K, int64_t d) {
  require_cpu(qkv);
  const Heads h = split(qkv, B, T, H, K, d);
  auto as_heads = [&](const at::Tensor& t) { return t.reshape({B, T, H, d}).transpose(1, 2); };
  auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      as_heads(dout), h.q, h.k, h.v, as_heads(out), lse, 0.0, /*is_causal=*/true, {}, 1.0 / std::sqrt(double(d)));
  // Back to token-major rows: [dq | dk | dv] per token.
  return at::cat({dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)}, 2).view({B * T, (H + 2 * K) * d});
}

}  // namespace lorabench::model
