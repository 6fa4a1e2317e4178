// Statistics helpers on inputs whose results are known.
#include <gtest/gtest.h>

#include <cmath>

#include "lorabench/core/error.hpp"
#include "lorabench/metrics/stats.hpp"

namespace m = lorabench::metrics;

TEST(Stats, BasicSummaries) {
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(m::mean(v), 2.5);
  // deviations -1.5 -0.5 0.5 1.5 -> squares sum 5, / (n-1 = 3)
  EXPECT_DOUBLE_EQ(m::sample_stddev(v), std::sqrt(5.0 / 3.0));
  EXPECT_DOUBLE_EQ(m::median(v), 2.5);
  EXPECT_DOUBLE_EQ(m::median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(m::min_of(v), 1.0);
  EXPECT_DOUBLE_EQ(m::max_of(v), 4.0);
  EXPECT_TRUE(std::isnan(m::sample_stddev({7})));
  EXPECT_DOUBLE_EQ(m::sample_stddev({2, 2, 2}), 0.0);
}

TEST(Stats, PercentilesInterpolateLinearly) {
  const std::vector<double> v = {40, 10, 30, 20};  // sorted 10 20 30 40
  EXPECT_DOUBLE_EQ(m::percentile(v, 0), 10);
  EXPECT_DOUBLE_EQ(m::percentile(v, 100), 40);
  EXPECT_DOUBLE_EQ(m::percentile(v, 90), 37);  // position 3 x 0.9 = 2.7 -> 30 + 0.7 x 10
  EXPECT_DOUBLE_EQ(m::percentile({1, 2, 3, 4, 5}, 25), 2);
  EXPECT_DOUBLE_EQ(m::percentile({5}, 99), 5);
  EXPECT_THROW(m::percentile(v, 101), lorabench::Error);
  EXPECT_THROW(m::mean({}), lorabench::Error);
  EXPECT_THROW(m::median({}), lorabench::Error);
}

TEST(Stats, RankSummaryFindsTheStraggler) {
  const auto r = m::summarize_ranks({1.0, 1.2, 0.9, 2.0});
  EXPECT_DOUBLE_EQ(r.min, 0.9);
  EXPECT_DOUBLE_EQ(r.median, 1.1);
  EXPECT_DOUBLE_EQ(r.max, 2.0);
  EXPECT_DOUBLE_EQ(r.straggler_ratio, 2.0 / 1.0);  // against the median of the others {1.0, 1.2, 0.9}
  EXPECT_DOUBLE_EQ(m::ratio_to_others({1.0, 1.2, 0.9, 2.0}, 1), 1.2 / 1.0);
  EXPECT_DOUBLE_EQ(m::ratio_to_others({3.0}, 0), 1.0);  // one rank: nothing to be slower than
  EXPECT_EQ(r.slowest_rank, 3u);
  EXPECT_EQ(r.fastest_rank, 2u);
  const auto even = m::summarize_ranks({0.5, 0.5});
  EXPECT_DOUBLE_EQ(even.straggler_ratio, 1.0);
  EXPECT_EQ(even.slowest_rank, 0u);  // ties: the lowest rank
  EXPECT_TRUE(std::isnan(m::summarize_ranks({0, 0, 1}).straggler_ratio));
  EXPECT_THROW(m::ratio_to_others({1.0, 2.0}, 2), lorabench::Error);
}

TEST(Stats, RepeatsDropWarmupThenSummarizeTrialMeans) {
  // Warm-up step 0 (the slow first step) is excluded; trial means 5, 6, 7 -> 6 +- 1.
  const auto r = m::summarize_repeats({{10, 5, 5, 5}, {12, 6, 6, 6}, {11, 7, 8, 6}}, 1);
  ASSERT_EQ(r.trial_means.size(), 3u);
  EXPECT_DOUBLE_EQ(r.trial_means[0], 5);
  EXPECT_DOUBLE_EQ(r.trial_means[1], 6);
  EXPECT_DOUBLE_EQ(r.trial_means[2], 7);
  EXPECT_DOUBLE_EQ(r.mean, 6);
  EXPECT_DOUBLE_EQ(r.stddev, 1);
  EXPECT_EQ(r.steps_per_trial_used, 3u);
  const auto one = m::summarize_repeats({{3, 4}}, 0);
  EXPECT_DOUBLE_EQ(one.mean, 3.5);
  EXPECT_TRUE(std::isnan(one.stddev));
  EXPECT_THROW(m::summarize_repeats({{1, 2}}, 2), lorabench::Error);
  EXPECT_THROW(m::summarize_repeats({}, 0), lorabench::Error);
}

// Compute times per step (rows) and rank (columns).
using Steps = std::vector<std::vector<double>>;

TEST(Stats, PersistentStragglerFromComputeTime) {
  // Rank 2 computes 3x as long in every step; its extra time is in phase 1 (forward).
  const Steps compute(5, {1.0, 1.1, 3.0, 0.9});
  const std::vector<std::vector<double>> phases = {{0.1, 0.1, 0.1, 0.1}, {0.6, 0.7, 2.6, 0.5}, {0.3, 0.3, 0.3, 0.3}};
  const auto s = m::summarize_stragglers(compute, m::kStragglerThreshold, phases);
  ASSERT_EQ(s.steps.size(), 5u);
  EXPECT_DOUBLE_EQ(s.steps[0].ratio, 3.0 / 1.0);  // max / median of the others {1.0, 1.1, 0.9}
  EXPECT_EQ(s.steps[0].slowest_rank, 2u);
  EXPECT_DOUBLE_EQ(s.ratio, 3.0 / 1.0);
  EXPECT_EQ(s.slowest_rank, 2u);
  EXPECT_DOUBLE_EQ(s.step_ratio_median, 3.0 / 1.0);
  EXPECT_EQ(s.steps_over, 5u);
  EXPECT_EQ(s.top_rank, 2);
  EXPECT_EQ(s.top_steps, 5u);
  EXPECT_EQ(s.kind, "persistent");
  EXPECT_EQ(s.named_rank, 2u);
  EXPECT_EQ(s.named_steps, 5u);
  EXPECT_DOUBLE_EQ(s.factor, 3.0 / 1.0);  // against the median of the other ranks {0.9, 1.0, 1.1}
  EXPECT_EQ(s.phase, 1);
  EXPECT_DOUBLE_EQ(s.phase_excess_s, 2.6 - 0.6);
}

TEST(Stats, TwoRanksFactorIsAgainstTheOtherRank) {
  // With two ranks the ratio is against the other rank, as the factor is: 3, both.
  const auto s = m::summarize_stragglers(Steps(4, {0.1, 0.3}), m::kStragglerThreshold);
  EXPECT_DOUBLE_EQ(s.ratio, 3.0);
  EXPECT_DOUBLE_EQ(s.factor, 3.0);
  EXPECT_EQ(s.kind, "persistent");
  EXPECT_EQ(s.phase, -1);  // no phases given
  EXPECT_TRUE(std::isnan(s.phase_excess_s));
}

// Issue 49, item 9: one of two ranks computing 19% longer in every step is a persistent straggler. Against
// the median of both ranks (their mean) the ratio read 1.19 / 1.095 = 1.087, under the threshold: the report
// said "no single slow rank" beside a per-rank table showing the 19%.
TEST(Stats, TwoRanksNineteenPercentSlowerIsAStraggler) {
  const auto s = m::summarize_stragglers(Steps(6, {1.0, 1.19}), m::kStragglerThreshold);
  EXPECT_NEAR(s.step_ratio_median, 1.19, 1e-12);
  EXPECT_NEAR(s.ratio, 1.19, 1e-12);
  EXPECT_EQ(s.steps_over, 6u);
  EXPECT_EQ(s.kind, "persistent");
  EXPECT_EQ(s.named_rank, 1u);
  EXPECT_NEAR(s.factor, s.ratio, 1e-12);
  // 9% slower stays under the threshold.
  EXPECT_EQ(m::summarize_stragglers(Steps(6, {1.0, 1.09}), m::kStragglerThreshold).kind, "balanced");
}

TEST(Stats, OneStepHiccupIsNotAStraggler) {
  // Rank 1 is 4x slower in one step of ten: the mean of its compute moves, the median step does not.
  Steps compute(10, {1.0, 1.02});
  compute[6] = {1.0, 4.0};
  const auto s = m::summarize_stragglers(compute, m::kStragglerThreshold);
  EXPECT_EQ(s.kind, "hiccup");
  EXPECT_EQ(s.steps_over, 1u);
  EXPECT_EQ(s.top_rank, 1);
  EXPECT_EQ(s.top_steps, 1u);
  EXPECT_LT(s.step_ratio_median, m::kStragglerThreshold);
  EXPECT_GT(s.ratio, m::kStragglerThreshold);  // the ratio of means alone would call it a straggler
  EXPECT_EQ(s.slowest_rank, 1u);
  EXPECT_EQ(s.named_rank, 1u);
}

TEST(Stats, RanksTakingTurnsAreIntermittent) {
  // Every step has a 2x straggler, but a different rank each time (of three ranks: none in most steps).
  const Steps compute = {{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 1, 1}, {1, 2, 1}, {1, 1, 2}};
  const auto s = m::summarize_stragglers(compute, m::kStragglerThreshold);
  EXPECT_EQ(s.kind, "intermittent");
  EXPECT_EQ(s.steps_over, 6u);
  EXPECT_EQ(s.top_steps, 2u);
  EXPECT_DOUBLE_EQ(s.step_ratio_median, 2.0);
  EXPECT_DOUBLE_EQ(s.ratio, 1.0);  // the rank means are equal
}

TEST(Stats, BalancedRanksAndBadInput) {
  const auto s = m::summarize_stragglers(Steps(3, {1.0, 1.05, 0.98}), m::kStragglerThreshold);
  EXPECT_EQ(s.kind, "balanced");
  EXPECT_EQ(s.steps_over, 0u);
  EXPECT_EQ(s.top_rank, -1);
  const auto one = m::summarize_stragglers(Steps(2, {1.0}), m::kStragglerThreshold);
  EXPECT_DOUBLE_EQ(one.ratio, 1.0);
  EXPECT_TRUE(std::isnan(one.factor));  // no other rank
  EXPECT_EQ(one.kind, "balanced");
  EXPECT_THROW(m::summarize_stragglers({}, 1.1), lorabench::Error);
  EXPECT_THROW(m::summarize_stragglers({{1.0, 2.0}, {1.0}}, 1.1), lorabench::Error);
}
