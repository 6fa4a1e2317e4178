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
  r.straggler_ratio = ratio_to_others(per_rank, r.slowest_rank);
  return r;
}

double ratio_to_others(const std::vector<double>& per_rank, size_t k) {
  LB_CHECK(k < per_rank.size(), "rank " + std::to_string(k) + " of " + std::to_string(per_rank.size()));
  if (per_rank.size() == 1) return 1.0;
  std::vector<double> others;
  for (size_t r = 0; r < per_rank.size(); ++r)
    if (r != k) others.push_back(per_rank[r]);
  const double m = median(others);
  return m != 0 ? per_rank[k] / m : std::numeric_limits<double>::quiet_NaN();
}

StragglerSummary summarize_stragglers(const std::vector<std::vector<double>>& compute, double threshold,
                                      const std::vector<std::vector<double>>& phase_rank_means) {
  LB_CHECK(!compute.empty() && !compute[0].empty(), "straggler summary of no steps or no ranks");
  const size_t world = compute[0].size();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  StragglerSummary out;
  std::vector<double> sums(world, 0.0), ratios;
  std::vector<size_t> top(world, 0);
  for (const auto& step : compute) {
    LB_CHECK(step.size() == world, "every step needs one compute time per rank");
    const RankSummary rs = summarize_ranks(step);
    out.steps.push_back({rs.straggler_ratio, rs.slowest_rank});
    ratios.push_back(rs.straggler_ratio);
    if (rs.straggler_ratio >= threshold) {
      ++out.steps_over;
      ++top[rs.slowest_rank];
    }
    for (size_t r = 0; r < world; ++r) sums[r] += step[r];
  }
  std::vector<double> means;
  for (double s : sums) means.push_back(s / static_cast<double>(compute.size()));
  const RankSummary rs = summarize_ranks(means);
  out.ratio = rs.straggler_ratio;
  out.slowest_rank = rs.slowest_rank;
  // NaN ratios (a median of 0) sort as they come; the median of the finite ones is what matters.
  std::vector<double> finite;
  for (double r : ratios)
    if (std::isfinite(r)) finite.push_back(r);
  out.step_ratio_median = finite.empty() ? nan : median(finite);
  if (out.steps_over > 0) {
    out.top_rank = static_cast<int>(std::max_element(top.begin(), top.end()) - top.begin());
    out.top_steps = top[static_cast<size_t>(out.top_rank)];
  }
  const bool median_over = std::isfinite(out.step_ratio_median) && out.step_ratio_median >= threshold;
  if (out.steps_over == 0) out.kind = "balanced";
  else if (!median_over) out.kind = "hiccup";
  else if (2 * out.top_steps > compute.size()) out.kind = "persistent";
  else out.kind = "intermittent";
  out.named_rank = out.kind == "persistent" ? static_cast<size_t>(out.top_rank) : out.slowest_rank;
  out.named_steps = top[out.named_rank];

  // The named rank against the median of the others.
  auto others_median = [&](const std::vector<double>& v) {
    std::vector<double> o;
    for (size_t r = 0; r < v.size(); ++r)
      if (r != out.named_rank) o.push_back(v[r]);
    return o.empty() ? nan : median(o);
  };
  const double om = others_median(means);
  out.factor = std::isfinite(om) && om > 0 ? means[out.named_rank] / om : nan;
  out.phase_excess_s = nan;
  for (size_t p = 0; p < phase_rank_means.size(); ++p) {
    LB_CHECK(phase_rank_means[p].size() == world, "phase means need one value per rank");
    const double excess = phase_rank_means[p][out.named_rank] - others_median(phase_rank_means[p]);
    if (std::isfinite(excess) && (out.phase < 0 || excess > out.phase_excess_s)) {
      out.phase = static_cast<int>(p);
      out.phase_excess_s = excess;
    }
  }
  return out;
}

std::vector<SummaryAttribute> straggler_summary_attributes(const StragglerSummary& s, double threshold) {
  auto num = [](const char* name, double v) { return SummaryAttribute{name, v, "", false}; };
  auto text = [](const char* name, std::string v) { return SummaryAttribute{name, 0, std::move(v), true}; };
  return {num("straggler_ratio", s.ratio),
          num("slowest_rank", static_cast<double>(s.slowest_rank)),
          num("straggler_threshold", threshold),
          num("straggler_step_ratio_median", s.step_ratio_median),
          num("straggler_steps", static_cast<double>(s.steps_over)),
          text("straggler_kind", s.kind),
          num("straggler_rank", static_cast<double>(s.named_rank)),
          num("straggler_rank_steps", static_cast<double>(s.named_steps)),
          num("straggler_factor", s.factor),
          text("straggler_phase", s.phase >= 0 ? kStragglerPhases[static_cast<size_t>(s.phase)] : ""),
          num("straggler_phase_excess_s", s.phase_excess_s)};
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
