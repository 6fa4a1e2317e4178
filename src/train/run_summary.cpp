#include "run_summary.hpp"

#include <algorithm>
#include <cmath>

#include "lorabench/core/strings.hpp"
#include "lorabench/io/schema.hpp"

namespace lorabench::train {

namespace {

using schema::StepColumn;

constexpr int kPhaseColumns[5] = {schema::kDataS, schema::kForwardS, schema::kBackwardS, schema::kCommExposedS,
                                  schema::kOptimizerS};
constexpr const char* kPhaseNames[5] = {"data", "forward", "backward", "comm_exposed", "optimizer"};  // schema.cpp
constexpr int kSyncColumns[3] = {schema::kComputeS, schema::kWaitPeersS, schema::kTransferS};
constexpr const char* kSyncNames[3] = {"compute_s", "wait_peers_s", "transfer_s"};
constexpr int kBytesColumns[5] = {schema::kBytesAllReduce, schema::kBytesReduceScatter, schema::kBytesAllGather,
                                  schema::kBytesBroadcast, schema::kBytesAllToAll};  // named bytes_<collective>

// The rows gathered by step and by rank.
struct Collected {
  // Per trial: per step the max-over-ranks step time and the global tokens/s.
  std::vector<std::vector<double>> step_max, tok_s;
  std::vector<double> step_max_measured, mfu_measured;  // measured steps (after the warm-up), all trials
  std::vector<std::vector<double>> per_rank_step, per_rank_phase[5], per_rank_sync[3];  // measured steps
  std::vector<std::vector<double>> compute_by_step;  // per measured step, compute_s of each rank
  double bytes_rank0[5] = {0, 0, 0, 0, 0};           // rank 0's payload bytes over the measured steps
  double loss_first = NAN, loss_last = NAN, mem_peak = 0, rss_peak = 0, mem_end = 0, reserved_peak = 0;
};

Collected collect(const std::vector<double>& rows, const RunFacts& f) {
  const size_t ncol = schema::kNumStepColumns, nrows = rows.size() / ncol, W = size_t(f.world);
  auto at = [&](size_t r, int col) { return rows[r * ncol + size_t(col)]; };
  Collected c;
  c.step_max.resize(size_t(f.trials));
  c.tok_s.resize(size_t(f.trials));
  c.per_rank_step.resize(W);
  for (auto& v : c.per_rank_phase) v.resize(W);
  for (auto& v : c.per_rank_sync) v.resize(W);
  for (size_t r = 0; r < nrows; r += W) {
    const int trial = int(at(r, schema::kTrial));
    const bool measured = int64_t(at(r, schema::kStep)) >= f.warmup_steps;
    double smax = 0, tok = 0, flops = 0;
    for (size_t w = 0; w < W; ++w) {
      smax = std::max(smax, at(r + w, schema::kStepS));
      tok += at(r + w, schema::kTokens);
      flops += at(r + w, schema::kFlops);
      c.mem_peak = std::max(c.mem_peak, at(r + w, schema::kMemPeak));
      c.rss_peak = std::max(c.rss_peak, at(r + w, schema::kRssPeak));
      c.reserved_peak = std::max(c.reserved_peak, at(r + w, schema::kMemReservedPeak));
      if (!measured) continue;
      c.per_rank_step[w].push_back(at(r + w, schema::kStepS));
      for (int p = 0; p < 5; ++p) c.per_rank_phase[p][w].push_back(at(r + w, kPhaseColumns[p]));
      for (int k = 0; k < 3; ++k) c.per_rank_sync[k][w].push_back(at(r + w, kSyncColumns[k]));
    }
    if (measured) {
      for (int k = 0; k < 5; ++k) c.bytes_rank0[k] += at(r, kBytesColumns[k]);
      c.compute_by_step.emplace_back();
      for (size_t w = 0; w < W; ++w) c.compute_by_step.back().push_back(at(r + w, schema::kComputeS));
    }
    // A trial's last step, or where a stop signal ended it.
    if (int64_t(at(r, schema::kStep)) == f.steps - 1 || r + W >= nrows)
      for (size_t w = 0; w < W; ++w) c.mem_end = std::max(c.mem_end, at(r + w, schema::kMemCurrent));
    if (trial == 0 && r == 0) c.loss_first = at(r, schema::kLoss);  // the first step run (resumed runs start later)
    if (trial == 0) c.loss_last = at(r, schema::kLoss);
    c.step_max[size_t(trial)].push_back(smax);
    c.tok_s[size_t(trial)].push_back(tok / smax);
    if (measured) {
      c.step_max_measured.push_back(smax);
      c.mfu_measured.push_back(flops / smax / (f.peak.flops_per_s * f.world));
    }
  }
  return c;
}

std::vector<double> rank_means(const std::vector<std::vector<double>>& v) {
  std::vector<double> out;
  for (const auto& x : v) out.push_back(x.empty() ? 0.0 : metrics::mean(x));
  return out;
}

// The run's own consistency check of its rows: the phases add up to the step (HPCG-style verdict).
io::ValidationCheck phases_add_up(const std::vector<double>& rows) {
  const size_t ncol = schema::kNumStepColumns, nrows = rows.size() / ncol;
  auto at = [&](size_t r, int col) { return rows[r * ncol + size_t(col)]; };
  size_t bad = 0;
  double worst = 0;
  for (size_t r = 0; r < nrows; ++r) {
    const double step = at(r, schema::kStepS);
    double sum = 0;
    for (int col : kPhaseColumns) sum += at(r, col);
    const double gap = std::abs(step - sum);
    worst = std::max(worst, gap / step);
    if (gap > std::max(0.05 * step, 0.002)) ++bad;
  }
  return {"phases_add_up", bad == 0,
          strformat("data+forward+backward+comm+optimizer within 5%% (or 2 ms) of step_s in %zu/%zu rows; worst gap "
                    "%.1f%%",
                    nrows - bad, nrows, 100 * worst)};
}

// The roofline of the compute phases (metrics/roofline.hpp): each phase's FLOPs and bytes per rank and step
// against the frame and the bandwidth, and the median rank's measured phase time against that bound.
void add_roofline(RunSummary& out, const RunFacts& f, const Collected& c) {
  if (!(f.bandwidth.bytes_per_s > 0) || !(f.peak.flops_per_s > 0)) return;
  std::array<double, metrics::kRooflinePhases> measured{};
  const int columns[metrics::kRooflinePhases] = {1, 2, 4};  // forward, backward, optimizer in per_rank_phase
  for (int i = 0; i < metrics::kRooflinePhases; ++i)
    measured[size_t(i)] = metrics::summarize_ranks(rank_means(c.per_rank_phase[columns[i]])).median;
  const metrics::StepRoofline r =
      metrics::step_roofline(f.phase_flops, f.traffic, measured, f.peak.flops_per_s, f.bandwidth.bytes_per_s);
  for (auto& a : metrics::roofline_summary_attributes(r, f.bandwidth, f.peak.flops_per_s))
    out.attributes.push_back(std::move(a));
}

}  // namespace

bool RunSummary::valid() const {
  return std::all_of(checks.begin(), checks.end(), [](const io::ValidationCheck& c) { return c.passed; });
}

RunSummary summarize_run(const std::vector<double>& rows, const RunFacts& f) {
  const Collected c = collect(rows, f);
  const metrics::RepeatSummary st = metrics::summarize_repeats(c.step_max, size_t(f.warmup_steps));
  const metrics::RepeatSummary tk = metrics::summarize_repeats(c.tok_s, size_t(f.warmup_steps));
  RunSummary out;
  out.step_time_mean_s = st.mean;
  out.tokens_per_s_mean = tk.mean;
  auto add = [&](const std::string& name, double v) { out.attributes.push_back({name, v, "", false}); };
  auto add_text = [&](const std::string& name, const std::string& v) { out.attributes.push_back({name, 0, v, true}); };
  add_text("strategy", f.strategy);
  add("world_size", f.world);
  add("micro_batch", f.geo.micro_batch);
  add("grad_accum", f.geo.grad_accum);
  add("global_batch_size", double(f.geo.global_batch()));
  add("seq_len", f.geo.seq_len);
  add_text("dtype", f.dtype);
  add_text("model", f.model);
  add_text("model_family", f.model_family);
  add_text("model_layers", f.model_layers);
  add("total_params", double(f.total_params));
  add("trainable_params", double(f.trainable_params));
  add("trainable_ratio", double(f.trainable_params) / double(f.total_params));
  add("trials", f.trials);
  add("measured_steps", double(st.steps_per_trial_used));
  add("step_time_mean_s", st.mean);
  add("step_time_std_s", st.trial_means.size() > 1 ? st.stddev : 0.0);
  add("step_time_median_s", metrics::median(c.step_max_measured));
  add("tokens_per_s_mean", tk.mean);
  add("tokens_per_s_std", tk.trial_means.size() > 1 ? tk.stddev : 0.0);
  add("loss_first", c.loss_first);
  add("loss_last", c.loss_last);
  add("mem_peak_bytes_max", c.mem_peak);
  add("rss_peak_bytes_max", c.rss_peak);
  add("mem_reserved_peak_bytes_max", c.reserved_peak);
  add("mem_current_bytes_max", c.mem_end);
  add("flops_per_step", f.flops_per_token * double(f.geo.tokens_per_step()));
  add("flops_per_token", f.flops_per_token);
  add("peak_flops_per_rank", f.peak.flops_per_s);
  add_text("peak_flops_source", f.peak.source);
  add_text("peak_flops_detail", f.peak.detail);
  add("mfu_mean", metrics::mean(c.mfu_measured));
  add("clipped_steps", double(f.clipped_steps));
  add("skipped_steps", double(f.skipped_steps));
  add("empty_steps", double(f.empty_steps));
  add("skipped_records", double(f.skipped_records));
  add_text("data_source", f.data_source);
  add("predicted_params_bytes", double(f.prediction.params));
  add("predicted_grads_bytes", double(f.prediction.grads));
  add("predicted_optimizer_bytes", double(f.prediction.optimizer));
  add("predicted_model_state_bytes", double(f.prediction.total()));
  add_text("predicted_formula", f.prediction.formula);
  add("prefetched_layers", f.prefetched_layers);
  // Rank 0's payload bytes per measured step (the send side, docs/comm.md), in all and per collective where
  // not 0: what a peer's comm logger is compared with (bench/run_bench.py --deepspeed).
  const double measured_steps = double(c.compute_by_step.size());
  if (measured_steps > 0) {
    double total = 0;
    for (int k = 0; k < 5; ++k) {
      const double b = c.bytes_rank0[k] / measured_steps;
      total += b;
      if (b > 0)  // comm_bytes_per_step_ + the column's name without its "bytes_"
        add("comm_bytes_per_step_" + std::string(schema::step_columns()[size_t(kBytesColumns[k])].name).substr(6), b);
    }
    add("comm_bytes_per_step", total);
  }
  add_text("papi_status", f.papi_status);

  // Across ranks: each rank's mean over measured steps, then min / median / max and the straggler.
  const metrics::RankSummary rs = metrics::summarize_ranks(rank_means(c.per_rank_step));
  add("step_time_rank_min_s", rs.min);
  add("step_time_rank_median_s", rs.median);
  add("step_time_rank_max_s", rs.max);
  auto add_rank_summary = [&](const std::string& prefix, const std::vector<std::vector<double>>& v) {
    const metrics::RankSummary ps = metrics::summarize_ranks(rank_means(v));
    add(prefix + "_rank_min", ps.min);
    add(prefix + "_rank_median", ps.median);
    add(prefix + "_rank_max", ps.max);
  };
  for (int p = 0; p < 5; ++p) add_rank_summary(std::string(kPhaseNames[p]) + "_s", c.per_rank_phase[p]);
  for (int k = 0; k < 3; ++k) add_rank_summary(kSyncNames[k], c.per_rank_sync[k]);

  // Stragglers from compute time (docs/metrics.md, "Stragglers"), located in the compute phases.
  std::vector<std::vector<double>> phase_means;
  for (int p : {0, 1, 2, 4}) phase_means.push_back(rank_means(c.per_rank_phase[p]));  // metrics::kStragglerPhases
  const metrics::StragglerSummary sg =
      metrics::summarize_stragglers(c.compute_by_step, metrics::kStragglerThreshold, phase_means);
  for (const auto& a : metrics::straggler_summary_attributes(sg, metrics::kStragglerThreshold))
    out.attributes.push_back(a);
  add_roofline(out, f, c);
  add_text("clock_sync", f.clock_sync);
  add("clock_offset_error_s", f.clock_offset_error_s);

  out.checks.push_back({"losses_finite", f.losses_finite,
                        f.losses_finite ? "every step's loss is finite" : "a step had a non-finite loss"});
  out.checks.push_back({"tokens_trained", f.empty_steps == 0,
                        f.empty_steps == 0 ? "every step had tokens to train on"
                                           : strformat("%lld step(s) had no token to train on and made no update "
                                                       "(train.on_empty_step = skip)", (long long)f.empty_steps)});
  out.checks.push_back(f.state_check);
  out.checks.push_back(phases_add_up(rows));
  return out;
}

void write_run_summary(io::RunFileWriter& run, const RunSummary& s) {
  for (const auto& a : s.attributes) {
    if (a.is_text) run.write_summary(a.name, a.text);
    else run.write_summary(a.name, a.number);
  }
  run.write_validation(s.checks);
}

}  // namespace lorabench::train
