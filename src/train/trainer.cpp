#include "lorabench/train/trainer.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <array>
#include <csignal>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <memory>

#include "lorabench/comm/clock_sync.hpp"
#include "lorabench/comm/timeline.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/hash.hpp"
#include "lorabench/core/log.hpp"
#include "lorabench/core/mpi_session.hpp"
#include "lorabench/core/stop_request.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/data/batch.hpp"
#include "lorabench/data/sft_source.hpp"
#include "lorabench/data/tokenizer.hpp"
#include "lorabench/io/h5.hpp"
#include "lorabench/io/schema.hpp"
#include "lorabench/lora/adapter.hpp"
#include "lorabench/metrics/flops.hpp"
#include "lorabench/metrics/papi.hpp"
#include "lorabench/metrics/stats.hpp"
#include "lorabench/metrics/trace.hpp"
#include "lorabench/model/bandwidth.hpp"
#include "lorabench/model/gemm.hpp"
#include "lorabench/model/layout.hpp"
#include "lorabench/model/tensor_parallel.hpp"
#include "lorabench/model/step.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/train/checkpoint.hpp"
#include "lorabench/train/run_specs.hpp"
#include "run_summary.hpp"
#include "lorabench/comm/control.hpp"
#include "lorabench/train/state_check.hpp"
#include "lorabench/optim/schedule.hpp"
#include "lorabench/train/step_runner.hpp"

namespace fs = std::filesystem;

