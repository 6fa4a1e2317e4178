// Summary statistics for per-step, per-rank and per-trial measurements. Torch-free. Definitions (with
// the straggler ratio and the repeat mean ± std) are in docs/metrics.md.
//
// Conventions: empty inputs are a programming error (throw lorabench::Error); the sample standard
// deviation of fewer than two values is NaN (undefined, and printed as such rather than as a fake 0).
#pragma once

#include <cstddef>
#include <vector>

namespace lorabench::metrics {

double mean(const std::vector<double>& v);
// Sample standard deviation (divides by n-1). NaN for n < 2.
double sample_stddev(const std::vector<double>& v);
double min_of(const std::vector<double>& v);
double max_of(const std::vector<double>& v);
// Percentile p in [0, 100] with linear interpolation between closest ranks (NumPy's default "linear"):
// position (n-1)·p/100 in the sorted values. p = 50 is the median.
double percentile(const std::vector<double>& v, double p);
double median(const std::vector<double>& v);

// One value per rank (e.g. a step's time on each rank).
struct RankSummary {
  double min = 0;
  double median = 0;
  double max = 0;
  double straggler_ratio = 0;  // max / median; 1 = perfectly balanced; NaN when the median is 0
  size_t slowest_rank = 0;     // index of the maximum (the lowest rank among ties)
  size_t fastest_rank = 0;     // index of the minimum (the lowest rank among ties)
};
RankSummary summarize_ranks(const std::vector<double>& per_rank);

// Repeated trials: per_trial[t][s] is the value of step s in trial t. The first warmup_steps steps of
// each trial are dropped, each trial is reduced to its mean, and the trials' means are summarized.
struct RepeatSummary {
  double mean = 0;                   // mean over trials of the per-trial means
  double stddev = 0;                 // sample std over trials of the per-trial means (NaN for 1 trial)
  std::vector<double> trial_means;   // one per trial
  size_t steps_per_trial_used = 0;   // the minimum over trials of the steps kept after warm-up
};
// REQUIRES: at least one trial, and every trial has more than warmup_steps steps. Throws Error otherwise.
RepeatSummary summarize_repeats(const std::vector<std::vector<double>>& per_trial, size_t warmup_steps);

}  // namespace lorabench::metrics
