// The hand-written backward against an autograd oracle: an independent plain-ops Qwen2 (written here
// from the transformers code, not from src/model) differentiated by libtorch's autograd.
#include <gtest/gtest.h>

#include <ATen/record_function.h>

#include <atomic>
#include <functional>
#include <optional>
#include <torch/torch.h>

#include "lorabench/model/dense.hpp"

using namespace lorabench;

namespace {

model::ModelShape small_shape() {
  model::ModelShape s = model::preset_shape("tiny");
  s.vocab_size = 97;
  s.layers = 2;
  return s;
}

torch::Tensor slot(const at::Tensor& flat, const model::UnitLayout& u, const std::string& name) {
  for (const auto& s : u.compute)
    if (s.name == name) return flat.narrow(0, s.offset, s.numel).view(s.shape);
  for (const auto& s : u.trainable)
    if (s.name == name) return flat.narrow(0, s.offset, s.numel).view(s.shape);
  throw std::runtime_error("no slot " + name);
}

torch::Tensor rms(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  auto xf = x.to(torch::kFloat);
  auto v = xf.pow(2).mean(-1, true);
  return w * (xf * torch::rsqrt(v + eps)).to(x.scalar_type());
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  int64_t h = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

// Leaf copies of every parameter of the dense model (requires_grad), keyed by name.
struct Oracle {
  std::map<std::string, torch::Tensor> p;
  const model::ModelLayout* m;
  torch::Tensor get(const std::string& n) { return p.at(n); }

  explicit Oracle(model::DenseModel& dm, bool train_base) : m(&dm.layout()) {
    for (size_t u = 0; u < m->units.size(); ++u) {
      const auto& unit = m->units[u];
      for (const auto& s : unit.compute)
        p[s.name] = slot(dm.compute_flats()[u], unit, s.name).detach().clone().requires_grad_(train_base);
      if (!m->full_finetune)
        for (const auto& s : unit.trainable)
          p[s.name] = slot(dm.trainable_flats()[u], unit, s.name).detach().clone().requires_grad_(true);
    }
  }

  torch::Tensor proj(const torch::Tensor& x, int layer, model::Proj pr, bool bias) {
    std::string base = model::layer_tensor_name(layer, std::string(model::proj_module_path(pr)));
    auto y = torch::nn::functional::linear(x, get(base + ".weight"), bias ? get(base + ".bias") : torch::Tensor());
    if (m->lora.targets(pr)) {
      auto a = get(model::lora_tensor_name(layer, pr, true));
      auto b = get(model::lora_tensor_name(layer, pr, false));
      y = y + torch::matmul(torch::matmul(x.to(torch::kFloat), a.t()), b.t()) * m->lora.scaling();
    }
    return y;
  }

  torch::Tensor loss(const torch::Tensor& ids, const torch::Tensor& labels) {
    const auto& s = m->shape;
    int64_t B = ids.size(0), T = ids.size(1), H = s.heads, K = s.kv_heads, d = s.head_dim;
    auto x = torch::embedding(get("model.embed_tokens.weight"), ids);
    auto inv = 1.0 / torch::pow(s.rope_theta, torch::arange(0, d, 2, torch::kLong).to(torch::kFloat) / double(d));
    auto f = torch::outer(torch::arange(T, torch::kLong).to(torch::kFloat), inv);
    auto e = torch::cat({f, f}, -1);
    auto cos = e.cos(), sin = e.sin();
    auto mask = torch::full({T, T}, -INFINITY).triu(1);
    for (int l = 0; l < s.layers; ++l) {
      auto n = [&](const char* sfx) { return model::layer_tensor_name(l, sfx); };
      auto h = rms(x, get(n("input_layernorm.weight")), s.rms_eps);
      auto q = proj(h, l, model::Proj::kQ, true).view({B, T, H, d}).transpose(1, 2);
      auto k = proj(h, l, model::Proj::kK, true).view({B, T, K, d}).transpose(1, 2);
      auto v = proj(h, l, model::Proj::kV, true).view({B, T, K, d}).transpose(1, 2);
      q = q * cos + rotate_half(q) * sin;
      k = k * cos + rotate_half(k) * sin;
      k = k.repeat_interleave(H / K, 1);
      v = v.repeat_interleave(H / K, 1);
      auto att = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(d)) + mask;
      auto pr = torch::softmax(att, -1);
      auto o = torch::matmul(pr, v).transpose(1, 2).reshape({B, T, H * d});
      x = x + proj(o, l, model::Proj::kO, false);
      h = rms(x, get(n("post_attention_layernorm.weight")), s.rms_eps);
      auto a = torch::silu(proj(h, l, model::Proj::kGate, false)) * proj(h, l, model::Proj::kUp, false);
      x = x + proj(a, l, model::Proj::kDown, false);
    }
    x = rms(x, get("model.norm.weight"), s.rms_eps);
    auto logits = torch::matmul(x, get("model.embed_tokens.weight").t());
    auto lg = logits.narrow(1, 0, T - 1).reshape({-1, logits.size(-1)});
    auto tg = labels.narrow(1, 1, T - 1).reshape({-1});
    return torch::nn::functional::cross_entropy(lg, tg);  // ignore_index -100, mean
  }
};

struct Batch {
  torch::Tensor ids, labels;
};

Batch make_batch(int64_t vocab, int64_t B, int64_t T) {
  torch::manual_seed(7);
  Batch b;
  b.ids = torch::randint(vocab, {B, T}, torch::kLong);
  b.labels = b.ids.clone();
  b.labels.index_put_({0, torch::indexing::Slice(0, 3)}, -100);  // a prompt without loss
  return b;
}

// One micro-step of `dm` with its own kernel settings, or with the fused kernels switched as given (the
// layout a step takes carries them: a copy of dm's with another setting runs the other kernels).
double run_ours(model::DenseModel& dm, const Batch& b, bool checkpointing, std::optional<bool> fused_kernels = {}) {
  model::MicroBatch mb;
  mb.ids = b.ids;
  mb.targets = model::shift_targets(b.labels);
  const int64_t counted = mb.targets.ne(-100).sum().item<int64_t>();
  mb.grad_scale = 1.0 / double(counted);
  model::StepOptions opt;
  opt.activation_checkpointing = checkpointing;
  opt.head_chunk = 40;  // several vocabulary chunks, the last one partial
  dm.zero_grad();
  model::ModelLayout m = dm.layout();
  if (fused_kernels) m.kernels.fused = *fused_kernels;
  auto r = model::forward_backward(m, dm, mb, opt);
  return r.loss() / double(r.tokens());
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double rtol, const std::string& what) {
  double scale = std::max(want.abs().max().item<double>(), 1e-8);
  EXPECT_LE((got - want).abs().max().item<double>() / scale, rtol) << what;
}

}  // namespace