namespace lorabench::train {

namespace {

using schema::StepColumn;

// Everything a run needs that does not change between trials.
struct Setup {
  model::ModelLayout layout;
  at::ScalarType dtype = at::kFloat;
  std::unique_ptr<model::Snapshot> snapshot;
  std::unique_ptr<data::BatchSource> source;
  // The held-out set (train.eval_every): one micro-batch per rank per evaluation step, in file order.
  std::unique_ptr<data::BatchSource> eval_source;
  int64_t eval_samples = 0;
  data::BatchGeometry geo;
  double flops_per_token = 0;
  metrics::PeakFlops peak;
  metrics::MemoryBandwidth bandwidth;                       // per rank, for the roofline
  metrics::StepTraffic traffic;                             // bytes per rank and step, by phase
  std::array<double, metrics::kRooflinePhases> phase_flops{};  // FLOPs per rank and step: forward, backward, optimizer
  strategy::StrategySpec spec;
  StepConfig step;
};

}  // namespace

namespace {

device::Device& device_of(const TrainEnv& env) { return env.device ? *env.device : device::cpu_device(); }

// The calibrated peak of the job (metrics::job_peak): every rank calibrates at the same time, after a barrier,
// so that the ranks of a node contend as they will in the steps, and all take the best rank's figure. A rank
// whose GEMMs a burst of host interference slowed would otherwise report MFU above 100% (2026-12-04, a
// 2-rank DDP run on a 2-vCPU VM: one rank calibrated 49 GFLOP/s where the VM's other runs calibrated 75-88,
// and the run reported MFU 117-140%).
metrics::PeakFlops calibrate_job_peak(const TrainEnv& env, at::ScalarType dtype) {
  int world = 1;
  if (env.world != MPI_COMM_NULL) MPI_Comm_size(env.world, &world);
  if (world > 1) MPI_Barrier(env.world);
  const metrics::PeakFlops own =
      model::calibrate_gemm_peak(dtype, env.cfg->parallel.threads_per_rank, device_of(env));
  std::vector<double> all(size_t(world), own.flops_per_s);
  if (world > 1) MPI_Allgather(&own.flops_per_s, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, env.world);
  return metrics::job_peak(own, all);
}

// The memory bandwidth of the job (metrics::job_bandwidth): every rank runs the triad at the same time, after
// a barrier, so that the ranks of a node share the memory system as they do in the steps.
metrics::MemoryBandwidth measure_job_bandwidth(const TrainEnv& env) {
  int world = 1;
  if (env.world != MPI_COMM_NULL) MPI_Comm_size(env.world, &world);
  if (world > 1) MPI_Barrier(env.world);
  const metrics::MemoryBandwidth own = model::measure_triad_bandwidth(env.cfg->parallel.threads_per_rank, device_of(env));
  std::vector<double> all(size_t(world), own.bytes_per_s);
  if (world > 1) MPI_Allgather(&own.bytes_per_s, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, env.world);
  return metrics::job_bandwidth(own, all);
}

// What a step must move and compute per rank, by phase (metrics/roofline.hpp; docs/metrics.md).
void count_step_work(Setup& s, const RunConfig& c, const model::ModelShape& shape, const metrics::LoraSpec& ml,
                     device::Device& dev, const comm::Mesh* mesh) {
  // With tensor parallelism a rank computes and moves its part of the model: its heads, MLP slice and vocabulary rows.
  const metrics::TransformerShape fs =
      flops_shape(c.parallel.tp > 1 ? model::tp_local_shape(shape, c.parallel.tp) : shape);
  const bool hsdp = c.parallel.strategy == "hsdp";
  // The ranks that share the optimizer state: hsdp's shard group.
  const int world = hsdp && mesh != nullptr ? mesh->dp_shard : s.geo.world_size;
  const bool sharded = c.parallel.strategy == "zero1" || c.parallel.strategy == "zero2" ||
                       c.parallel.strategy == "fsdp" || hsdp;
  metrics::TrafficSpec t;
  t.tokens = s.geo.micro_batch_tokens();
  t.grad_accum = s.geo.grad_accum;
  t.dtype_bytes = int64_t(at::elementSize(s.dtype));
  t.weight_copy_bytes = model::gemm_weight_copy_bytes(s.dtype, dev);
  t.activation_checkpointing = c.model.activation_checkpointing;
  t.optimizer_values = sharded ? (s.layout.trainable_params() + world - 1) / world : s.layout.trainable_params();
  t.master_is_compute = s.layout.full_finetune && s.dtype == at::kFloat;
  s.traffic = metrics::training_traffic(fs, ml, t);
  const metrics::PhaseFlops f =
      metrics::phase_flops_per_token(fs, ml, s.geo.seq_len, c.model.activation_checkpointing);
  const double tokens = double(s.geo.micro_batch_tokens()) * s.geo.grad_accum;
  s.phase_flops = {f.forward * tokens, f.backward * tokens, 0.0};
}

Setup make_setup(const TrainEnv& env) {
  const RunConfig& c = *env.cfg;
  const int world = env.topo->world_size;
  Setup s;
  model::ModelShape shape = model_shape_of(c);
  s.layout = layout_of(c, shape);
  s.dtype = dtype_of(c);
  if (!c.model.path.empty()) s.snapshot = std::make_unique<model::Snapshot>(c.model.path);
  if (s.snapshot) model::check_snapshot_complete(*s.snapshot, s.layout);

  s.geo = batch_geometry_of(c, world);
  if (c.data.format == "synthetic") {
    data::SyntheticSpec ss = synthetic_spec_of(c, static_cast<int>(shape.vocab_size), world);
    s.source = data::make_synthetic_source(ss);
    if (c.train.eval_every > 0) {
      ss.seed = splitmix64(c.run.seed ^ 0x65766131ull);  // a stream the training never draws from
      ss.geo.grad_accum = 1;
      s.eval_source = data::make_synthetic_source(ss);
      s.eval_samples = c.data.eval_samples;
    }
  } else {
    data::SftSpec spec = sft_spec_of(c, world);
    auto tok = std::make_shared<const data::Tokenizer>(data::Tokenizer::from_file(spec.tokenizer_path));
    if (tok->vocab_size() > shape.vocab_size)
      throw ConfigError("data.tokenizer: " + spec.tokenizer_path + " has " + std::to_string(tok->vocab_size()) +
                        " tokens but the model (" + shape.name + ") has a vocabulary of " +
                        std::to_string(shape.vocab_size));
    s.source = data::make_sft_source(spec, tok);
    if (c.train.eval_every > 0) {
      data::SftSpec es = spec;
      es.shuffle = false;
      es.geo.grad_accum = 1;
      if (c.data.eval_path.empty()) {
        es.held_out_part = true;
      } else {
        es.path = c.data.eval_path;
        es.holdout_fraction = 0;
      }
      s.eval_source = data::make_sft_source(es, tok);
      s.eval_samples = s.eval_source->epoch_size();
      if (c.data.eval_samples > 0) s.eval_samples = std::min<int64_t>(s.eval_samples, c.data.eval_samples);
      log::info("evaluation set: " + s.eval_source->describe() + strformat(", %lld samples per evaluation",
                                                                             (long long)s.eval_samples));
    }
  }

  metrics::LoraSpec ml = metrics::LoraSpec::from_names(c.lora.enabled, c.lora.r, c.lora.targets);
  s.flops_per_token = double(metrics::training_flops_per_token(flops_shape(shape), ml, s.geo.seq_len).total());
  if (c.profile.peak_gflops > 0) {
    s.peak.flops_per_s = c.profile.peak_gflops * 1e9;
    s.peak.source = "configured";
    s.peak.detail = "profile.peak_gflops";
  } else {
    s.peak = calibrate_job_peak(env, s.dtype);
  }
  if (c.profile.mem_bandwidth_gbs > 0) {
    s.bandwidth.bytes_per_s = c.profile.mem_bandwidth_gbs * 1e9;
    s.bandwidth.source = "configured";
    s.bandwidth.detail = "profile.mem_bandwidth_gbs";
  } else {
    s.bandwidth = measure_job_bandwidth(env);
  }
  count_step_work(s, c, shape, ml, device_of(env), env.mesh ? &env.mesh->mesh : nullptr);

  s.spec = strategy_spec_of(c);
  s.step = step_config_of(c);
  return s;
}

// Timelines of several steps as doubles, to gather them: per step the number of collectives n, then
// (ready_s, block_begin_s, blocked_s) of each: what the split needs.
void append_timeline(std::vector<double>& out, const std::vector<comm::CollectiveTiming>& t) {
  out.push_back(double(t.size()));
  for (const auto& c : t) out.insert(out.end(), {c.ready_s, c.block_begin_s, c.blocked_s});
}
std::vector<std::vector<comm::CollectiveTiming>> parse_timelines(const std::vector<double>& v) {
  std::vector<std::vector<comm::CollectiveTiming>> out;
  for (size_t i = 0; i < v.size();) {
    const size_t n = size_t(v[i++]);
    LB_CHECK(i + 3 * n <= v.size(), "truncated timeline");
    std::vector<comm::CollectiveTiming> t(n);
    for (size_t k = 0; k < n; ++k, i += 3) {
      t[k].ready_s = v[i];
      t[k].block_begin_s = v[i + 1];
      t[k].blocked_s = v[i + 2];
    }
    out.push_back(std::move(t));
  }
  return out;
}

// Rank 0, at a flush: the columns that need every rank's view of a step. `rows` holds whole steps
// (world rows each, in rank order); timelines[r][s] is rank r's timeline of the s-th of those steps.
// wait_peers_s is the timeline's wait-for-peers time (comm/timeline.hpp), at most comm_exposed_s;
// transfer_s the rest of comm_exposed_s; straggler_ratio and slowest_rank compare the ranks' compute_s.
void fill_cross_rank_columns(std::vector<double>& rows, int world,
                             const std::vector<std::vector<std::vector<comm::CollectiveTiming>>>& timelines,
                             const std::vector<double>& offsets) {
  const size_t ncol = schema::kNumStepColumns, W = size_t(world);
  const size_t steps = rows.size() / ncol / W;
  for (const auto& t : timelines) LB_CHECK(t.size() == steps, "one timeline per step and rank");
  for (size_t s = 0; s < steps; ++s) {
    double* step_rows = rows.data() + s * W * ncol;
    auto at = [&](size_t r, int col) -> double& { return step_rows[r * ncol + size_t(col)]; };
    std::vector<std::vector<comm::CollectiveTiming>> per_rank;
    for (size_t r = 0; r < W; ++r) per_rank.push_back(timelines[r][s]);
    // Empty when the ranks recorded different collectives: the split is unknown (NaN).
    const std::vector<double> wait = comm::wait_for_peers(per_rank, offsets);
    std::vector<double> compute;
    for (size_t r = 0; r < W; ++r) {
      const double exposed = at(r, schema::kCommExposedS);
      const double w = wait.empty() ? NAN : std::min(wait[r], exposed);
      at(r, schema::kWaitPeersS) = w;
      at(r, schema::kTransferS) = exposed - w;
      compute.push_back(at(r, schema::kComputeS));
    }
    const metrics::RankSummary rs = metrics::summarize_ranks(compute);
    for (size_t r = 0; r < W; ++r) {
      at(r, schema::kStepStragglerRatio) = rs.straggler_ratio;
      at(r, schema::kStepSlowestRank) = double(rs.slowest_rank);
    }
  }
}

// Where rows accumulate until the next flush; rank 0 writes them.
class StepLog {
 public:
  explicit StepLog(const TrainEnv& env) : env_(env) {}
  void add(const std::vector<double>& row) { pending_.insert(pending_.end(), row.begin(), row.end()); }
  // The collective timeline of a step, added in the same order as the steps' rows.
  void add_timeline(const std::vector<comm::CollectiveTiming>& t) { append_timeline(pending_timelines_, t); }
  // Clock offsets of the ranks (comm/clock_sync.hpp), for comparing their timelines.
  void set_clock_offsets(std::vector<double> offsets) { offsets_ = std::move(offsets); }
  // Counter rows (trial, step, rank, phase, intervals, events...), when counters are recorded.
  void add_counters(const std::vector<double>& rows) {
    pending_counters_.insert(pending_counters_.end(), rows.begin(), rows.end());
  }
  void enable_counters(size_t width) { counter_width_ = width; }
  // Collective: gathers the pending rows of every rank to rank 0, which appends them in (step, rank)
  // order and flushes the file.
  // Collective. Rank 0 appends the rows to run.h5; a failed write stops every rank together
  // (AgreedIoError, after the other ranks' gathers are done).
  void flush() {
    std::string error;
    auto write = [&](const std::function<void()>& f) {
      if (!error.empty()) return;
      try {
        f();
      } catch (const std::exception& e) {
        error = e.what();
      }
    };
    std::vector<double> all = comm::gather_to_root(env_.world, pending_);
    const std::vector<std::vector<double>> timelines = comm::gatherv_to_root(env_.world, pending_timelines_);
    pending_timelines_.clear();
    if (env_.run) {
      const size_t per_rank = pending_.size();
      const size_t W = static_cast<size_t>(env_.topo->world_size);
      const size_t rows = per_rank / schema::kNumStepColumns;
      std::vector<double> ordered;
      ordered.reserve(all.size());
      for (size_t r = 0; r < rows; ++r)
        for (size_t w = 0; w < W; ++w) {
          const double* src = all.data() + w * per_rank + r * schema::kNumStepColumns;
          ordered.insert(ordered.end(), src, src + schema::kNumStepColumns);
        }
      std::vector<std::vector<std::vector<comm::CollectiveTiming>>> parsed;
      for (const auto& t : timelines) parsed.push_back(parse_timelines(t));
      fill_cross_rank_columns(ordered, int(W), parsed, offsets_);
      write([&] { env_.run->append_steps(ordered); });
    }
    if (counter_width_ > 0) {
      // Every rank holds the same number of counter rows (kPhaseCount per step); rank order within a step.
      std::vector<double> c = comm::gather_to_root(env_.world, pending_counters_);
      if (env_.run) {
        const size_t per_rank = pending_counters_.size();
        const size_t W = static_cast<size_t>(env_.topo->world_size);
        const size_t block = counter_width_ * metrics::kPhaseCount;  // one step of one rank
        const size_t steps = block ? per_rank / block : 0;
        std::vector<double> ordered;
        for (size_t st = 0; st < steps; ++st)
          for (size_t w = 0; w < W; ++w) {
            const double* src = c.data() + w * per_rank + st * block;
            ordered.insert(ordered.end(), src, src + block);
          }
        write([&] { env_.run->append_counters(ordered); });
      }
      pending_counters_.clear();
    }
    if (env_.run) write([&] { env_.run->flush(); });
    comm::agree_io(env_.world, error);
    pending_.clear();
  }
  // Every row written so far (rank 0 only), read back from run.h5: the rows are not kept in memory, so a
  // long run's resident memory stays flat (bench/soak.py). Doubles and int64 columns: read back exactly.
  std::vector<double> rows() const {
    std::vector<double> out;
    if (!env_.run) return out;
    const auto table = h5::read_table(env_.run->file(), schema::kSteps);
    const auto& cols = schema::step_columns();
    const size_t n = table.empty() ? 0 : table.begin()->second.size();
    out.reserve(n * cols.size());
    for (size_t r = 0; r < n; ++r)
      for (const auto& c : cols) out.push_back(table.at(c.name)[r]);
    return out;
  }

