// lorabench-report, part 2: the numbers behind every table, computed from RunRecords. Every definition
// (and every threshold of the bottleneck rules) is documented in docs/report.md; a value that cannot be
// computed is NaN (printed "n/a").
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

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
  double data_share = 0.20;       // data-bound when data_s is at least this share of the step
  double comm_share = 0.20;       // synchronization-bound when exposed comm is at least this share
  double straggler_ratio = 1.10;  // ... or when the slowest rank is this much slower than the median rank
  // Reading of the achieved bus bandwidth against the collective benchmark (evidence only, not verdicts):
  double bandwidth_low = 0.25;    // below: the exposed time is waiting / latency, not bandwidth
  double bandwidth_high = 0.75;   // at or above: the link bandwidth is the limit
};

struct Attribution {
  std::string verdict;                 // "compute-bound", "data-bound", "synchronization-bound", or "n/a"
  std::vector<std::string> evidence;   // sentences with the numbers that decided it
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
  double step_mean = NAN, step_std = NAN, tps_mean = NAN, tps_std = NAN;
  int trials = 0;
  bool std_over_steps = false;  // one trial: std over the measured steps (max-over-ranks step time)
  int std_samples = 0;          // trials, or measured steps
  double mfu = NAN, mem_peak = NAN, rss_peak = NAN, mem_state = NAN;
  double trainable = NAN, trainable_ratio = NAN;
  std::vector<std::pair<double, double>> loss_curve;  // (step, loss), first trial

  // Phase shares of the rank-median step: <phase>_s_rank_median / step_time_rank_median_s.
  double step_rank_median = NAN;
  std::array<double, kPhases> phase_share{};
  double other_share = NAN;
  double straggler = NAN, slowest_rank = NAN;

  // Communication over the measured steps (all ranks).
  std::array<double, kCollectives> bytes_per_rank_step{};  // mean payload bytes per rank per step
  double comm_exposed_mean_s = NAN;                        // mean comm_exposed_s per rank per step
  double achieved_busbw_GBps = NAN;  // sum(bytes x bus factor) / sum(comm_exposed_s) / 1e9
  int dominant_op = -1;              // index into kCollectiveNames with the most bytes
  CommReference reference;

  // Scaling against the one-rank run of the same configuration.
  const TrainRow* baseline = nullptr;
  double speedup = NAN, efficiency = NAN;
  // Memory against DDP at the same world size and configuration.
  const TrainRow* ddp = nullptr;
  double saving_vs_ddp = NAN;  // 1 - mem_peak / ddp mem_peak

  Attribution attribution;
};

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

// The attribution rule alone (unit-tested): shares of the step, straggler ratio and the evidence
// sentences about communication bandwidth (may be empty).
Attribution attribute(const std::array<double, kPhases>& share, double straggler, double slowest_rank,
                      double mfu, const std::vector<std::string>& comm_evidence, const AttributionRules& rules);

}  // namespace lorabench::report