TEST(ModelGrads, FullFinetuneGradientsMatchAutograd) {
  model::LoraSpec off;
  off.enabled = false;
  model::DenseModel dm(model::build_layout(small_shape(), off), at::kFloat);
  dm.init_random(3);
  Batch b = make_batch(97, 2, 9);
  double ours = run_ours(dm, b, false);
  Oracle o(dm, true);
  torch::Tensor loss = o.loss(b.ids, b.labels);
  loss.backward();
  EXPECT_NEAR(ours, loss.item<double>(), 1e-6);
  const auto& m = dm.layout();
  int checked = 0;
  for (size_t u = 0; u < m.units.size(); ++u) {
    for (const auto& s : m.units[u].trainable) {
      at::Tensor got = dm.grad_flats()[u].narrow(0, s.offset, s.numel).view(s.shape);
      expect_close(got, o.get(s.name).grad(), 2e-5, s.name);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 1 + 2 * 12 + 1);
}

TEST(ModelGrads, LoraGradientsMatchAutogradForPartialTargetsAndRslora) {
  model::LoraSpec lora = model::make_lora_spec(true, 3, 5, 0, true, {"q", "v", "o", "up", "down"});
  model::DenseModel dm(model::build_layout(small_shape(), lora), at::kFloat);
  dm.init_random(5);
  for (auto& t : dm.trainable_flats())  // non-zero B so every path carries gradient
    if (t.defined()) t.normal_(0, 0.1);
  Batch b = make_batch(97, 2, 7);
  double ours = run_ours(dm, b, false);
  Oracle o(dm, false);
  torch::Tensor loss = o.loss(b.ids, b.labels);
  loss.backward();
  EXPECT_NEAR(ours, loss.item<double>(), 1e-6);
  int checked = 0;
  const auto& m = dm.layout();
  for (size_t u = 0; u < m.units.size(); ++u) {
    for (const auto& s : m.units[u].trainable) {
      at::Tensor got = dm.grad_flats()[u].narrow(0, s.offset, s.numel).view(s.shape);
      expect_close(got, o.get(s.name).grad(), 2e-5, s.name);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * 5 * 2);
}

TEST(ModelGrads, ActivationCheckpointingIsBitwiseIdentical) {
  model::LoraSpec lora;
  model::DenseModel dm(model::build_layout(small_shape(), lora), at::kFloat);
  dm.init_random(9);
  for (auto& t : dm.trainable_flats())
    if (t.defined()) t.normal_(0, 0.1);
  Batch b = make_batch(97, 2, 8);
  double l1 = run_ours(dm, b, false);
  std::vector<at::Tensor> g1;
  for (auto& g : dm.grad_flats()) g1.push_back(g.defined() ? g.clone() : g);
  double l2 = run_ours(dm, b, true);
  EXPECT_EQ(l1, l2);
  for (size_t u = 0; u < g1.size(); ++u) {
    if (!g1[u].defined()) continue;
    EXPECT_TRUE(at::equal(g1[u], dm.grad_flats()[u])) << "unit " << u;
  }
}

// The device-generic path (ATen compositions: what CUDA tensors run) on CPU against the fused CPU kernels:
// loss and every gradient, LoRA and full fine-tuning, fp32 to 1e-5 and bf16 to 2e-2.
TEST(ModelGrads, DeviceGenericPathMatchesFusedKernels) {
  // Qwen2 (tiny) and Qwen3.5's hybrid layers (qwen3.5-tiny at a test vocabulary: three linear layers and one full,
  // the linear ones with the CPU kernels of the convolution and the gated delta rule).
  model::ModelShape hybrid = model::preset_shape("qwen3.5-tiny");
  hybrid.vocab_size = 97;
  const std::vector<std::string> hybrid_targets{"q", "k", "v", "o", "gate", "up", "down", "in_proj_qkv", "in_proj_z",
                                                "out_proj"};
  for (const bool qwen3_5 : {false, true})
  for (bool full : {false, true}) {
    for (auto dt : {at::kFloat, at::kBFloat16}) {
      model::LoraSpec lora = model::make_lora_spec(
          !full, 4, 8, 0, false,
          qwen3_5 ? hybrid_targets : std::vector<std::string>{"q", "k", "v", "o", "gate", "up", "down"});
      model::DenseModel dm(model::build_layout(qwen3_5 ? hybrid : small_shape(), lora), dt);
      dm.init_random(13);
      for (auto& t : dm.trainable_flats())  // non-zero B so every path carries gradient
        if (t.defined()) t.normal_(0, 0.1);
      Batch b = make_batch(97, 2, qwen3_5 ? 70 : 9);  // 70: past one chunk of the delta rule
      const double fused_loss = run_ours(dm, b, false, /*fused_kernels=*/true);
      std::vector<at::Tensor> fused_grads;
      for (auto& g : dm.grad_flats()) fused_grads.push_back(g.defined() ? g.clone() : g);
      const double generic_loss = run_ours(dm, b, false, /*fused_kernels=*/false);
      const double tol = dt == at::kFloat ? 1e-5 : 2e-2;
      const std::string what =
          std::string(qwen3_5 ? "qwen3.5 " : "qwen2 ") + (full ? "full" : "lora") + " " + c10::toString(dt);
      EXPECT_NEAR(generic_loss, fused_loss, tol * std::abs(fused_loss)) << what;
      int checked = 0;
      for (size_t u = 0; u < fused_grads.size(); ++u) {
        if (!fused_grads[u].defined()) continue;
        expect_close(dm.grad_flats()[u].to(at::kFloat), fused_grads[u].to(at::kFloat), tol,
                     what + " unit " + std::to_string(u));
        ++checked;
      }
      EXPECT_GE(checked, 2) << what;
    }
  }
}

std::vector<at::Tensor> grads_of(model::DenseModel& dm) {
  std::vector<at::Tensor> g;
  for (auto& t : dm.grad_flats()) g.push_back(t.defined() ? t.clone() : t);
  return g;
}

bool same_grads(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t u = 0; u < a.size(); ++u)
    if (a[u].defined() && !at::equal(a[u], b[u])) return false;
  return true;
}

// How many fused SwiGLU kernels ran while `f` did: the fused CPU kernel opens the profiler range
// "lb::swiglu" (model/profile_scope.hpp), the device-generic composition does not.
int fused_swiglu_calls(const std::function<void()>& f) {
  static std::atomic<int> calls{0};
  calls = 0;
  const at::CallbackHandle h = at::addGlobalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        if (std::string(fn.name()) == "lb::swiglu") ++calls;
        return nullptr;
      }).scopes({at::RecordScope::USER_SCOPE}));
  f();
  at::removeCallback(h);
  return calls;
}

