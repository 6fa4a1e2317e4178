// lorabench-report, part 2: the numbers behind every table, computed from RunRecords. Every definition
// (and every threshold of the bottleneck rules) is documented in docs/report.md; a value that cannot be
// computed is NaN (printed "n/a").
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "lorabench/metrics/stats.hpp"
#include "report_data.hpp"

namespace lorabench::report {

// Phases of a step as in /metrics/summary (<name>_s_rank_median) and metrics::Phase.
inline constexpr int kPhases = 5;
inline constexpr std::array<const char*, kPhases> kPhaseKeys = {"data", "forward", "backward", "comm_exposed",
                                                                "optimizer"};
inline constexpr std::array<const char*, kPhases> kPhaseLabels = {"data", "forward", "backward", "comm (exposed)",
                                                                  "optimizer"};

// Collectives as in the bytes_* step columns and /comm/op_names.
inline constexpr int kCollectives = 5;
inline constexpr std::array<const char*, kCollectives> kCollectiveNames = {"all_reduce", "reduce_scatter", "all_gather",
                                                                           "broadcast", "all_to_all"};
// nccl-tests' bus factor (the same as comm::bus_factor, which lives in the comm layer the report does
// not link): all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast 1.
double bus_factor(const std::string& op, int ranks);

// Thresholds of the bottleneck attribution (docs/report.md, "Bottleneck attribution").
struct AttributionRules {
  double data_share = 0.20;      // data-bound when data_s is at least this share of the step
  double transfer_share = 0.20;  // communication-bound when the blocked time after every rank arrived is
                                 // at least this share of the step
  // straggler-bound when the median step's slowest rank computes at least this much longer than the
  // median rank (the per-step straggler ratio of compute time)
  double straggler_ratio = metrics::kStragglerThreshold;
  // Reading of the achieved bus bandwidth against the collective benchmark (evidence only, not verdicts):
  double bandwidth_low = 0.25;   // below: the transfer time is latency or progress, not bandwidth
  double bandwidth_high = 0.75;  // at or above (up to bandwidth_above): the transfers run at the link's rate
  double bandwidth_above = 1.25;  // above: faster than the benchmark, so not comparable (overlap, other size)
};

// A ratio as a percentage for a sentence: "3.4%" below 10%, "98%" or "980%" above; never scientific notation.
std::string percent_text(double ratio);

struct Attribution {
  // "compute-bound", "memory-bound", "data-bound", "straggler-bound", "communication-bound", or "n/a"
  std::string verdict;
  std::vector<std::string> evidence;  // sentences with the numbers that decided it
};

// What the attribution rule reads (all shares are of the rank-median step time).
// One phase of a run against its roofline (/metrics/summary roofline_<phase>_*; metrics/roofline.hpp).
struct RooflineCell {
  double flops = NAN, bytes = NAN, bound_s = NAN, measured_s = NAN, fraction = NAN;
  std::string limit;  // "memory" or "compute"
};
inline constexpr int kRooflineCells = 4;  // forward, backward, optimizer, the step (their sum)
inline constexpr std::array<const char*, kRooflineCells> kRooflineCellNames = {"forward", "backward", "optimizer",
                                                                               "step"};

struct AttributionInput {
  std::array<double, kPhases> share{};  // data, forward, backward, comm (exposed), optimizer
  double wait_share = NAN;              // wait_peers_s_rank_median: blocked before the last rank arrived
  double transfer_share = NAN;          // transfer_s_rank_median: blocked after every rank arrived
  // Stragglers from compute time (metrics::summarize_stragglers over the measured steps), and each
  // rank's mean compute_s; absent (has_stragglers false) in a run without those columns.
  bool has_stragglers = false;
  metrics::StragglerSummary stragglers;
  std::vector<double> rank_compute_s;
  int measured_steps = 0;  // steps (all trials) behind the straggler summary
  double mfu = NAN;
  std::vector<std::string> comm_evidence;  // sentences about bandwidth (may be empty)
  // The compute phases on the roofline (absent in files written before it): which limit each is at and how
  // far from it; it names the verdict when no other cause holds (compute-bound or memory-bound).
  bool has_roofline = false;
  std::array<RooflineCell, kRooflineCells> roofline{};
  double ridge = NAN;  // FLOP per byte where the two limits meet
};

// Per rank of a run, over its measured steps (all trials).
struct RankStat {
  double compute_s = NAN, wait_s = NAN, transfer_s = NAN, data_s = NAN;  // means per step
  size_t slowest_steps = 0;  // steps in which it was the slowest by at least the straggler threshold
  double vs_others = NAN;    // compute_s / the other ranks' median compute_s (metrics::ratio_to_others): the
                             // slowest rank's is the straggler ratio the phase table and the verdict quote
};

// The collective benchmark row a training run's communication is compared with.
struct CommReference {
  const RunRecord* run = nullptr;
  size_t row = 0;
  double busbw_GBps = NAN;
  double bytes = NAN;
  std::string op, dtype;
};

// One training run with everything the tables need.
struct TrainRow {
  const RunRecord* run = nullptr;
  int config = -1;  // index into Analysis::configs (completed runs only)
  std::string strategy, dtype, model;
  double world = NAN, micro_batch = NAN, grad_accum = NAN, global_batch = NAN;
  double loss_first = NAN, loss_last = NAN;
  double resumed_at = NAN;  // the step a resumed run started at (its loss_first is that step's)
  double step_mean = NAN, step_std = NAN, tps_mean = NAN, tps_std = NAN;
  int trials = 0;
  bool std_over_steps = false;  // one trial: std over the measured steps (max-over-ranks step time)
  int std_samples = 0;          // trials, or measured steps
  double peak_per_rank = NAN;  // the FLOP/s per rank behind mfu
  std::string peak_source;     // calibrated | configured
  double mfu = NAN, mem_peak = NAN, rss_peak = NAN, mem_state = NAN;
  // The planner's prediction recorded at start (run.predict; absent in older files or with it off).
  double pred_mem_peak = NAN, pred_rss = NAN, pred_step = NAN;
  bool asked_prediction = false;  // run.predict = true in its config
  double reserved_peak = NAN, pred_reserved = NAN;  // GPU runs: the caching allocator's reserved bytes
  double trainable = NAN, trainable_ratio = NAN;
  std::vector<std::pair<double, double>> loss_curve;  // (step, loss), first trial