 private:
  const TrainEnv& env_;
  std::vector<double> pending_, pending_counters_, pending_timelines_;
  std::vector<double> offsets_;
  size_t counter_width_ = 0;
};

std::string progress_line(int trial, int trials, int64_t step, int64_t steps, double loss, double tok_s,
                          double step_s, double mfu, int64_t mem, double eta_s) {
  std::string t = trials > 1 ? strformat("trial %d/%d ", trial + 1, trials) : "";
  return t + strformat("step %lld/%lld  loss %.4f  %.1f tok/s  %.3f s/step  MFU %.1f%%  mem %s  ETA %.0f s",
                       (long long)step + 1, (long long)steps, loss, tok_s, step_s, 100 * mfu,
                       format_bytes(double(mem)).c_str(), eta_s);
}

class Trainer {
 public:
  Trainer(const TrainEnv& env, Setup& s) : env_(env), c_(*env.cfg), s_(s), dev_(device_of(env)), log_(env) {
    rank_ = env.topo->rank;
    world_ = env.topo->world_size;
    // The ranks that read different data: every rank, or with tensor parallelism one per group (the ranks of
    // this rank's tp index), which the data, the loss's token count and the state check run over.
    data_world_ = env.world;
    if (env.mesh && env.mesh->tp) {
      LB_MPI_CHECK(MPI_Comm_split(env.world, env.mesh->me.tp, env.mesh->me.replica, &data_world_));
      tp_ = env.mesh->mesh.tp;
    }
  }
  ~Trainer() {
    if (data_world_ != env_.world && data_world_ != MPI_COMM_NULL) MPI_Comm_free(&data_world_);
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Returns 0, 3 after a non-finite stop, stop::kExitPreempted after a stop signal.
  int run() {
    counters_ = std::make_unique<metrics::PhaseCounters>(
        metrics::PhaseCounters::create(c_.profile.papi_events, c_.profile.papi_fallback));
    // Counters go to the run file when every rank counts the same events (same configuration, same
    // kind of machine); the summary's papi_status says what was counted either way.
    const std::string names = join(counters_->counted_events(), ",");
    const double n = double(counters_->counted_events().size());
    const double h = double(std::hash<std::string>{}(names) % 1000003);
    const bool uniform = comm::allreduce_min(env_.world, n) == comm::allreduce_max(env_.world, n) &&
                         comm::allreduce_min(env_.world, h) == comm::allreduce_max(env_.world, h);
    if (uniform && n > 0) {
      log_.enable_counters(5 + counters_->counted_events().size());
      if (env_.run) {
        std::vector<std::string> phases;
        for (auto p : metrics::kAllPhases) phases.push_back(metrics::phase_name(p));
        env_.run->create_counters(counters_->counted_events(), counters_->counted_via(), phases);
      }
    } else if (n > 0) {
      log::warn("ranks count different PAPI events: /metrics/counters is not written");
    }
    // The collective timeline (wait for peers vs transfer) on the data-plane communicator, and the
    // clock offsets that make the ranks' timestamps comparable.
    std::vector<std::string> hosts;
    for (const auto& r : env_.topo->ranks) hosts.push_back(r.host);
    clocks_ = comm::estimate_clock_offsets(env_.world, hosts);
    log_.set_clock_offsets(clocks_.offset_s);
    env_.comm->enable_timeline(true);
    // On a GPU the timeline's marks are events on the compute stream (device/device.hpp), and the compute
    // stream, not the host, waits for NCCL's collectives (docs/gpu.md, "Streams").
    if (dev_.is_cuda()) {
      env_.comm->set_sync_timer(dev_.make_sync_timer());
      env_.comm->set_device_waits(true);
    }
    log::info("clocks: " + clocks_.describe());
    if (c_.profile.trace) {
      LB_MPI_CHECK(MPI_Barrier(env_.world));
      trace_ = metrics::TraceRecorder::enabled_for_rank(rank_);
      trace_.set_metadata("run", fs::path(env_.run_dir).filename().string());
    }
    for (int trial = 0; trial < c_.run.repeat && stopped_signal_ == 0; ++trial) {
      int rc = run_trial(trial);
      if (rc != 0) return rc;
    }
    finish();
    return stopped_signal_ != 0 ? stop::kExitPreempted : 0;
  }

 private:
  int run_trial(int trial) {
    auto strat = make_strategy(trial);
    StepRunner runner(strat->compute_layout(), *strat, *s_.source, trial_step_config(), data_world_);
    runner.on_phase = [this](int p, bool begin) { on_phase(p, begin); };
    // Checkpoints (checkpoint.every) and resume (checkpoint.resume): see train/checkpoint.hpp.
    Checkpointer ckpt(c_, s_.layout, *s_.source, env_.world, env_.run_dir, env_.run);
    const int64_t first_step = ckpt.resume(*strat, env_.resume_from);
    if (first_step == 0 && env_.resume_from.empty() && !c_.lora.init_from.empty()) start_from_adapter(*strat);
    arm_signal_during_checkpoint(ckpt);
    const int64_t steps = c_.run.steps;
    const double trial_t0 = sys::now_s();
    for (int64_t step = first_step; step < steps; ++step) {
      inject_faults_before(step);
      const StepResult r = run_step(runner, trial, step);
      report_progress(trial, step, r, trial_t0);
      evaluate_after(*strat, trial, step);
      ckpt.after_step(*strat, step + 1, r.tokens);
      if (step + 1 < steps && stop_requested()) {
        stop_after(*strat, ckpt, step + 1);
        break;
      }
    }
    end_trial(*strat, trial);
    return 0;
  }

  // The trial's strategy, with the weights loaded or initialised on every rank.
  std::unique_ptr<strategy::TrainingStrategy> make_strategy(int trial) {
    strategy::MeshGroups groups;
    comm::Communicator* data_plane = env_.comm;
    if (env_.mesh) groups = {env_.mesh->shard.get(), env_.mesh->replicate.get(), env_.mesh->tp.get(),
                             env_.mesh->tp_kv.get()};
    if (groups.tp) data_plane = env_.mesh->replicate.get();  // the data-parallel ranks: one per tensor-parallel group
    auto strat = strategy::TrainingStrategy::create(s_.spec, s_.layout, s_.dtype, data_plane, &dev_, groups);
    strategy::InitSource src;
    src.seed = c_.run.seed;
    src.snapshot = s_.snapshot.get();
    const double ti = sys::now_s();
    strat->initialize(src);
    log::info(strformat("%s: %s weights on every rank in %.1f s", strat->name(),
                        src.snapshot ? "loaded" : "initialised", sys::now_s() - ti));
    if (trial == 0) prediction_ = strat->predict_memory();
    return strat;
  }

  // The step settings of this rank: the run's, with the trace hook and this rank's faults.
  StepConfig trial_step_config() {
    StepConfig sc = s_.step;
    if (trace_.enabled()) {
      sc.options.on_unit = [this](const std::string& unit, model::Pass pass, double t0, double t1) {
        trace_.record((unit + (pass == model::Pass::kForward ? " fwd" : " bwd")).c_str(), "layer",
                      trace_.to_us(to_tp(t0)), (t1 - t0) * 1e6, 1);
      };
    }
    if (c_.fault.nan_rank != rank_) sc.nan_at_step = -1;
    sc.slow_factor = c_.fault.slow_rank == rank_ ? c_.fault.slow_factor : 1.0;
    if (sc.slow_factor > 1)
      log::any(strformat("fault injection: rank %d computes %.3gx slower (fault.slow_factor)", rank_, sc.slow_factor));
    return sc;
  }

  // A phase of the step begins or ends: the counters, and the trace's span of it.
  void on_phase(int p, bool begin) {
    const auto phase = static_cast<metrics::Phase>(p);
    if (trace_.enabled()) {
      // Each phase as a span; "comm" is the wait for the gradient reductions after backward.
      if (begin) {
        phase_t0_[p] = sys::now_s();
      } else {
        trace_span(phase == metrics::Phase::kComm ? "gradient sync" : metrics::phase_name(phase), phase_t0_[p],
                   sys::now_s());
      }
    }
    if (begin) {
      counters_->begin(phase);
    } else {
      counters_->end(phase);
    }
  }

  int fault_signal() const { return c_.fault.signal == "term" ? SIGTERM : SIGUSR1; }

  // fault.signal_again: the rank signals itself again while the stop checkpoint is being written.
  void arm_signal_during_checkpoint(Checkpointer& ckpt) {
    if (c_.fault.signal_rank != rank_ || !c_.fault.signal_again) return;
    ckpt.before_commit = [this] {
      if (stop::requested() == 0) return;  // only the stop checkpoint
      log::warn(strformat("fault injection: rank %d sends itself %s again during the checkpoint write", rank_,
                          stop::signal_name(fault_signal())));
      std::raise(fault_signal());
    };
  }

  // fault.kill_* and fault.signal_*: this rank kills itself or signals itself before `step`.
  void inject_faults_before(int64_t step) {
    if (c_.fault.kill_rank == rank_ && c_.fault.kill_at_step == step) {
      log::warn(strformat("fault injection: rank %d kills itself at step %lld", rank_, (long long)step));
      std::raise(SIGKILL);
    }
    if (c_.fault.signal_rank == rank_ && c_.fault.signal_at_step == step) {
      log::warn(strformat("fault injection: rank %d sends itself %s at step %lld", rank_,
                          stop::signal_name(fault_signal()), (long long)step));
      std::raise(fault_signal());
    }
  }

  // One optimizer step and its row of the run file; a non-finite step stops or is skipped (train.on_nonfinite).
  StepResult run_step(StepRunner& runner, int trial, int64_t step) {
    std::vector<double> row(schema::kNumStepColumns, 0.0);
    dev_.reset_peak();
    sys::reset_peak_rss();
    const comm::CommStats c0 = env_.comm->stats();
    const comm::CommStats shard0 = env_.mesh ? env_.mesh->shard->stats() : comm::CommStats{};
    const comm::CommStats rep0 = env_.mesh ? env_.mesh->replicate->stats() : comm::CommStats{};
    const comm::CommStats tp0 = env_.mesh && env_.mesh->tp ? env_.mesh->tp->stats() : comm::CommStats{};
    env_.comm->take_timeline();  // drops collectives between steps (checkpoints): not part of a step
    StepResult r = runner.run(step);
    if (env_.mesh) {  // bytes per mesh dimension and collective (the step row has them summed)
      for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
        mesh_bytes_[0][size_t(k)] += double(env_.mesh->shard->stats().bytes[size_t(k)] - shard0.bytes[size_t(k)]);
        mesh_bytes_[1][size_t(k)] += double(env_.mesh->replicate->stats().bytes[size_t(k)] - rep0.bytes[size_t(k)]);
        if (env_.mesh->tp)
          mesh_bytes_[2][size_t(k)] += double(env_.mesh->tp->stats().bytes[size_t(k)] - tp0.bytes[size_t(k)]);
      }
      ++mesh_steps_;
    }
    const std::vector<comm::CollectiveTiming> timeline = env_.comm->take_timeline();
    fill_row(row, trial, step, r, c0, env_.comm->stats());
    row[schema::kCollectives] = double(timeline.size());
    log_.add_timeline(timeline);
    add_counter_rows(trial, step, counters_->take_step());
    trace_span("step", sys::now_s() - r.times.step, sys::now_s(), 0);
    log_.add(row);
    last_row_ = row;
    if (r.clipped) ++clipped_steps_;
    if (r.empty) {
      // Every rank sees the same global count, so every rank stops (or skips) in this step.
      const std::string what = r.why + strformat(" at step %lld (data.seq_len = %d: every sequence's trained tokens, "
                                                 "the assistant's answers, were truncated away or there were none)",
                                                 (long long)step, s_.geo.seq_len);
      if (c_.train.on_empty_step == "stop") {
        log_.flush();
        throw ConfigError(what + "; raise data.seq_len, shorten the prompts, or set train.on_empty_step = skip "
                                 "to skip such steps (the run is then INVALID)");
      }
      ++empty_steps_;
      log::warn(what + ": update skipped on every rank (train.on_empty_step = skip)");
    }
    if (r.nonfinite) {
      if (c_.train.on_nonfinite == "stop") {
        log_.flush();
        throw NumericsError(r.why + " at step " + std::to_string(step) +
                            " (train.on_nonfinite = stop; no optimizer update was applied)");
      }
      ++skipped_steps_;
      log::warn(r.why + strformat(" at step %lld: update skipped on every rank", (long long)step));
    }
    losses_finite_ = losses_finite_ && (std::isfinite(r.loss) || r.nonfinite || r.empty);
    return r;
  }

