// A training run's /metrics/summary attributes and its validation checks (docs/hdf5-schema.md), made from
// its step rows and what the training loop knew: a pure function, apart from the loop (private to src/train;
// tests/unit/test_run_summary.cpp drives it with hand-made rows).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "lorabench/data/batch.hpp"
#include "lorabench/io/run_file.hpp"
#include "lorabench/metrics/flops.hpp"
#include "lorabench/metrics/roofline.hpp"
#include "lorabench/metrics/stats.hpp"
#include "lorabench/strategy/strategy.hpp"

namespace lorabench::train {

// What the summary needs beyond the step rows.
struct RunFacts {
  std::string strategy, dtype, model;
  std::string model_family;  // ModelShape::family: qwen2, qwen3 or qwen3_5
  std::string model_layers;  // ModelShape::layer_mix: "24 layers", "18 linear-attention + 6 full-attention layers"
  int world = 1;
  int trials = 1;         // run.repeat
  int steps = 0;          // run.steps (a trial's, when not stopped early)
  int warmup_steps = 0;   // run.warmup_steps: not measured
  data::BatchGeometry geo;
  int64_t total_params = 0, trainable_params = 0;
  double flops_per_token = 0;
  metrics::PeakFlops peak;  // per rank
  metrics::MemoryBandwidth bandwidth;  // per rank (bytes_per_s 0: no roofline attributes)
  metrics::StepTraffic traffic;        // bytes per rank and step, by phase
  std::array<double, metrics::kRooflinePhases> phase_flops{};  // FLOPs per rank and step: forward, backward, optimizer
  int64_t clipped_steps = 0, skipped_steps = 0, skipped_records = 0;
  int64_t empty_steps = 0;  // steps with no token to train on (train.on_empty_step = skip)
  std::string data_source;
  strategy::MemoryPrediction prediction;  // the strategy's model state per rank
  int prefetched_layers = 0;
  std::string papi_status;
  std::string clock_sync;
  double clock_offset_error_s = 0;
  bool losses_finite = true;
  io::ValidationCheck state_check;  // replicas_identical or shards_consistent
};

struct RunSummary {
  std::vector<metrics::SummaryAttribute> attributes;  // in the order they are written
  std::vector<io::ValidationCheck> checks;
  double step_time_mean_s = 0, tokens_per_s_mean = 0;  // for the closing line of the log
  bool valid() const;                                  // every check passed
};

// `rows`: schema::kNumStepColumns doubles per row, every step's rows of all ranks in rank order, steps in
// order, trials one after the other (what StepLog wrote to /metrics/steps).
RunSummary summarize_run(const std::vector<double>& rows, const RunFacts& f);

// The attributes and the checks into the run file (not its status).
void write_run_summary(io::RunFileWriter& run, const RunSummary& s);

}  // namespace lorabench::train
