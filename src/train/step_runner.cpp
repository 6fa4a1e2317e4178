#include "lorabench/train/step_runner.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "lorabench/core/strings.hpp"
#include "lorabench/core/hash.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/device/torch_device.hpp"
#include "lorabench/comm/control.hpp"

namespace lorabench::train {

namespace {
enum { kData = 0, kForward, kBackward, kComm, kOptimizer };
}  // namespace

StepRunner::StepRunner(const model::ModelLayout& m, strategy::TrainingStrategy& s, data::BatchSource& source,
                       const StepConfig& c, MPI_Comm world)
    : m_(m), s_(s), source_(source), c_(c), world_(world), timer_(s.device().make_sync_timer()) {
  MPI_Comm_rank(world, &rank_);
}

StepRunner::~StepRunner() = default;

namespace {

// A (B, T) int64 host batch as a tensor on `dev` (a copy: the batch's vectors are reused), sent to a GPU
// without the host waiting for the previous micro-step (device::host_tensor).
at::Tensor to_device(const std::vector<int64_t>& v, int64_t B, int64_t T, device::Device& dev) {
  const c10::Device on = device::torch_device(dev);
  at::Tensor h = device::host_tensor({B, T}, at::kLong, on);
  h.copy_(at::from_blob(const_cast<int64_t*>(v.data()), {B, T}, at::kLong));
  return h.to(on, /*non_blocking=*/true);
}

void sleep_s(double s) {
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

// Attributes every second of a step to exactly one phase, so the phases add up to the step time by
// construction: the clock runs for one phase at a time, and time spent blocked on the communicator
// inside another phase (FSDP's gathers in forward, ZeRO's parameter gathers in the optimizer) is moved
// to comm. Phase changes and the edges of every blocked span are marks of the device's timer, resolved
// once at the end of the step: on a CPU the host clock, on a GPU events on the compute stream, so that a
// phase is the time the device spent on it (not the time the host took to queue it) and a blocked span
// is the time the compute stream stood still waiting for a collective.
class PhaseClock {
 public:
  PhaseClock(comm::Communicator* comm, comm::SyncTimer& timer, std::function<void(int, bool)> hook, double start,
             double slow_factor)
      : comm_(comm), timer_(timer), hook_(std::move(hook)), slow_factor_(slow_factor), point_(start),
        point_waits_(waits()) {
    if (comm_) comm_->set_wait_observer([this](bool begin) { edges_.push_back({begin ? kBlock : kUnblock, timer_.mark()}); });
  }
  ~PhaseClock() {
    if (comm_) comm_->set_wait_observer(nullptr);
  }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;

  // fault.slow_rank: sleeps (slow_factor - 1) x the compute (host time minus blocked time) of the current
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
    edges_.push_back({phase, timer_.mark()});
    if (hook_ && cur_ >= 0) hook_(cur_, false);
    if (hook_ && phase >= 0) hook_(phase, true);
    cur_ = phase;
    point_ = sys::now_s();
    point_waits_ = waits();
  }

  // After switch_to(-1): the seconds of each phase (on a GPU this waits for the step's marks).
  std::array<double, 5> totals() {
    const std::vector<double> t = timer_.resolve();
    std::array<double, 5> acc{};
    int phase = -1;
    double since = 0, blocked = 0, block_begin = 0;
    for (const Edge& e : edges_) {
      const double at = t[size_t(e.mark)];
      if (e.what == kBlock) {
        block_begin = at;
      } else if (e.what == kUnblock) {
        blocked += at - block_begin;
      } else {
        if (phase == kComm) {
          acc[kComm] += at - since;
        } else if (phase >= 0) {
          acc[size_t(phase)] += (at - since) - blocked;
          acc[kComm] += blocked;
        }
        phase = e.what;
        since = at;
        blocked = 0;
      }
    }
    edges_.clear();
    return acc;
  }

 private:
  static constexpr int kBlock = -2, kUnblock = -3;  // Edge::what besides a phase (or -1: the end)
  struct Edge {
    int what;      // the phase switched to, -1 at the end, kBlock / kUnblock around a blocked span
    int64_t mark;  // timer mark
  };
  double waits() const { return comm_ ? comm_->stats().wait_s : 0.0; }
  comm::Communicator* comm_;
  comm::SyncTimer& timer_;
  std::function<void(int, bool)> hook_;
  double slow_factor_;
  double point_, point_waits_;  // the last stretch point
  int cur_ = -1;
  std::vector<Edge> edges_;
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
    mb.ids = to_device(b.ids, b.batch, b.seq, s.device());
    mb.targets = model::shift_targets(to_device(b.labels, b.batch, b.seq, s.device()));
    const model::MicroResult r = model::forward_loss(m, s, mb, o);
    sums[0] += r.loss();
    sums[1] += double(r.tokens());
  }
  comm::allreduce_sum(world, sums);
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
  PhaseClock clock(comm, *timer_, on_phase, t0, c_.slow_factor);
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
  control([&] { global_loss_tokens = comm::allreduce_sum(world_, res.loss_tokens); });
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
  at::Tensor loss_acc;  // on the device: read once, after the last micro-step (the one host sync of the loop)
  for (int micro = 0; micro < c_.grad_accum; ++micro) {
    clock.switch_to(kData);  // the micro-batch's tensors
    const data::Batch& b = batches[micro];
    model::MicroBatch mb;
    mb.ids = to_device(b.ids, b.batch, b.seq, s_.device());
    mb.targets = model::shift_targets(to_device(b.labels, b.batch, b.seq, s_.device()));
    mb.grad_scale = grad_scale;
    mb.dropout = c_.lora_dropout;
    const uint64_t first = b.sample_index.empty() ? 0 : uint64_t(b.sample_index[0]);
    mb.dropout_seed = splitmix64(c_.seed ^ splitmix64(uint64_t(step) * 1000003ull + uint64_t(micro) * 7919ull + first));
    s_.begin_micro(micro);
    model::MicroResult r = model::forward_backward(m_, s_, mb, opt);
    clock.switch_to(kComm);  // waiting for this micro-step's gradient reductions
    s_.end_micro();
    loss_acc = micro == 0 ? r.loss_sum : loss_acc + r.loss_sum;
  }
  double loss_sum = loss_acc.item<double>();
  if (c_.nan_at_step == step) loss_sum = std::nan("");

  // ---- one allreduce: the global loss and whether any rank saw a non-finite value ----
  std::vector<double> agg = {std::isfinite(loss_sum) ? loss_sum : 0.0, std::isfinite(loss_sum) ? 0.0 : 1.0};
  control([&] { comm::allreduce_sum(world_, agg); });
  res.loss = agg[1] > 0 ? std::nan("") : agg[0] / double(std::max<int64_t>(1, global_loss_tokens));

  // ---- optimizer ----
  clock.switch_to(kOptimizer);
  res.lr = optim::lr_at(c_.schedule, step);
  if (global_loss_tokens == 0) {  // nothing to learn from: a zero gradient is no update (AdamW's decay aside)
    res.empty = true;
    res.loss = std::nan("");  // the mean over no token
    res.why = "no token to train on in the global batch";
    s_.discard_grads();
  } else if (agg[1] > 0) {
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
  const std::array<double, 5> phases = clock.totals();
  t.data = phases[kData];
  t.forward = phases[kForward];
  t.backward = phases[kBackward];
  t.comm = phases[kComm];
  t.optimizer = phases[kOptimizer];
  t.step = sys::now_s() - t0;
  return res;
}

}  // namespace lorabench::train