  // Every run.log_every steps: the rows to the run file and one progress line.
  void report_progress(int trial, int64_t step, const StepResult& r, double trial_t0) {
    const int64_t steps = c_.run.steps;
    if ((step + 1) % c_.run.log_every != 0 && step + 1 != steps) return;
    log_.flush();
    const double elapsed = sys::now_s() - trial_t0;
    const double eta = elapsed / double(step + 1) * double(steps - step - 1) +
                       elapsed / double(step + 1) * double(steps) * double(c_.run.repeat - trial - 1);
    const std::vector<double>& row = last_row_;
    log::info(progress_line(trial, c_.run.repeat, step, steps, r.loss, row[schema::kTokensPerS] * world_,
                            row[schema::kStepS], row[schema::kMfu], int64_t(row[schema::kMemPeak]), eta));
  }

  // Every train.eval_every steps and after the last: the held-out loss, logged and in the run file.
  void evaluate_after(strategy::TrainingStrategy& strat, int trial, int64_t step) {
    if (!s_.eval_source || ((step + 1) % c_.train.eval_every != 0 && step + 1 != c_.run.steps)) return;
    const EvalResult e = evaluate(strat.compute_layout(), strat, *s_.eval_source, s_.eval_samples,
                                  s_.geo.micro_batch, s_.step.options, data_world_);
    log::info(strformat("eval  after step %lld: loss %.4f  perplexity %.3f  (%lld samples, %lld tokens, %.2f s)",
                        (long long)(step + 1), e.loss, std::exp(e.loss), (long long)e.samples, (long long)e.tokens,
                        e.seconds));
    comm::agreed_writes(env_.world, [&] {
      if (!env_.run) return;
      env_.run->append_eval(trial, step + 1, e.loss, e.tokens, e.samples, e.seconds);
      env_.run->write_summary("eval_loss_last", e.loss);
      env_.run->write_summary("eval_perplexity_last", std::exp(e.loss));
    });
  }