  // Phase shares of the rank-median step: <phase>_s_rank_median / step_time_rank_median_s.
  double step_rank_median = NAN;
  std::array<double, kPhases> phase_share{};
  double other_share = NAN;
  // The two parts of comm (exposed): wait_peers_s_rank_median and transfer_s_rank_median over the step.
  double wait_share = NAN, transfer_share = NAN;

  // Stragglers from compute time, recomputed from /metrics/steps over the measured steps of every trial
  // with the rules' threshold (absent without the compute_s column).
  bool has_stragglers = false;
  metrics::StragglerSummary stragglers;
  int straggler_steps_measured = 0;
  std::vector<RankStat> ranks;  // index = rank

  // Communication over the measured steps (all ranks).
  std::array<double, kCollectives> bytes_per_rank_step{};  // mean payload bytes per rank per step
  double comm_exposed_mean_s = NAN;                        // mean comm_exposed_s per rank per step
  double transfer_mean_s = NAN;                            // mean transfer_s per rank per step
  double achieved_busbw_GBps = NAN;  // sum(bytes x bus factor) / sum(transfer_s) / 1e9
  int dominant_op = -1;              // index into kCollectiveNames with the most bytes
  CommReference reference;

  // Scaling against the one-rank run of the same configuration.
  const TrainRow* baseline = nullptr;
  double speedup = NAN, efficiency = NAN;
  // Memory against DDP at the same world size and configuration.
  const TrainRow* ddp = nullptr;
  double saving_vs_ddp = NAN;  // 1 - mem_peak / ddp mem_peak

  // The roofline of the compute phases, per rank and step (absent in files written before it).
  bool has_roofline = false;
  std::array<RooflineCell, kRooflineCells> roofline{};
  double mem_bandwidth = NAN, ridge = NAN;  // bytes/s per rank; FLOP per byte
  std::string bandwidth_source;             // measured | configured

  Attribution attribution;
};

// The bandwidth sentence of a training run: the dominant collective's bytes and achieved bus bandwidth
// against the collective benchmark among `comm`, read by `rules` (docs/report.md, "Bottleneck attribution").
std::vector<std::string> comm_evidence(const TrainRow& t, const std::vector<const RunRecord*>& comm,
                                       const AttributionRules& rules);

// A "configuration": completed training runs whose workload keys are equal (docs/report.md).
struct Config {
  std::string label;                                     // "C1", "C2", ...
  std::vector<std::pair<std::string, std::string>> key;  // the workload keys and values
  std::vector<size_t> rows;                              // indices into Analysis::train
  const TrainRow* baseline = nullptr;                    // the one-rank run
  std::string baseline_note;                             // why this one, or why none
};

// Counters of one run per phase: median over ranks of each rank's mean over measured steps.
struct CounterSummary {
  std::vector<std::string> events;
  std::array<std::vector<double>, kPhases> values;  // [phase][event]
  std::array<bool, kPhases> present{};
};
CounterSummary summarize_counters(const RunRecord& r, int warmup_steps);

// One provenance / configuration difference between compared runs.
struct Difference {
  std::string what;                                         // "git commit", "config train.lr", ...
  std::vector<std::pair<std::string, std::string>> values;  // value -> runs (comma-separated names)
  std::string note;
};

struct Analysis {
  std::vector<TrainRow> train;  // every training run, in input order (incomplete ones too)
  std::vector<const RunRecord*> comm;  // every comm run, in input order
  std::vector<Config> configs;
  std::vector<Difference> differences;
  AttributionRules rules;
};

// Keys of /config that describe the workload (equal within a configuration): every key of the sections
// model, lora, data and train, plus parallel.threads_per_rank and parallel.backend.
bool is_workload_key(const std::string& key);
// Keys that never matter for a comparison (names, paths, logging): run.name, run.output_dir, run.quiet,
// run.log_every, run.overwrite, input_file, checkpoint.keep_last, checkpoint.save_adapter.
bool is_identity_key(const std::string& key);
// Keys that legitimately differ between compared runs because they are what is compared: the strategy
// and its tuning knobs (parallel.strategy, bucket_mb, grad_sync, reshard_after_forward, prefetch,
// emulate_nodes).
bool is_role_key(const std::string& key);

// The warm-up steps of a run: config run.warmup_steps, else steps per trial - measured_steps, else 0.
int warmup_steps(const RunRecord& r);

Analysis analyze(const std::vector<RunRecord>& runs, const AttributionRules& rules = {});

// The attribution rule alone (unit-tested; docs/report.md).
Attribution attribute(const AttributionInput& in, const AttributionRules& rules);

}  // namespace lorabench::report
