#include "lorabench/metrics/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "lorabench/core/error.hpp"

namespace lorabench::metrics {

namespace {

void check_nonempty(const std::vector<double>& v, const char* what) {
  LB_CHECK(!v.empty(), std::string(what) + " of an empty set");
}

}  // namespace

double mean(const std::vector<double>& v) {
  check_nonempty(v, "mean");
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double sample_stddev(const std::vector<double>& v) {
  check_nonempty(v, "standard deviation");
  if (v.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  const double m = mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

double min_of(const std::vector<double>& v) {
  check_nonempty(v, "minimum");
  return *std::min_element(v.begin(), v.end());
}

double max_of(const std::vector<double>& v) {
  check_nonempty(v, "maximum");
  return *std::max_element(v.begin(), v.end());
}

double percentile(const std::vector<double>& v, double p) {
  check_nonempty(v, "percentile");
  LB_CHECK(p >= 0 && p <= 100, "percentile must be in [0, 100], got " + std::to_string(p));
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  const double pos = (static_cast<double>(s.size()) - 1) * p / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, s.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return s[lo] + (s[hi] - s[lo]) * frac;
}

double median(const std::vector<double>& v) { return percentile(v, 50.0); }

RankSummary summarize_ranks(const std::vector<double>& per_rank) {
  check_nonempty(per_rank, "rank summary");
  RankSummary r;
  r.slowest_rank = static_cast<size_t>(std::max_element(per_rank.begin(), per_rank.end()) - per_rank.begin());
  r.fastest_rank = static_cast<size_t>(std::min_element(per_rank.begin(), per_rank.end()) - per_rank.begin());
  r.max = per_rank[r.slowest_rank];
  r.min = per_rank[r.fastest_rank];
  r.median = median(per_rank);
  r.straggler_ratio = r.median != 0 ? r.max / r.median : std::numeric_limits<double>::quiet_NaN();
  return r;
}

RepeatSummary summarize_repeats(const std::vector<std::vector<double>>& per_trial, size_t warmup_steps) {
  LB_CHECK(!per_trial.empty(), "repeat summary of no trials");
  RepeatSummary r;
  r.steps_per_trial_used = std::numeric_limits<size_t>::max();
  for (size_t t = 0; t < per_trial.size(); ++t) {
    const auto& steps = per_trial[t];
    LB_CHECK(steps.size() > warmup_steps, "trial " + std::to_string(t) + " has " + std::to_string(steps.size()) +
                                              " steps, not more than the " + std::to_string(warmup_steps) +
                                              " warm-up steps");
    r.trial_means.push_back(mean(std::vector<double>(steps.begin() + static_cast<std::ptrdiff_t>(warmup_steps), steps.end())));
    r.steps_per_trial_used = std::min(r.steps_per_trial_used, steps.size() - warmup_steps);
  }
  r.mean = mean(r.trial_means);
  r.stddev = sample_stddev(r.trial_means);
  return r;
}

}  // namespace lorabench::metrics