  // The trial's end: the gathered state checked against what each rank holds; the last trial's outputs.
  void end_trial(strategy::TrainingStrategy& strat, int trial) {
    strategy::FullState st = strat.gather_state();
    for (auto* v : {&st.params, &st.exp_avg, &st.exp_avg_sq})  // host copies for the check and the outputs
      for (auto& t : *v)
        if (t.defined()) t = t.to(at::kCPU);
    if (c_.fault.drift_rank == rank_) {
      const std::string where = drift_own_shard(strat);
      log::any(strformat("fault injection: rank %d moved its own trainable state by one ulp after the final gather "
                         "(%s)", rank_, where.empty() ? "it owns nothing" : where.c_str()));
    }
    // What each rank holds itself, against the other ranks and the gathered state (train/state_check.hpp).
    StateCheck sc_end = check_trainable_state(strat, st, data_world_, env_.world);
    if (!sc_end.passed && c_.run.repeat > 1) sc_end.detail = strformat("trial %d: ", trial) + sc_end.detail;
    if (trial == 0 || (state_check_.passed && !sc_end.passed)) state_check_ = sc_end;
    if (trial == c_.run.repeat - 1 && stopped_signal_ == 0) save_outputs(strat, st);
    prefetched_layers_ = strat.prefetched_layers();
  }