// The kernels travel with each model's layout, not through a process-wide switch: two models of one process,
// one on the fused kernels and one on the device-generic path, each run their own, whatever ran before.
TEST(ModelGrads, TwoModelsWithDifferentKernelsInOneProcess) {
  model::LoraSpec lora = model::make_lora_spec(true, 4, 8, 0, false, {"q", "k", "v", "o", "gate", "up", "down"});
  model::ModelLayout fused_layout = model::build_layout(small_shape(), lora), generic_layout = fused_layout;
  generic_layout.kernels.fused = false;
  model::DenseModel fused(fused_layout, at::kBFloat16), generic(generic_layout, at::kBFloat16);
  fused.init_random(13);
  generic.init_random(13);
  for (size_t u = 0; u < fused.trainable_flats().size(); ++u)
    if (fused.trainable_flats()[u].defined()) {
      fused.trainable_flats()[u].normal_(0, 0.1);
      generic.trainable_flats()[u].copy_(fused.trainable_flats()[u]);
    }
  Batch b = make_batch(97, 2, 9);
  const int layers = int(small_shape().layers);
  double f1 = 0, g1 = 0, f2 = 0;
  // Forward and backward of each layer: two fused SwiGLU calls per layer, or none.
  EXPECT_EQ(fused_swiglu_calls([&] { f1 = run_ours(fused, b, false); }), 2 * layers);
  const auto gf1 = grads_of(fused);
  EXPECT_EQ(fused_swiglu_calls([&] { g1 = run_ours(generic, b, false); }), 0);
  const auto gg1 = grads_of(generic);
  EXPECT_EQ(fused_swiglu_calls([&] { f2 = run_ours(fused, b, false); }), 2 * layers);  // after the generic one
  EXPECT_EQ(f1, f2);
  EXPECT_TRUE(same_grads(gf1, grads_of(fused)));
  EXPECT_NEAR(f1, g1, 2e-2 * std::abs(f1));
  // A step given the other setting runs the other kernels on the same weights.
  EXPECT_EQ(fused_swiglu_calls([&] { run_ours(fused, b, false, /*fused_kernels=*/false); }), 0);
  EXPECT_TRUE(same_grads(gg1, grads_of(fused)));
}

