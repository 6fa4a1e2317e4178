// AdamW against torch.optim.AdamW (values recorded from PyTorch 1.13's implementation, Debian python3-torch:
// lr 1e-2, betas (0.9, 0.95), eps 1e-8, weight decay 0.1, three steps), and the LR schedules against
// their closed forms.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "lorabench/optim/adamw.hpp"
#include "lorabench/optim/schedule.hpp"

using namespace lorabench::optim;

namespace {

const std::vector<float> kInit = {0.5f, -0.25f, 1.0f, 0.0f, 3e-3f, -2.0f, 0.125f, 1e-5f};
const std::vector<std::vector<float>> kGrads = {{0.1f, -0.2f, 0.0f, 1.5f, -1e-4f, 0.3f, 2.0f, -0.05f},
                                                {-0.3f, 0.1f, 0.05f, 1.0f, 2e-4f, 0.0f, -1.0f, 0.07f},
                                                {0.2f, 0.2f, -0.1f, -0.5f, 0.0f, 0.1f, 0.5f, 0.01f}};
// torch.optim.AdamW after each step (all eight elements decayed).
const std::vector<std::vector<double>> kTorch = {
    {0.489500016, -0.239749998, 0.999000013, -0.00999999978, 0.0129959993, -2.00800014, 0.114875004, 0.0100099882},
    {0.493903458, -0.236826554, 0.990651429, -0.0197407901, 0.00934949145, -2.01277876, 0.112076439, 0.00784577243},
    {0.493222654, -0.2393163, 0.992742121, -0.025320854, 0.00649515353, -2.01784348, 0.108497553, 0.00541896466}};
const std::vector<double> kTorchExpAvg = {0.00109999918, 0.0128000006, -0.00549999997, 0.161500007,
                                          9.8999999e-06, 0.0342999995, 0.121999994,  0.00324999983};
const std::vector<double> kTorchExpAvgSq = {0.00672625052, 0.00428000046, 0.000618750055, 0.161531255,
                                            2.35124986e-09, 0.0045612501, 0.240499988, 0.000350562506};
// The same with weight decay only on the first four elements (two torch param groups).
const std::vector<double> kTorchPartialDecay = {0.493222654, -0.2393163, 0.992742121, -0.025320854,
                                                0.00652049948, -2.02386403, 0.108849496, 0.00543682929};

at::Tensor tensor(const std::vector<float>& v) { return at::tensor(at::ArrayRef<float>(v)).clone(); }

AdamWConfig config() {
  AdamWConfig c;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  return c;
}

void expect_rel(const at::Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[int64_t(i)].item<double>();
    EXPECT_LE(std::abs(g - want[i]), tol * std::max(std::abs(want[i]), 1e-30) + 1e-12)
        << what << "[" << i << "]: " << g << " vs " << want[i];
  }
}

}  // namespace

TEST(AdamW, MatchesTorchStepByStep) {
  at::Tensor p = tensor(kInit), m = at::zeros({8}), v = at::zeros({8});
  for (int s = 0; s < 3; ++s) {
    adamw_update(p, tensor(kGrads[s]), m, v, s + 1, 1e-2, config(), {{0, 8}});
    expect_rel(p, kTorch[s], 1e-7, "step " + std::to_string(s + 1));
  }
  expect_rel(m, kTorchExpAvg, 1e-7, "exp_avg");
  expect_rel(v, kTorchExpAvgSq, 1e-6, "exp_avg_sq");
}

TEST(AdamW, WeightDecayOnlyInsideItsRanges) {
  at::Tensor p = tensor(kInit), m = at::zeros({8}), v = at::zeros({8});
  for (int s = 0; s < 3; ++s) adamw_update(p, tensor(kGrads[s]), m, v, s + 1, 1e-2, config(), {{0, 4}});
  expect_rel(p, kTorchPartialDecay, 1e-7, "partial decay");
}

TEST(AdamW, ShardedPiecesEqualTheWhole) {
  // ZeRO/FSDP update pieces with the decay ranges intersected: the result must be bitwise the same.
  const Ranges decay = {{1, 3}, {6, 2}};
  at::Tensor p = tensor(kInit), m = at::zeros({8}), v = at::zeros({8});
  at::Tensor q = tensor(kInit), mq = at::zeros({8}), vq = at::zeros({8});
  for (int s = 0; s < 3; ++s) {
    adamw_update(p, tensor(kGrads[s]), m, v, s + 1, 1e-2, config(), decay);
    at::Tensor g = tensor(kGrads[s]);
    for (int64_t lo : {0, 3, 5}) {
      const int64_t n = lo == 0 ? 3 : 2 + (lo == 5 ? 1 : 0);
      at::Tensor pp = q.narrow(0, lo, n), mm = mq.narrow(0, lo, n), vv = vq.narrow(0, lo, n);
      adamw_update(pp, g.narrow(0, lo, n), mm, vv, s + 1, 1e-2, config(), intersect(decay, lo, n));
    }
  }
  EXPECT_TRUE(at::equal(p, q));
  EXPECT_EQ(intersect({{1, 3}, {6, 2}}, 3, 4), (Ranges{{0, 1}, {3, 1}}));
}

TEST(Schedule, ClosedForms) {
  ScheduleSpec s;
  s.lr = 1e-3;
  s.min_lr = 1e-4;
  s.warmup_steps = 4;
  s.total_steps = 14;
  for (const char* kind : {"constant", "cosine", "linear"}) {
    s.kind = kind;
    for (int64_t t = 0; t < s.total_steps; ++t) {
      double want;
      if (t < 4) {
        want = 1e-3 * double(t + 1) / 4.0;
      } else {
        const double p = double(t - 4) / double(14 - 1 - 4);
        if (s.kind == "constant") want = 1e-3;
        else if (s.kind == "linear") want = 1e-4 + (1e-3 - 1e-4) * (1 - p);
        else want = 1e-4 + (1e-3 - 1e-4) * 0.5 * (1 + std::cos(M_PI * p));
      }
      EXPECT_NEAR(lr_at(s, t), want, 1e-15) << kind << " step " << t;
    }
  }
  s.kind = "cosine";
  EXPECT_DOUBLE_EQ(lr_at(s, 4), 1e-3);    // first step after warm-up: the peak
  EXPECT_DOUBLE_EQ(lr_at(s, 13), 1e-4);   // last step: the floor
  s.kind = "linear";
  EXPECT_DOUBLE_EQ(lr_at(s, 13), 1e-4);
  s.warmup_steps = 0;
  s.kind = "cosine";
  EXPECT_DOUBLE_EQ(lr_at(s, 0), 1e-3);    // no warm-up: starts at the peak
}
