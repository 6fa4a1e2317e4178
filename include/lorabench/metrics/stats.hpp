// Summary statistics for per-step, per-rank and per-trial measurements. Torch-free. Definitions (with
// the straggler ratio and the repeat mean ± std) are in docs/metrics.md.
//
// Conventions: empty inputs are a programming error (throw lorabench::Error); the sample standard
// deviation of fewer than two values is NaN (undefined, and printed as such rather than as a fake 0).
#pragma once

#include <array>
#include <cstddef>
#include <string>
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
  // The slowest rank against the others: max / the median of the other ranks' values (the slowest left out,
  // so that with two ranks a rank 19% slower reads 1.19, not 1.19 / 1.095); 1 = balanced, and with one rank;
  // NaN when that median is 0. The report's per-rank table shows the same quotient for every rank.
  double straggler_ratio = 0;
  size_t slowest_rank = 0;     // index of the maximum (the lowest rank among ties)
  size_t fastest_rank = 0;     // index of the minimum (the lowest rank among ties)
};
RankSummary summarize_ranks(const std::vector<double>& per_rank);
// per_rank[k] / the median of the other ranks' values: RankSummary::straggler_ratio's quotient for rank k
// (1 with one rank, NaN when that median is 0).
double ratio_to_others(const std::vector<double>& per_rank, size_t k);

// The straggler threshold of the run's summary and of the report's default rules: a rank whose compute
// time is at least 1.10x the median of the other ranks' is a straggler in that step.
inline constexpr double kStragglerThreshold = 1.10;

// Stragglers found from compute time (the step without the time blocked in collectives), not step time:
// the collectives make every rank's step time equal (docs/metrics.md, "Stragglers").
struct StepStraggler {
  double ratio = 0;         // the step's slowest rank's compute / the other ranks' median (RankSummary)
  size_t slowest_rank = 0;  // lowest rank among ties
};
struct StragglerSummary {
  std::vector<StepStraggler> steps;  // one per step given
  // From each rank's mean compute over the steps:
  double ratio = 0;           // slowest rank's mean / the other ranks' median mean (RankSummary::straggler_ratio)
  size_t slowest_rank = 0;    // the rank with the largest mean
  // From the steps:
  double step_ratio_median = 0;  // median over steps of the per-step ratio (a one-step hiccup does not move it)
  size_t steps_over = 0;         // steps whose ratio reaches the threshold
  int top_rank = -1;             // the rank most often the slowest in those steps (lowest among ties), -1: none
  size_t top_steps = 0;          // in how many steps it was
  // "balanced": no step reaches the threshold. "persistent": the median step does, and top_rank is the
  // slowest, by at least the threshold, in more than half of the steps. "intermittent": the median step
  // does, but no rank in most steps. "hiccup": some steps do, the median step does not.
  std::string kind;
  // The rank the summary names: top_rank when persistent, else slowest_rank; and in how many steps it was
  // the slowest by at least the threshold.
  size_t named_rank = 0;
  size_t named_steps = 0;
  double factor = 0;  // named rank's mean compute / median of the other ranks' means (NaN with one rank)
  // With phase means: the phase (index into phase_rank_means) in which the named rank exceeds the median of
  // the other ranks most, and by how many seconds per step; -1 / NaN without phases or other ranks.
  int phase = -1;
  double phase_excess_s = 0;
};
// The phases whose excess locates a straggler, in the order the trainer and the report pass their means
// (phase_rank_means below): StragglerSummary::phase indexes this.
inline constexpr std::array<const char*, 4> kStragglerPhases = {"data", "forward", "backward", "optimizer"};

// compute[s][r]: rank r's compute seconds in step s (every step has the same number of ranks).
// phase_rank_means[p][r]: rank r's mean seconds per step in phase p (optional). REQUIRES: at least one
// step and one rank. Throws Error otherwise.
StragglerSummary summarize_stragglers(const std::vector<std::vector<double>>& compute, double threshold,
                                      const std::vector<std::vector<double>>& phase_rank_means = {});

// The straggler attributes of a run's /metrics/summary (docs/hdf5-schema.md) for `s`, summarized at
// `threshold` with phases in kStragglerPhases order: straggler_ratio, slowest_rank, straggler_threshold,
// straggler_step_ratio_median, straggler_steps, straggler_kind, straggler_rank, straggler_rank_steps,
// straggler_factor, straggler_phase, straggler_phase_excess_s. One writer for the trainer and the report's
// test fixtures.
struct SummaryAttribute {
  std::string name;
  double number = 0;
  std::string text;
  bool is_text = false;
};
std::vector<SummaryAttribute> straggler_summary_attributes(const StragglerSummary& s, double threshold);

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
