// The gated delta rule (Qwen3.5's linear attention), both implementations (the ATen composition and the CPU
// kernel), against two independent oracles: transformers' torch_chunk_gated_delta_rule with autograd (fixture,
// scripts/make-fixtures.sh qwen3.5), and the token-by-token recurrence written here from its definition and
// differentiated by libtorch's autograd; and the CPU kernel against the ATen composition at larger shapes.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>

#include "../../src/model/delta_rule.hpp"
#include "lorabench/io/safetensors.hpp"
#include "lorabench/model/weights.hpp"

using namespace lorabench;

namespace {

at::Tensor ref(const io::SafeTensorsFile& f, const std::string& name) {
  const io::SafeTensorInfo* t = f.find(name);
  if (!t) throw std::runtime_error("fixture lacks " + name);
  return model::read_tensor(f, *t, at::kFloat);
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

// The recurrence, one token at a time (transformers' torch_recurrent_gated_delta_rule is the same math):
// S <- exp(g_t) S; S <- S + k_t (beta_t (v_t - S^T k_t))^T; o_t = S^T q_t, q and k L2-normalised, q / sqrt(dk).
torch::Tensor recurrent(torch::Tensor q, torch::Tensor k, const torch::Tensor& v, const torch::Tensor& g,
                        const torch::Tensor& beta) {
  const int64_t B = q.size(0), T = q.size(1), Hk = q.size(2), dk = q.size(3), Hv = v.size(2), dv = v.size(3);
  auto l2 = [](const torch::Tensor& x) { return x * torch::rsqrt((x * x).sum(-1, true) + 1e-6); };
  q = l2(q).repeat_interleave(Hv / Hk, 2) / std::sqrt(double(dk));
  k = l2(k).repeat_interleave(Hv / Hk, 2);
  torch::Tensor S = torch::zeros({B, Hv, dk, dv}, q.options());
  std::vector<torch::Tensor> outs;
  for (int64_t t = 0; t < T; ++t) {
    auto qt = q.select(1, t), kt = k.select(1, t), vt = v.select(1, t);  // (B, H, d)
    S = S * g.select(1, t).exp().view({B, Hv, 1, 1});
    auto pred = (S * kt.unsqueeze(-1)).sum(-2);                         // S^T k  (B, H, dv)
    auto delta = (vt - pred) * beta.select(1, t).unsqueeze(-1);
    S = S + kt.unsqueeze(-1) * delta.unsqueeze(-2);
    outs.push_back((S * qt.unsqueeze(-1)).sum(-2));
  }
  return torch::stack(outs, 1);  // (B, T, H, dv)
}

struct Inputs {
  torch::Tensor q, k, v, g, beta, dout;
};

Inputs random_inputs(int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, double decay) {
  torch::manual_seed(T * 31 + Hv);
  Inputs in;
  in.q = torch::randn({B, T, Hk, dk});
  in.k = torch::randn({B, T, Hk, dk});
  in.v = torch::randn({B, T, Hv, dv});
  in.g = -decay * torch::rand({B, T, Hv});
  in.beta = torch::rand({B, T, Hv});
  in.dout = torch::randn({B, T, Hv, dv});
  return in;
}

}  // namespace

TEST(DeltaRule, MatchesTransformersChunkedRuleAndItsAutogradGradients) {
  io::SafeTensorsFile f(std::string(LORABENCH_FIXTURES) + "/gated_delta_rule.safetensors");
  for (bool fused : {false, true})
  for (int T : {23, 64, 150}) {  // shorter than a chunk, exactly one, not a multiple of 64
    SCOPED_TRACE("T = " + std::to_string(T) + (fused ? " CPU kernel" : " ATen"));
    const std::string p = "case" + std::to_string(T) + ".";
    at::Tensor q = ref(f, p + "q"), k = ref(f, p + "k"), v = ref(f, p + "v"), g = ref(f, p + "g"),
               beta = ref(f, p + "beta"), dout = ref(f, p + "dout");
    at::Tensor o = model::delta_rule::forward(fused, q, k, v, g, beta);
    EXPECT_LE(max_abs_diff(o, ref(f, p + "out")), 1e-5);
    model::delta_rule::Grads d = model::delta_rule::backward(fused, q, k, v, g, beta, dout);
    EXPECT_LE(max_abs_diff(d.dq, ref(f, p + "dq")), 1e-5);
    EXPECT_LE(max_abs_diff(d.dk, ref(f, p + "dk")), 1e-5);
    EXPECT_LE(max_abs_diff(d.dv, ref(f, p + "dv")), 1e-5);
    EXPECT_LE(max_abs_diff(d.dg, ref(f, p + "dg")), 1e-4);  // sums over up to 64 positions of the chunk
    EXPECT_LE(max_abs_diff(d.dbeta, ref(f, p + "dbeta")), 1e-5);
    // The fixture's gradients are not small: the check can fail.
    EXPECT_GT(ref(f, p + "dg").abs().max().item<double>(), 0.1);
  }
}

TEST(DeltaRule, EqualsTheRecurrenceForEveryChunkSizeWithGradients) {
  // Small chunks make several chunk boundaries at small T; equal key and value heads and grouped ones.
  for (bool fused : {false, true})
  for (auto [T, Hk, Hv, chunk] : {std::tuple{37, 2, 2, 8}, std::tuple{40, 1, 3, 16}, std::tuple{5, 2, 4, 64}}) {
    SCOPED_TRACE("T " + std::to_string(T) + " Hv " + std::to_string(Hv) + " chunk " + std::to_string(chunk) +
                 (fused ? " CPU kernel" : " ATen"));
    Inputs in = random_inputs(2, T, Hk, Hv, 8, 6, 0.3);
    std::vector<torch::Tensor> leaves;
    for (auto* t : {&in.q, &in.k, &in.v, &in.g, &in.beta})
      leaves.push_back(t->to(torch::kDouble).requires_grad_(true));
    torch::Tensor o_ref = recurrent(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4]);
    (o_ref * in.dout.to(torch::kDouble)).sum().backward();

    at::Tensor o = model::delta_rule::forward(fused, in.q, in.k, in.v, in.g, in.beta, chunk);
    EXPECT_LE(max_abs_diff(o, o_ref.detach()), 2e-5);
    auto d = model::delta_rule::backward(fused, in.q, in.k, in.v, in.g, in.beta, in.dout, chunk);
    EXPECT_LE(max_abs_diff(d.dq, leaves[0].grad()), 5e-5);
    EXPECT_LE(max_abs_diff(d.dk, leaves[1].grad()), 5e-5);
    EXPECT_LE(max_abs_diff(d.dv, leaves[2].grad()), 5e-5);
    EXPECT_LE(max_abs_diff(d.dg, leaves[3].grad()), 1e-4);
    EXPECT_LE(max_abs_diff(d.dbeta, leaves[4].grad()), 5e-5);
    EXPECT_EQ(d.dq.sizes(), in.q.sizes());
    EXPECT_EQ(d.dg.sizes(), in.g.sizes());
  }
}