  // Collective, once per step: did a stop signal (SIGTERM, SIGUSR1, SIGINT) reach any rank? Every rank then stops
  // after the same step, whichever rank the signal reached and when.
  bool stop_requested() {
    const double sig = comm::allreduce_max(env_.world, double(stop::requested()));
    if (sig == 0) return false;
    stopped_signal_ = int(sig);
    return true;
  }

  // After a stop signal: the checkpoint of `steps_done` (unless checkpoint.every just wrote it), so that a
  // requeued job resumes here (checkpoint.resume = auto | latest). A second signal during the write is
  // only counted (core/stop_request.hpp).
  void stop_after(strategy::TrainingStrategy& strat, Checkpointer& ckpt, int64_t steps_done) {
    const char* sig = stop::signal_name(stopped_signal_);
    log_.flush();
    std::string what;
    if (c_.run.repeat > 1) {
      what = "no checkpoint: run.repeat > 1 restarts every trial from step 0";
    } else {
      if (ckpt.last_saved_step() != steps_done) ckpt.save(strat, steps_done);
      what = "checkpoint " + ckpt.last_saved_path();
    }
    stop_message_ = strformat("stopped by %s after %lld of %d steps; %s", sig, (long long)steps_done,
                              c_.run.steps, what.c_str());
    log::info(stop_message_ + strformat(" (exit code %d)", stop::kExitPreempted));
    comm::agreed_writes(env_.world, [&] {
      if (!env_.run) return;
      env_.run->write_summary("stop_signal", std::string(sig));
      env_.run->write_summary("stopped_after_steps", double(steps_done));
    });
  }

