// train/run_summary: the summary attributes and checks of a run from hand-made step rows, no run file.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../../src/train/run_summary.hpp"
#include "lorabench/io/schema.hpp"

using namespace lorabench;

namespace {

// One row: a step of one rank whose phases add up to step_s.
std::vector<double> row(int step, int rank, double loss, double step_s, double tokens) {
  std::vector<double> r(schema::kNumStepColumns, 0.0);
  r[schema::kStep] = step;
  r[schema::kRank] = rank;
  r[schema::kLoss] = loss;
  r[schema::kTokens] = tokens;
  r[schema::kFlops] = tokens * 10;
  r[schema::kStepS] = step_s;
  r[schema::kForwardS] = step_s * 0.4;
  r[schema::kBackwardS] = step_s * 0.5;
  r[schema::kOptimizerS] = step_s * 0.1;
  r[schema::kComputeS] = step_s;
  r[schema::kMemPeak] = 1000.0 * (rank + 1);
  return r;
}

train::RunFacts facts() {
  train::RunFacts f;
  f.strategy = "ddp";
  f.world = 2;
  f.steps = 3;
  f.warmup_steps = 1;
  f.geo = data::BatchGeometry{2, 3, 2, 16};
  f.total_params = 100;
  f.trainable_params = 10;
  f.peak.flops_per_s = 1000;
  f.flops_per_token = 5;
  f.state_check = {"replicas_identical", true, "ok"};
  return f;
}

std::map<std::string, double> numbers(const train::RunSummary& s) {
  std::map<std::string, double> m;
  for (const auto& a : s.attributes)
    if (!a.is_text) m[a.name] = a.number;
  return m;
}

}  // namespace

TEST(RunSummary, FromStepRows) {
  std::vector<double> rows;
  // Three steps of two ranks; rank 1 is the slower one in the measured steps (2 and 1.5 s against 1).
  const double times[3][2] = {{5, 5}, {1, 2}, {1, 1.5}};
  for (int s = 0; s < 3; ++s)
    for (int w = 0; w < 2; ++w) {
      const auto r = row(s, w, 4.0 - s, times[s][w], 64);
      rows.insert(rows.end(), r.begin(), r.end());
    }
  const train::RunSummary sum = train::summarize_run(rows, facts());
  const auto n = numbers(sum);
  EXPECT_EQ(n.at("global_batch_size"), 12);
  EXPECT_EQ(n.at("measured_steps"), 2);
  EXPECT_DOUBLE_EQ(n.at("step_time_mean_s"), (2 + 1.5) / 2);  // the slowest rank of each measured step
  EXPECT_DOUBLE_EQ(n.at("tokens_per_s_mean"), (128 / 2.0 + 128 / 1.5) / 2);
  EXPECT_DOUBLE_EQ(n.at("loss_first"), 4);
  EXPECT_DOUBLE_EQ(n.at("loss_last"), 2);
  EXPECT_DOUBLE_EQ(n.at("mem_peak_bytes_max"), 2000);
  EXPECT_DOUBLE_EQ(n.at("step_time_rank_max_s"), 1.75);
  EXPECT_DOUBLE_EQ(n.at("flops_per_step"), 5.0 * 12 * 16);  // flops per token x global batch x seq_len
  EXPECT_TRUE(sum.valid());
  EXPECT_EQ(sum.checks.size(), 4u);
}

TEST(RunSummary, CommBytesPerStepAreRankZerosMeasuredSteps) {
  std::vector<double> rows;
  for (int s = 0; s < 3; ++s)
    for (int w = 0; w < 2; ++w) {
      auto r = row(s, w, 4.0 - s, 1.0, 64);
      r[schema::kBytesAllReduce] = s == 0 ? 1e9 : 100.0 * s + w;  // the warm-up step's bytes do not count
      r[schema::kBytesAllGather] = 50.0 * (w + 1);                  // rank 1's do not either
      rows.insert(rows.end(), r.begin(), r.end());
    }
  const auto n = numbers(train::summarize_run(rows, facts()));
  EXPECT_DOUBLE_EQ(n.at("comm_bytes_per_step_all_reduce"), (100.0 + 200.0) / 2);
  EXPECT_DOUBLE_EQ(n.at("comm_bytes_per_step_all_gather"), 50.0);
  EXPECT_DOUBLE_EQ(n.at("comm_bytes_per_step"), 200.0);
  EXPECT_EQ(n.count("comm_bytes_per_step_reduce_scatter"), 0u);  // a collective the run did not use
}

// Steps skipped for want of a token to train on (train.on_empty_step = skip) make the run INVALID, saying so.
TEST(RunSummary, StepsWithNothingToTrainOnMakeItInvalid) {
  std::vector<double> rows;
  for (int s = 0; s < 3; ++s)
    for (int w = 0; w < 2; ++w) {
      const auto r = row(s, w, 1, 1, 8);
      rows.insert(rows.end(), r.begin(), r.end());
    }
  train::RunFacts f = facts();
  EXPECT_TRUE(train::summarize_run(rows, f).valid());
  f.empty_steps = 2;
  const train::RunSummary sum = train::summarize_run(rows, f);
  EXPECT_FALSE(sum.valid());
  bool found = false;
  for (const auto& c : sum.checks)
    if (c.name == "tokens_trained") {
      found = true;
      EXPECT_FALSE(c.passed);
      EXPECT_NE(c.detail.find("2 step(s) had no token to train on"), std::string::npos) << c.detail;
    }
  EXPECT_TRUE(found);
  EXPECT_EQ(numbers(sum).at("empty_steps"), 2);
}

TEST(RunSummary, PhasesThatDoNotAddUpMakeItInvalid) {
  std::vector<double> rows;
  for (int s = 0; s < 3; ++s)
    for (int w = 0; w < 2; ++w) {
      auto r = row(s, w, 1, 1, 8);
      if (s == 2 && w == 1) r[schema::kBackwardS] = 0;  // half the step unaccounted for
      rows.insert(rows.end(), r.begin(), r.end());
    }
  train::RunFacts f = facts();
  const train::RunSummary sum = train::summarize_run(rows, f);
  EXPECT_FALSE(sum.valid());
  EXPECT_FALSE(sum.checks.back().passed);
  EXPECT_NE(sum.checks.back().detail.find("5/6 rows"), std::string::npos) << sum.checks.back().detail;
  f.losses_finite = false;
  EXPECT_FALSE(train::summarize_run(rows, f).checks.front().passed);
}