TEST(DeltaRule, AcceptsStridedViewsAndKeepsTheInputDtype) {
  // The layer passes column slices of the convolution's output (B, T, conv_dim) and bf16 activations.
  Inputs in = random_inputs(1, 70, 2, 2, 8, 8, 0.1);
  at::Tensor packed = at::cat({in.q.flatten(2), in.k.flatten(2), in.v.flatten(2)}, 2).to(at::kBFloat16);  // (B,T,48)
  at::Tensor q = packed.narrow(2, 0, 16).unflatten(2, {2, 8});
  at::Tensor k = packed.narrow(2, 16, 16).unflatten(2, {2, 8});
  at::Tensor v = packed.narrow(2, 32, 16).unflatten(2, {2, 8});
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "CPU kernel" : "ATen");
    at::Tensor o = model::delta_rule::forward(fused, q, k, v, in.g, in.beta.to(at::kBFloat16));
    EXPECT_EQ(o.scalar_type(), at::kBFloat16);
    at::Tensor o32 = model::delta_rule::forward(fused, q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), in.g,
                                                in.beta.to(at::kBFloat16).to(at::kFloat));
    EXPECT_LE(max_abs_diff(o, o32), 2e-2 * o32.abs().max().item<double>());
    auto d = model::delta_rule::backward(fused, q, k, v, in.g, in.beta.to(at::kBFloat16), in.dout.to(at::kBFloat16));
    EXPECT_EQ(d.dq.scalar_type(), at::kBFloat16);
    EXPECT_EQ(d.dg.scalar_type(), at::kFloat);
    EXPECT_TRUE(d.dk.isfinite().all().item<bool>());
  }
}

// Relative to the reference's largest magnitude.
double rel_diff(const at::Tensor& got, const at::Tensor& want) {
  return max_abs_diff(got, want) / want.to(at::kFloat).abs().max().item<double>();
}