  // Fills the run-file row of one step from the runner's result.
  void fill_row(std::vector<double>& row, int trial, int64_t step, const StepResult& r, const comm::CommStats& c0,
                const comm::CommStats& c1) {
    const StepTimes& t = r.times;
    // A tensor-parallel rank's share of its group's tokens (and so of their FLOPs): the ranks' rows add up to the
    // tokens the job trained on.
    const double tokens = double(r.tokens) / tp_;
    const double flops = tokens * s_.flops_per_token;
    row[schema::kTrial] = trial;
    row[schema::kStep] = double(step);
    row[schema::kRank] = rank_;
    row[schema::kLoss] = r.loss;
    row[schema::kLr] = r.lr;
    row[schema::kGradNorm] = r.grad_norm;
    row[schema::kClipped] = r.clipped ? 1 : 0;
    row[schema::kTokens] = tokens;
    row[schema::kLossTokens] = double(r.loss_tokens) / tp_;
    row[schema::kStepS] = t.step;
    row[schema::kDataS] = t.data;
    row[schema::kForwardS] = t.forward;
    row[schema::kBackwardS] = t.backward;
    row[schema::kCommExposedS] = t.comm;
    row[schema::kOptimizerS] = t.optimizer;
    row[schema::kComputeS] = t.step - t.comm;
    // Filled by rank 0 at the flush, from every rank's timeline (fill_cross_rank_columns).
    row[schema::kWaitPeersS] = row[schema::kTransferS] = NAN;
    row[schema::kStepStragglerRatio] = row[schema::kStepSlowestRank] = NAN;
    row[schema::kTokensPerS] = tokens / t.step;
    row[schema::kFlops] = flops;
    row[schema::kMfu] = flops / t.step / s_.peak.flops_per_s;
    const device::MemoryStats mem = dev_.memory();
    row[schema::kMemCurrent] = double(mem.current);
    row[schema::kMemPeak] = double(mem.peak);
    row[schema::kMemReservedPeak] = double(mem.reserved_peak);
    row[schema::kRssPeak] = double(sys::peak_rss());
    using K = comm::CollectiveKind;
    auto bytes = [&](K k) { return double(c1.bytes[int(k)] - c0.bytes[int(k)]); };
    row[schema::kBytesAllReduce] = bytes(K::kAllReduce);
    row[schema::kBytesReduceScatter] = bytes(K::kReduceScatter);
    row[schema::kBytesAllGather] = bytes(K::kAllGather);
    row[schema::kBytesBroadcast] = bytes(K::kBroadcast);
    row[schema::kBytesAllToAll] = bytes(K::kAllToAll);
  }

  static metrics::TraceRecorder::Clock::time_point to_tp(double s) {
    // sys::now_s() is steady_clock seconds since its epoch.
    return metrics::TraceRecorder::Clock::time_point(
        std::chrono::duration_cast<metrics::TraceRecorder::Clock::duration>(std::chrono::duration<double>(s)));
  }

  void trace_span(const char* name, double t0, double t1, int tid = 0) {
    if (!trace_.enabled()) return;
    trace_.record(name, "phase", trace_.to_us(to_tp(t0)), (t1 - t0) * 1e6, tid);
  }

  void add_counter_rows(int trial, int64_t step, const metrics::PhaseCounts& pc) {
    if (pc.events.empty()) return;
    std::vector<double> rows;
    for (auto p : metrics::kAllPhases) {
      const int i = metrics::phase_index(p);
      rows.insert(rows.end(), {double(trial), double(step), double(rank_), double(i), double(pc.intervals[i])});
      for (size_t e = 0; e < pc.events.size(); ++e) rows.push_back(double(pc.values[i][e]));
    }
    log_.add_counters(rows);
  }

  // lora.init_from: every rank reads the adapter (r, alpha, rslora and targets checked against the
  // configuration) and the strategy keeps its part; the optimizer starts fresh, as at step 0.
  void start_from_adapter(strategy::TrainingStrategy& strat) {
    strategy::FullState st;
    for (const auto& unit : s_.layout.units) {
      if (unit.trainable.empty()) {
        st.params.emplace_back();
        st.exp_avg.emplace_back();
        st.exp_avg_sq.emplace_back();
        continue;
      }
      st.params.push_back(at::zeros({unit.trainable_numel}, at::kFloat));
      st.exp_avg.push_back(at::zeros({unit.trainable_numel}, at::kFloat));
      st.exp_avg_sq.push_back(at::zeros({unit.trainable_numel}, at::kFloat));
    }
    lora::load_adapter(c_.lora.init_from, s_.layout, st.params);
    strat.load_state(st);
    log::info("lora.init_from: the adapter " + c_.lora.init_from + " is the starting point");
  }

  void save_outputs(strategy::TrainingStrategy& strat, const strategy::FullState& st) {
    if (rank_ == 0 && c_.checkpoint.save_adapter && s_.layout.lora.enabled) {
      const std::string dir = (fs::path(env_.run_dir) / "adapter").string();
      lora::save_adapter(dir, s_.layout, st.params, lora::base_model_name(c_.model.path, c_.model.preset));
      log::info("adapter: " + dir);
    }
  }

  void finish();
  void write_summary(io::RunFileWriter& run);

