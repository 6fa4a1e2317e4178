#include "lorabench/train/step_runner.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "lorabench/core/strings.hpp"
#include "lorabench/core/hash.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/train/control.hpp"

namespace lorabench::train {

namespace {
enum { kData = 0, kForward, kBackward, kComm, kOptimizer };
}  // namespace

StepRunner::StepRunner(const model::ModelLayout& m, strategy::TrainingStrategy& s, data::BatchSource& source,
                       const StepConfig& c, MPI_Comm world)
    : m_(m), s_(s), source_(source), c_(c), world_(world) {
  MPI_Comm_rank(world, &rank_);
}

namespace {

void sleep_s(double s) {
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

// Attributes every second of a step to exactly one phase, so the phases add up to the step time by
// construction: the clock runs for one phase at a time, and time spent blocked on the communicator
// inside another phase (FSDP's gathers in forward, ZeRO's parameter gathers in the optimizer) is moved
// to comm.
class PhaseClock {
 public:
  PhaseClock(const comm::Communicator* comm, std::function<void(int, bool)> hook, double start, double slow_factor)
      : comm_(comm), hook_(std::move(hook)), slow_factor_(slow_factor), mark_(start), waits_(waits()),
        point_(start), point_waits_(waits_) {}

  // fault.slow_rank: sleeps (slow_factor - 1) x the compute (time minus blocked time) of the current
  // forward, backward or optimizer phase since the previous stretch point. Called at every phase change
  // and before every collective, so each collective sees the slowed arrival. The sleep is part of the
  // current phase.
  void stretch() {
    if (slow_factor_ <= 1) return;
    if (cur_ == kForward || cur_ == kBackward || cur_ == kOptimizer)
      sleep_s((slow_factor_ - 1) * ((sys::now_s() - point_) - (waits() - point_waits_)));
    point_ = sys::now_s();
    point_waits_ = waits();
  }

  void switch_to(int phase) {
    stretch();
    const double now = sys::now_s(), w = waits();
    const double elapsed = now - mark_, waited = w - waits_;
    if (cur_ == kComm) {
      acc_[kComm] += elapsed;
    } else if (cur_ >= 0) {
      acc_[cur_] += elapsed - waited;
      acc_[kComm] += waited;
    }
    if (hook_ && cur_ >= 0) hook_(cur_, false);
    if (hook_ && phase >= 0) hook_(phase, true);
    mark_ = now;
    waits_ = w;
    cur_ = phase;
    point_ = now;
    point_waits_ = w;
  }
  int current() const { return cur_; }
  double total(int phase) const { return acc_[phase]; }

 private:
  double waits() const { return comm_ ? comm_->stats().wait_s : 0.0; }
  const comm::Communicator* comm_;
  std::function<void(int, bool)> hook_;
  double slow_factor_;
  double mark_, waits_;
  double point_, point_waits_;  // the last stretch point
  int cur_ = -1;
  double acc_[5] = {0, 0, 0, 0, 0};
};

// Installs the communicator's before-issue hook for one step and removes it again.
class IssueHook {
 public:
  IssueHook(comm::Communicator* comm, std::function<void()> hook) : comm_(comm) {
    if (comm_) comm_->set_before_issue(std::move(hook));
  }
  ~IssueHook() {
    if (comm_) comm_->set_before_issue(nullptr);
  }
  IssueHook(const IssueHook&) = delete;
  IssueHook& operator=(const IssueHook&) = delete;

 private:
  comm::Communicator* comm_;
};

}  // namespace

EvalResult evaluate(const model::ModelLayout& m, strategy::TrainingStrategy& s, data::BatchSource& eval,
                    int64_t samples, int micro_batch, const model::StepOptions& opt, MPI_Comm world) {
  const double t0 = sys::now_s();
  int rank = 0, world_size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &world_size);
  const int64_t per_step = int64_t(micro_batch) * world_size;
  const int64_t steps = (samples + per_step - 1) / per_step;
  model::StepOptions o;
  o.head_chunk = opt.head_chunk;
  std::vector<double> sums = {0.0, 0.0};  // summed token loss, counted tokens
  for (int64_t e = 0; e < steps; ++e) {
    data::Batch b = eval.micro_batch(e, 0, rank);
    for (int row = 0; row < b.batch; ++row) {
      if (e * per_step + int64_t(rank) * micro_batch + row < samples) continue;
      std::fill(b.labels.begin() + int64_t(row) * b.seq, b.labels.begin() + int64_t(row + 1) * b.seq, data::kIgnoreIndex);
    }
    model::MicroBatch mb;
    mb.ids = at::from_blob(b.ids.data(), {b.batch, b.seq}, at::kLong).clone();
    mb.targets = model::shift_targets(at::from_blob(b.labels.data(), {b.batch, b.seq}, at::kLong));
    const model::MicroResult r = model::forward_loss(m, s, mb, o);
    sums[0] += r.loss_sum;
    sums[1] += double(r.counted);
  }
  allreduce_sum(world, sums);
  EvalResult res;
  res.tokens = int64_t(sums[1]);
  res.loss = res.tokens > 0 ? sums[0] / sums[1] : std::nan("");
  res.samples = samples;
  res.seconds = sys::now_s() - t0;
  return res;
}

StepResult StepRunner::run(int64_t step) {
  StepResult res;
  StepTimes& t = res.times;
  const double t0 = sys::now_s();
  comm::Communicator* comm = s_.communicator();
  PhaseClock clock(comm, on_phase, t0, c_.slow_factor);
  IssueHook hook(c_.slow_factor > 1 ? comm : nullptr, [&clock] { clock.stretch(); });
  // The control plane's host all-reduces, in the communicator's timeline like its own collectives.
  auto control = [comm](const std::function<void()>& call) {
    if (comm) comm->timed_external(call);
    else call();
  };

  // ---- data ----
  clock.switch_to(kData);
  std::vector<data::Batch> batches;
  for (int micro = 0; micro < c_.grad_accum; ++micro) {
    batches.push_back(source_.micro_batch(step, micro, rank_));
    res.tokens += batches.back().real_tokens;
    res.loss_tokens += batches.back().loss_tokens;
    sleep_s(c_.data_delay_s);
  }
  clock.switch_to(kComm);
  int64_t global_loss_tokens = 0;
  control([&] { global_loss_tokens = allreduce_sum(world_, res.loss_tokens); });
  // The loss is the mean over the global batch's counted tokens: every micro-step's gradient is scaled
  // by 1/(global count) and gradients are summed over micro-steps and ranks.
  const double grad_scale = global_loss_tokens > 0 ? 1.0 / double(global_loss_tokens) : 0.0;

  // ---- forward + backward ----
  model::StepOptions opt = c_.options;
  auto outer = opt.on_pass;
  opt.on_pass = [&](model::Pass pass, bool begin, double when) {
    if (begin) clock.switch_to(pass == model::Pass::kForward ? kForward : kBackward);
    if (outer) outer(pass, begin, when);
  };
  double loss_sum = 0;
  for (int micro = 0; micro < c_.grad_accum; ++micro) {
    clock.switch_to(kData);  // the micro-batch's tensors
    const data::Batch& b = batches[micro];
    model::MicroBatch mb;
    mb.ids = at::from_blob(const_cast<int64_t*>(b.ids.data()), {b.batch, b.seq}, at::kLong).clone();
    mb.targets = model::shift_targets(
        at::from_blob(const_cast<int64_t*>(b.labels.data()), {b.batch, b.seq}, at::kLong));
    mb.grad_scale = grad_scale;
    mb.dropout = c_.lora_dropout;
    const uint64_t first = b.sample_index.empty() ? 0 : uint64_t(b.sample_index[0]);
    mb.dropout_seed = splitmix64(c_.seed ^ splitmix64(uint64_t(step) * 1000003ull + uint64_t(micro) * 7919ull + first));
    s_.begin_micro(micro);
    model::MicroResult r = model::forward_backward(m_, s_, mb, opt);
    clock.switch_to(kComm);  // waiting for this micro-step's gradient reductions
    s_.end_micro();
    loss_sum += r.loss_sum;
  }
  if (c_.nan_at_step == step) loss_sum = std::nan("");

  // ---- one allreduce: the global loss and whether any rank saw a non-finite value ----
  std::vector<double> agg = {std::isfinite(loss_sum) ? loss_sum : 0.0, std::isfinite(loss_sum) ? 0.0 : 1.0};
  control([&] { allreduce_sum(world_, agg); });
  res.loss = agg[1] > 0 ? std::nan("") : agg[0] / double(std::max<int64_t>(1, global_loss_tokens));

  // ---- optimizer ----
  clock.switch_to(kOptimizer);
  res.lr = optim::lr_at(c_.schedule, step);
  if (agg[1] > 0) {
    res.nonfinite = true;
    res.why = strformat("non-finite loss on %d rank(s)", int(agg[1]));
    s_.discard_grads();
  } else {
    res.grad_norm = std::sqrt(s_.grad_sq_norm());
    if (!std::isfinite(res.grad_norm)) {
      res.nonfinite = true;
      res.why = "non-finite gradient norm";
      s_.discard_grads();
    } else {
      if (c_.max_grad_norm > 0) {
        // torch.nn.utils.clip_grad_norm_: coefficient max / (norm + 1e-6), applied when below 1.
        const double coef = c_.max_grad_norm / (res.grad_norm + 1e-6);
        if (coef < 1) {
          s_.scale_grads(coef);
          res.clipped = true;
        }
      }
      s_.optimizer_step(c_.adamw, res.lr);
    }
  }
  clock.switch_to(-1);
  t.data = clock.total(kData);
  t.forward = clock.total(kForward);
  t.backward = clock.total(kBackward);
  t.comm = clock.total(kComm);
  t.optimizer = clock.total(kOptimizer);
  t.step = sys::now_s() - t0;
  return res;
}

}  // namespace lorabench::train