TEST(DeltaRule, CpuKernelEqualsTheAtenPathAtLayerShapes) {
  // Head sizes that take the kernel's 64- and 16-column strips and its column tail, grouped value heads, three
  // chunks of 64 (the last one partial), Qwen3.5's decays (down to exp(-3) a token).
  for (auto [dk, dv, rep] : {std::tuple{64, 80, 2}, std::tuple{128, 128, 1}, std::tuple{24, 37, 3}}) {
    SCOPED_TRACE("dk " + std::to_string(dk) + " dv " + std::to_string(dv) + " rep " + std::to_string(rep));
    Inputs in = random_inputs(2, 150, 2, 2 * rep, dk, dv, 3.0);
    at::Tensor o_ref = model::delta_rule::forward(false, in.q, in.k, in.v, in.g, in.beta);
    at::Tensor o = model::delta_rule::forward(true, in.q, in.k, in.v, in.g, in.beta);
    EXPECT_LE(rel_diff(o, o_ref), 1e-5);
    auto r = model::delta_rule::backward(false, in.q, in.k, in.v, in.g, in.beta, in.dout);
    auto d = model::delta_rule::backward(true, in.q, in.k, in.v, in.g, in.beta, in.dout);
    EXPECT_LE(rel_diff(d.dq, r.dq), 1e-5);
    EXPECT_LE(rel_diff(d.dk, r.dk), 1e-5);
    EXPECT_LE(rel_diff(d.dv, r.dv), 1e-5);
    EXPECT_LE(rel_diff(d.dg, r.dg), 1e-5);
    EXPECT_LE(rel_diff(d.dbeta, r.dbeta), 1e-5);
  }
  // bf16 operands: both compute in fp32 from the same values and round once, so they differ by bf16 rounding.
  Inputs in = random_inputs(1, 100, 2, 2, 128, 128, 1.0);
  at::Tensor q = in.q.to(at::kBFloat16), k = in.k.to(at::kBFloat16), v = in.v.to(at::kBFloat16);
  at::Tensor beta = in.beta.to(at::kBFloat16), dout = in.dout.to(at::kBFloat16);
  EXPECT_LE(rel_diff(model::delta_rule::forward(true, q, k, v, in.g, beta),
                     model::delta_rule::forward(false, q, k, v, in.g, beta)),
            8e-3);
  auto r = model::delta_rule::backward(false, q, k, v, in.g, beta, dout);
  auto d = model::delta_rule::backward(true, q, k, v, in.g, beta, dout);
  EXPECT_LE(rel_diff(d.dq, r.dq), 8e-3);
  EXPECT_LE(rel_diff(d.dv, r.dv), 8e-3);
  EXPECT_LE(rel_diff(d.dg, r.dg), 1e-4);  // fp32 like g
}

TEST(DeltaRule, CpuBlockProductEveryVariantTheCpuRuns) {
  std::vector<Isa> variants{Isa::kBaseline};
  if (cpu_isa() != Isa::kBaseline) variants.push_back(Isa::kAvx2);
  if (cpu_isa() == Isa::kAvx512) variants.push_back(Isa::kAvx512);
  torch::manual_seed(5);
  for (Isa isa : variants)
    for (int64_t M : {1, 3, 4, 7, 64})
      for (int64_t N : {1, 15, 16, 33, 64, 80, 130})
        for (int64_t K : {1, 9, 64}) {
          SCOPED_TRACE(std::string(isa_name(isa)) + " M " + std::to_string(M) + " N " + std::to_string(N) + " K " +
                       std::to_string(K));
          // Row strides wider than the rows: the kernel must use lda, ldb and ldc.
          at::Tensor A = torch::randn({M, K + 3}), At = torch::randn({K, M + 4}), B = torch::randn({K, N + 5});
          at::Tensor C0 = torch::randn({M, N + 2});
          at::Tensor bm = B.narrow(1, 0, N);
          for (bool acc : {false, true})
          for (bool ta : {false, true}) {  // op(A) = A (M x K), or At^T with At (K x M)
            at::Tensor C = C0.clone();
            at::Tensor a = ta ? At.narrow(1, 0, M).t() : A.narrow(1, 0, K);
            model::delta_rule::cpu::block_product(isa, ta, M, N, K, (ta ? At : A).data_ptr<float>(), ta ? M + 4 : K + 3,
                                                  B.data_ptr<float>(), N + 5, C.data_ptr<float>(), N + 2, -0.5f, acc);
            at::Tensor want = at::mm(a, bm).mul(-0.5);
            if (acc) want += C0.narrow(1, 0, N);
            EXPECT_LE(max_abs_diff(C.narrow(1, 0, N), want), 1e-4);
            EXPECT_TRUE(C.narrow(1, N, 2).equal(C0.narrow(1, N, 2)));  // nothing written past the N columns
          }
        }
}