TEST(ModelGrads, FusedHeadMatchesUnfusedReference) {
  torch::manual_seed(1);
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    at::Tensor h = torch::randn({37, 16}).to(dt);
    at::Tensor e = (torch::randn({301, 16}) * 0.5).to(dt);
    at::Tensor t = torch::randint(301, {37}, torch::kLong);
    t.index_put_({torch::indexing::Slice(0, 5)}, -100);
    at::Tensor dE1 = torch::zeros({301, 16}), dE2 = torch::zeros({301, 16});
    auto fused = model::head_loss(model::KernelOptions{}, h, e, t, 0.25, dE1, 64);
    auto plain = model::head_loss_reference(h, e, t, 0.25, dE2);
    EXPECT_EQ(fused.counted.item<int64_t>(), 32);
    const double tol = dt == at::kFloat ? 1e-5 : 2e-2;
    EXPECT_NEAR(fused.loss_sum.item<double>(), plain.loss_sum.item<double>(), tol * std::abs(plain.loss_sum.item<double>()));
    expect_close(fused.dh.to(at::kFloat), plain.dh.to(at::kFloat), tol, "dh");
    expect_close(dE1, dE2, tol, "dE");
  }
}

TEST(ModelGrads, LoraDropoutGradientMatchesFiniteDifferences) {
  model::LoraSpec lora = model::make_lora_spec(true, 2, 4, 0.3, false, {"q", "down"});
  model::DenseModel dm(model::build_layout(small_shape(), lora), at::kFloat);
  dm.init_random(11);
  for (auto& t : dm.trainable_flats())
    if (t.defined()) t.normal_(0, 0.2);
  Batch b = make_batch(97, 1, 6);
  model::MicroBatch mb;
  mb.ids = b.ids;
  mb.targets = model::shift_targets(b.labels);
  mb.grad_scale = 1.0;
  mb.dropout = true;
  mb.dropout_seed = 1234;
  dm.zero_grad();
  model::forward_backward(dm.layout(), dm, mb, model::StepOptions{});
  auto loss_at = [&]() {
    model::MicroBatch m2 = mb;
    dm.zero_grad();
    return model::forward_backward(dm.layout(), dm, m2, model::StepOptions{}).loss();
  };
  // Analytic gradient first (the loss_at calls below overwrite the buffer).
  const int u = 1;
  at::Tensor g = dm.grad_flats()[u].clone();
  at::Tensor& w = dm.trainable_flats()[u];
  const auto& unit = dm.layout().units[u];
  int checked = 0;
  for (const auto& s : unit.trainable) {
    for (int64_t i : {int64_t(0), s.numel / 2, s.numel - 1}) {
      const int64_t at_ = s.offset + i;
      const float orig = w[at_].item<float>();
      const double eps = 1e-2;
      w[at_] = orig + eps;
      double lp = loss_at();
      w[at_] = orig - eps;
      double lm = loss_at();
      w[at_] = orig;
      double fd = (lp - lm) / (2 * eps);
      double an = g[at_].item<double>();
      EXPECT_NEAR(an, fd, 2e-2 * std::max(1.0, std::abs(fd))) << s.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4 * 3);
}