  const TrainEnv& env_;
  const RunConfig& c_;
  Setup& s_;
  device::Device& dev_;
  StepLog log_;
  int rank_ = 0, world_ = 1;
  MPI_Comm data_world_ = MPI_COMM_NULL;
  int tp_ = 1;  // tensor-parallel ranks per group
  std::unique_ptr<metrics::PhaseCounters> counters_;
  metrics::TraceRecorder trace_;
  strategy::MemoryPrediction prediction_;
  comm::ClockOffsets clocks_;
  int64_t prefetched_layers_ = 0;
  // hsdp: bytes this rank handed to the dp_shard and dp_replicate dimensions' collectives, by kind
  std::array<std::array<double, comm::kNumCollectiveKinds>, 3> mesh_bytes_{};  // dp_shard, dp_replicate, tp
  int64_t mesh_steps_ = 0;  // in this many steps
  int64_t clipped_steps_ = 0, skipped_steps_ = 0, empty_steps_ = 0;
  bool losses_finite_ = true;
  StateCheck state_check_;  // the first trial's, or the first failed one's
  std::vector<double> last_row_;  // this rank's row of the last step (the progress line)
  int stopped_signal_ = 0;     // the stop signal the ranks agreed on (0: none)
  std::string stop_message_;
  double phase_t0_[metrics::kPhaseCount] = {};
};

// Collective: traces, then the summary, cross-rank statistics and validation (rank 0 writes; a failed
// write stops every rank together).
void Trainer::finish() {
  if (trace_.enabled()) {
    const std::string path = (fs::path(env_.run_dir) / strformat("trace_rank%d.json", rank_)).string();
    trace_.write(path);
  }
  comm::agreed_writes(env_.world, [this] {
    if (env_.run) write_summary(*env_.run);
  });
}

void Trainer::write_summary(io::RunFileWriter& run) {
  RunFacts f;
  f.strategy = c_.parallel.strategy;
  f.dtype = c_.model.dtype;
  f.model = s_.layout.shape.name;
  f.model_family = s_.layout.shape.family;
  f.model_layers = s_.layout.shape.layer_mix();
  f.world = world_;
  f.trials = c_.run.repeat;
  f.steps = c_.run.steps;
  f.warmup_steps = c_.run.warmup_steps;
  f.geo = s_.geo;
  f.total_params = s_.layout.total_params();
  f.trainable_params = s_.layout.trainable_params();
  f.flops_per_token = s_.flops_per_token;
  f.peak = s_.peak;
  f.bandwidth = s_.bandwidth;
  f.traffic = s_.traffic;
  f.phase_flops = s_.phase_flops;
  f.clipped_steps = clipped_steps_;
  f.skipped_steps = skipped_steps_;
  f.empty_steps = empty_steps_;
  f.skipped_records = s_.source->skipped_records();
  f.data_source = s_.source->describe();
  f.prediction = prediction_;
  f.prefetched_layers = prefetched_layers_;
  f.papi_status = counters_->status();
  f.clock_sync = clocks_.describe();
  f.clock_offset_error_s = clocks_.max_error_s();
  f.losses_finite = losses_finite_;
  f.state_check = {state_check_.name, state_check_.passed, state_check_.detail};
  const RunSummary sum = summarize_run(log_.rows(), f);
  write_run_summary(run, sum);
  if (env_.mesh && mesh_steps_ > 0) {  // docs/hdf5-schema.md, /metrics/summary
    run.write_summary("mesh", env_.mesh->mesh.describe());
    const char* dims[3] = {"dp_shard", "dp_replicate", "tp"};
    for (size_t d = 0; d < (env_.mesh->tp ? 3u : 2u); ++d) {
      double total = 0;
      for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
        const double b = mesh_bytes_[d][size_t(k)] / double(mesh_steps_);
        total += b;
        if (b > 0)
          run.write_summary(std::string("comm_bytes_per_step_") + dims[d] + "_" +
                                comm::collective_name(static_cast<comm::CollectiveKind>(k)),
                            b);
      }
      run.write_summary(std::string("comm_bytes_per_step_") + dims[d], total);
    }
  }
  if (stopped_signal_ != 0) {
    run.set_status(schema::kStatusPreempted, stop_message_);
  } else {
    run.set_status(schema::kStatusCompleted);
  }
  log::info(strformat("run: %s  (%s, %.3f s/step, %.1f tokens/s, verdict %s)", run.path().c_str(),
                      c_.parallel.strategy.c_str(), sum.step_time_mean_s, sum.tokens_per_s_mean,
                      sum.valid() ? "VALID" : "INVALID"));
  // Every INVALID verdict says why, also with run.quiet.
  for (const auto& c : sum.checks)
    if (!c.passed) log::warn("INVALID: " + c.name + ": " + c.detail);
}

}  // namespace

namespace {

// Rank 0 marks run.h5 failed when it still can (after a failed write it may not).
void mark_failed(const TrainEnv& env, const std::string& why) {
  if (!env.run) return;
  try {
    env.run->set_status(schema::kStatusFailed, why);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lorabench: could not mark %s failed: %s\n", env.run->path().c_str(), e.what());
  }
}

}  // namespace

int run_training(const TrainEnv& env) {
  Setup s = make_setup(env);
  const RunConfig& c = *env.cfg;
  log::info(strformat("model %s (%s): %s parameters, %s trainable (%.3f%%), %s, %s",
                      s.layout.shape.name.c_str(), s.layout.shape.family.c_str(),
                      std::to_string(s.layout.total_params()).c_str(),
                      std::to_string(s.layout.trainable_params()).c_str(),
                      100.0 * double(s.layout.trainable_params()) / double(s.layout.total_params()),
                      c.model.dtype.c_str(), s.layout.shape.layer_mix().c_str()));
  log::info(strformat("batch: micro_batch %d x grad_accum %d x world %d = global batch %lld sequences of %d tokens",
                      s.geo.micro_batch, s.geo.grad_accum, s.geo.world_size, (long long)s.geo.global_batch(),
                      s.geo.seq_len));
  log::info("data: " + s.source->describe());
  log::info(strformat("peak: %.1f GFLOP/s per rank (%s: %s)", s.peak.flops_per_s / 1e9, s.peak.source.c_str(),
                      s.peak.detail.c_str()));
  log::info(strformat("memory bandwidth: %.2f GB/s per rank (%s: %s); a step moves %s per rank (forward %s, "
                      "backward %s, optimizer %s)",
                      s.bandwidth.bytes_per_s / 1e9, s.bandwidth.source.c_str(), s.bandwidth.detail.c_str(),
                      format_bytes(s.traffic.total()).c_str(), format_bytes(s.traffic.forward).c_str(),
                      format_bytes(s.traffic.backward).c_str(), format_bytes(s.traffic.optimizer).c_str()));
  Trainer t(env, s);
  try {
    return t.run();
  } catch (const NumericsError& e) {
    // Printed even with run.quiet: the run failed. Every rank saw it in the same step; rank 0 reports.
    if (env.topo->rank == 0) std::fprintf(stderr, "lorabench: training stopped: %s\n", e.what());
    if (env.run) env.run->set_status(schema::kStatusFailed, e.what());
    return 3;
  } catch (const AgreedIoError& e) {
    // A write failed (a full disk, an I/O error) and every rank knows: each says so and all stop together.
    // The checkpoints written before stay (each is committed atomically) and resume selects the newest.
    std::fprintf(stderr, "lorabench: rank %d: training stopped: %s\n", env.topo->rank, e.what());
    mark_failed(env, e.what());
    return kExitIoError;
  }
}

}  // namespace lorabench::train
