// One optimizer step of training, strategy-agnostic: the part of the trainer that tests drive directly
// (equivalence of strategies, resume) without run files, timers or logs around it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lorabench/config/run_config.hpp"
#include "lorabench/data/batch.hpp"
#include "lorabench/metrics/flops.hpp"
#include "lorabench/model/step.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/optim/adamw.hpp"
#include "lorabench/optim/schedule.hpp"

namespace lorabench::train {

struct StepConfig {
  int grad_accum = 1;
  uint64_t seed = 0;            // dropout masks derive from (seed, step, micro, first sample)
  bool lora_dropout = false;    // LoRA dropout active (lora.dropout > 0)
  double max_grad_norm = 0;     // 0 = no clipping
  optim::AdamWConfig adamw;
  optim::ScheduleSpec schedule;
  model::StepOptions options;   // activation checkpointing, head chunk, hooks
  int nan_at_step = -1;         // fault injection: this rank reports a NaN loss at this step
  // Fault injection (docs/metrics.md, "Fault injection"): this rank's forward, backward and optimizer
  // compute take slow_factor times as long: up to each phase change and each collective it issues, it
  // sleeps (slow_factor - 1) x the compute since the previous such point. 1 = off.
  double slow_factor = 1;
  double data_delay_s = 0;      // sleep per micro-batch in the data phase
};

// Wall seconds of one step by phase. The phases partition the step: they add up to `step` (up to the few
// instructions between the last phase change and the end). comm is every second blocked on the
// communicator or in a control-plane collective, wherever it happened.
struct StepTimes {
  double data = 0, forward = 0, backward = 0, comm = 0, optimizer = 0, step = 0;
};

struct StepResult {
  double loss = 0;          // mean over the global batch's counted tokens (NaN when non-finite)
  double lr = 0;
  double grad_norm = 0;     // before clipping
  bool clipped = false;
  bool nonfinite = false;   // the update was not applied (seen by every rank in this step)
  bool empty = false;       // the global batch had no token to train on: no update (every rank)
  std::string why;          // what was non-finite, or empty
  int64_t tokens = 0;       // real tokens of this rank
  int64_t loss_tokens = 0;  // counted tokens of this rank
  StepTimes times;
};


class StepRunner {
 public:
  // world: the control-plane communicator (host MPI); the strategy carries the data-plane one.
  StepRunner(const model::ModelLayout& m, strategy::TrainingStrategy& s, data::BatchSource& source,
             const StepConfig& c, MPI_Comm world);
  ~StepRunner();

  // Collective. Runs step `step` (0-based): every micro-step's forward and backward, the global loss
  // and non-finite check, and (when finite) clipping and the optimizer update. The control-plane
  // all-reduces go through the strategy's communicator's timed_external(), so its timeline (when on)
  // holds every collective of the step.
  StepResult run(int64_t step);

  // Called at every phase change with a phase index 0..4 (data, forward, backward, comm, optimizer) and
  // begin/end (per-phase counters, traces). Phases do not nest: the step is a sequence of them.
  std::function<void(int phase, bool begin)> on_phase;

 private:
  const model::ModelLayout& m_;
  strategy::TrainingStrategy& s_;
  data::BatchSource& source_;
  StepConfig c_;
  MPI_Comm world_;
  int rank_ = 0;
  std::unique_ptr<comm::SyncTimer> timer_;  // the device's: phase changes and blocked spans
};

// The held-out loss (train.eval_every).
struct EvalResult {
  double loss = 0;      // mean token loss over the held-out samples' counted tokens (NaN when none)
  int64_t tokens = 0;   // counted tokens, all ranks
  int64_t samples = 0;
  double seconds = 0;
};

// Collective. The loss of held-out samples [0, samples) of `eval` (a source built with grad_accum 1):
// evaluation step e gives rank r the samples e*micro_batch*world + r*micro_batch + [0, micro_batch), the
// training partition, so the set is the same whatever the strategy and world size; rows past `samples`
// are computed but carry no loss. Forward only (model::forward_loss), no dropout; sums over ranks in fp64.
EvalResult evaluate(const model::ModelLayout& m, strategy::TrainingStrategy& s, data::BatchSource& eval,
                    int64_t samples, int micro_batch, const model::StepOptions& opt, MPI_Comm world);

}  // namespace lorabench::train
