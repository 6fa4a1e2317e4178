#include "lorabench/train/plan.hpp"

#include <ATen/ATen.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

#include "lorabench/core/error.hpp"
#include "lorabench/core/mpi_session.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/device/torch_device.hpp"
#include "lorabench/io/h5.hpp"
#include "lorabench/io/run_file.hpp"
#include "lorabench/io/schema.hpp"
#include "lorabench/metrics/memory.hpp"
#include "lorabench/metrics/roofline.hpp"
#include "lorabench/model/layout.hpp"
#include "lorabench/model/tensor_parallel.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/comm/control.hpp"
#include "lorabench/train/run_specs.hpp"
#include "lorabench/train/step_runner.hpp"

namespace lorabench::train {

namespace {

// The probe's micro-batch is at most this many tokens; larger ones are extrapolated linearly in tokens
// (memory) and by the FLOPs per token (time). On a GPU the cap is higher: a small micro-batch there is
// bound by kernel launches, not by the FLOPs the extrapolation scales with, and two layers of a large
// micro-batch take milliseconds and little of the GPU's memory.
constexpr int64_t kProbeTokens = 8192;
constexpr int64_t kProbeTokensGpu = 65536;
// Timed steps per probed model: at least 5, and more until this many seconds were measured (at most 40).
constexpr double kProbeSeconds = 1.0;
constexpr int64_t kProbeMaxSteps = 40;

struct OneProbe {
  int64_t activations = 0;  // peak tensor bytes of a step above the state held between steps
  int64_t persistent = 0;   // held between steps beyond the strategy's model state
  int64_t slack = 0;        // reserved beyond allocated at the step's peak (the caching allocator; 0 on CPU)
  double micro_s = 0, optimizer_s = 0;
  double layer_s = 0;       // median forward + backward time of one decoder layer (per-unit timing)
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Trains `layers` decoder layers of the configured model for a few steps on one rank (no communicator) on
// `dev`: the memory of the first measured step, the median step times, and (CPU) each decoder layer's
// forward + backward from the per-unit timing hook. That hook reads the host clock, which on a GPU is when
// the work was queued, not when it ran: there the caller derives a layer's time from two depths instead.
// The layer kinds a probe can build its models of: the model's own (Qwen2, Qwen3: one kind) or, for a hybrid
// model, all-full-attention or all-linear-attention models (each kind's layer is measured separately).
enum class ProbeKind { kModel, kFull, kLinear };

model::ModelShape probe_shape(const RunConfig& c, int64_t layers, ProbeKind kind) {
  model::ModelShape shape = model_shape_of(c);
  shape.layers = layers;
  if (!shape.linear.empty()) {
    if (kind == ProbeKind::kModel) shape.linear.resize(size_t(layers));
    else shape.linear.assign(size_t(layers), kind == ProbeKind::kLinear);
    if (shape.linear_layers() == 0) shape.linear.clear();
  }
  return shape;
}

OneProbe probe_layers(const RunConfig& c, device::Device& dev, int layers, int micro_batch, int seq, bool timed,
                      ProbeKind kind) {
  const model::ModelShape shape = probe_shape(c, layers, kind);
  const model::ModelLayout layout = layout_of(c, shape);
  strategy::StrategySpec spec = strategy_spec_of(c);
  spec.name = "single";
  spec.grad_accum = 1;
  spec.sync_every_micro = false;
  auto strat = strategy::TrainingStrategy::create(spec, layout, dtype_of(c), nullptr, &dev);
  strategy::InitSource src;
  src.seed = c.run.seed;
  src.random_values = false;
  strat->initialize(src);
  data::SyntheticSpec ss;
  ss.seed = c.run.seed;
  ss.vocab_size = static_cast<int>(shape.vocab_size);
  ss.geo = data::BatchGeometry{micro_batch, 1, 1, seq};
  auto source = data::make_synthetic_source(ss);
  StepConfig sc = step_config_of(c);
  sc.grad_accum = 1;
  sc.nan_at_step = -1;
  sc.data_delay_s = 0;
  sc.slow_factor = 1;
  sc.schedule.total_steps = 4;
  std::map<std::string, double> unit_s;  // this step's forward + backward per decoder layer
  if (!dev.is_cuda()) {
    for (const auto& u : layout.units)
      if (u.kind == model::UnitKind::kLayer) unit_s[u.name] = 0;
    sc.options.on_unit = [&unit_s](const std::string& unit, model::Pass, double t0, double t1) {
      auto it = unit_s.find(unit);
      if (it != unit_s.end()) it->second += t1 - t0;
    };
  }
  sc.schedule.total_steps = kProbeMaxSteps + 1;
  StepRunner runner(layout, *strat, *source, sc, MPI_COMM_SELF);
  runner.run(0);  // first touch, kernel selection
  OneProbe p;
  std::vector<double> micro, opt, layer;
  // At least 5 measured steps and kProbeSeconds of them: on a shared machine whose speed drifts, a median
  // over a second or two is what a run's mean over its steps compares with.
  double measured = 0;
  const int64_t min_steps = timed ? 5 : 1;  // untimed: the memory of one step is all that is used
  for (int64_t step = 1; step <= kProbeMaxSteps && (step <= min_steps || (timed && measured < kProbeSeconds));
       ++step) {
    for (auto& [name, s] : unit_s) s = 0;
    const int64_t held = dev.memory().current;
    dev.reset_peak();
    const StepResult r = runner.run(step);
    if (step == 1) {
      const device::MemoryStats m = dev.memory();
      p.activations = m.peak - held;
      p.persistent = std::max<int64_t>(0, held - strat->predict_memory().total());
      p.slack = std::max<int64_t>(0, m.reserved_peak - m.peak);
    }
    micro.push_back(r.times.data + r.times.forward + r.times.backward);
    measured += r.times.step;
    opt.push_back(r.times.optimizer);
    for (const auto& [name, s] : unit_s) layer.push_back(s);
  }
  p.micro_s = median(micro);
  p.optimizer_s = median(opt);
  p.layer_s = median(layer);
  return p;
}


// nccl-tests' bus factor: busbw = algbw x factor.
double bus_factor(const std::string& op, int world) {
  const double w = world;
  return op == "all_reduce" ? 2 * (w - 1) / w : (w - 1) / w;
}

double transfer_s(const CommBandwidth& bw, const std::string& op, double bytes, int world) {
  if (world <= 1 || bytes <= 0) return 0;
  const double gbps = op == "all_reduce" ? bw.all_reduce : op == "all_gather" ? bw.all_gather : bw.reduce_scatter;
  if (!(gbps > 0)) return 0;
  return bytes * bus_factor(op, world) / (gbps * 1e9);
}

int64_t round_up(int64_t n, int64_t k) { return (n + k - 1) / k * k; }

}  // namespace

// Bus bandwidth of the three collectives on the ranks of this job: 16 MiB fp32, best of 3 after a warm-up,
// with the buffers where the run keeps its tensors (device memory on a GPU: NCCL, or MPI staging them).
CommBandwidth measure_bandwidth(comm::Communicator& comm, MPI_Comm world, device::Device& dev) {
  int w = 1;
  MPI_Comm_size(world, &w);
  // 16 MiB in all (nccl-tests' size: the full buffer), whatever the world size: memory stays bounded.
  const size_t per_rank = std::max<size_t>(1, (size_t(4) << 20) / size_t(w));  // floats
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device::torch_device(dev));
  at::Tensor send_t = at::ones({int64_t(per_rank) * w}, opts), recv_t = at::zeros({int64_t(per_rank) * w}, opts);
  float* send = send_t.data_ptr<float>();
  float* recv = recv_t.data_ptr<float>();
  dev.synchronize();
  auto best = [&](const std::function<void()>& call) {
    call();
    double b = 1e30;
    for (int i = 0; i < 3; ++i) {
      MPI_Barrier(world);
      const double t0 = sys::now_s();
      call();
      b = std::min(b, sys::now_s() - t0);
    }
    return comm::allreduce_max(world, b);
  };
  const double bytes = double(per_rank * size_t(w)) * 4;
  const double fw = double(w - 1) / w;
  CommBandwidth bw;
  bw.all_reduce = bytes * 2 * fw / best([&] {
    comm.all_reduce(send, per_rank * size_t(w), comm::DataType::kFloat32, comm::ReduceOp::kSum);
  }) / 1e9;
  bw.all_gather = bytes * fw / best([&] {
    comm.all_gather(send, recv, per_rank, comm::DataType::kFloat32);
  }) / 1e9;
  bw.reduce_scatter = bytes * fw / best([&] {
    comm.reduce_scatter(send, recv, per_rank, comm::DataType::kFloat32, comm::ReduceOp::kSum);
  }) / 1e9;
  bw.source = strformat("measured now on %d ranks (16 MiB buffers on %s, fp32, best of 3)", w,
                        dev.is_cuda() ? "the GPUs" : "the CPUs");
  return bw;
}

// One process, no comm file: memcpy bandwidth of 64 MiB as the estimate of a shared-memory transport's
// bus bandwidth (the ranks of one node exchange through memory).
CommBandwidth estimate_bandwidth() {
  const size_t n = size_t(64) << 20;
  std::vector<char> a(n, 1), b(n, 0);
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {
    const double t0 = sys::now_s();
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, sys::now_s() - t0);
  }
  CommBandwidth bw;
  bw.all_reduce = bw.all_gather = bw.reduce_scatter = double(n) / best / 1e9 / 2;
  bw.source = strformat("estimate: half the memcpy bandwidth of this process (%.1f GB/s); give --comm RUN.h5 "
                        "(lorabench comm) or run under mpirun for a measurement", double(n) / best / 1e9);
  return bw;
}

int node_cpus(MPI_Comm world) {
  MPI_Comm node;
  LB_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    for (int c = 0; c < sys::online_cpus() && c < CPU_SETSIZE; ++c) CPU_SET(c, &set);
  std::vector<unsigned char> bytes(sizeof set);
  std::memcpy(bytes.data(), &set, sizeof set);
  LB_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes.data(), int(bytes.size()), MPI_UNSIGNED_CHAR, MPI_BOR, node));
  std::memcpy(&set, bytes.data(), sizeof set);
  LB_MPI_CHECK(MPI_Comm_free(&node));
  return std::max(1, CPU_COUNT(&set));
}

CommBandwidth bandwidth_from_file(const std::string& path) {
  io::RunFileReader r(path);
  if (r.kind() != schema::kKindComm) throw ConfigError("--comm: " + path + " is not a `lorabench comm` run file");
  auto t = h5::read_table(r.file(), schema::kCommResults);
  const auto ops = h5::read_strings(r.file(), schema::kCommOpNames);
  CommBandwidth bw;
  std::map<std::string, std::pair<double, double>> best;  // op -> (bytes, busbw) at the largest fp32 size
  for (size_t i = 0; i < t["op"].size(); ++i) {
    if (t["dtype"][i] != 0) continue;
    const std::string op = ops.at(size_t(t["op"][i]));
    auto& b = best[op];
    if (t["bytes"][i] >= b.first) b = {t["bytes"][i], t["busbw_GBps"][i]};
  }
  bw.all_reduce = best["all_reduce"].second;
  bw.all_gather = best["all_gather"].second;
  bw.reduce_scatter = best["reduce_scatter"].second;
  if (!(bw.all_reduce > 0) && !(bw.all_gather > 0) && !(bw.reduce_scatter > 0))
    throw ConfigError("--comm: " + path + " has no fp32 all_reduce, all_gather or reduce_scatter rows");
  // A collective the file lacks takes the best bandwidth of those it has, and the source says so.
  const double any = std::max({bw.all_reduce, bw.all_gather, bw.reduce_scatter});
  std::vector<std::string> assumed;
  for (auto [v, name] : {std::pair<double*, const char*>{&bw.all_reduce, "all_reduce"},
                         {&bw.all_gather, "all_gather"}, {&bw.reduce_scatter, "reduce_scatter"}}) {
    if (*v > 0) continue;
    *v = any;
    assumed.push_back(name);
  }
  bw.source = path + " (lorabench comm, " + std::to_string(r.ranks()["rank"].size()) + " ranks)";
  if (!assumed.empty()) bw.source += "; not measured there, assumed as fast as the best: " + join(assumed, ", ");
  return bw;
}

std::pair<int, int64_t> probe_micro_batch(const RunConfig& c, int64_t cap, int64_t budget, int64_t* bytes) {
  // The largest of the 2-layer models the probe builds (a hybrid model's: one of each kind).
  const model::ModelShape whole = model_shape_of(c);
  std::vector<model::ModelShape> models;
  if (whole.linear.empty()) {
    models.push_back(probe_shape(c, std::min<int64_t>(whole.layers, 2), ProbeKind::kModel));
  } else {
    if (whole.linear_layers() > 0) models.push_back(probe_shape(c, 2, ProbeKind::kLinear));
    if (whole.linear_layers() < whole.layers) models.push_back(probe_shape(c, 2, ProbeKind::kFull));
  }
  const data::BatchGeometry geo = batch_geometry_of(c, 1);
  int Bp = static_cast<int>(std::min<int64_t>(geo.micro_batch, cap / 2));
  int64_t Tp = std::min<int64_t>(geo.seq_len, std::max<int64_t>(2, cap / Bp));
  auto need = [&] {
    int64_t most = 0;
    for (const auto& s2 : models)
      most = std::max(most, strategy::predict_model_state("single", layout_of(c, s2), dtype_of(c), 1).total() +
                                activation_lower_bound(c, s2, int64_t(Bp) * Tp));
    return most;
  };
  // Halve the sequences first, then the sequence, down to 128 tokens (the activations scale with tokens;
  // the extrapolation to the run's micro-batch is by tokens too).
  while (need() > budget && int64_t(Bp) * Tp > 128) {
    if (Bp > 1) Bp = (Bp + 1) / 2;
    else Tp = std::max<int64_t>(128, Tp / 2);
  }
  if (bytes) *bytes = need();
  if (need() > budget) return {0, 0};
  return {Bp, Tp};
}

ProbeResult probe_model(const RunConfig& c, device::Device& dev) {
  const model::ModelShape shape = model_shape_of(c);
  const int L = static_cast<int>(shape.layers);
  const data::BatchGeometry geo = batch_geometry_of(c, 1);
  const int B = geo.micro_batch;
  const int64_t T = geo.seq_len;
  const int64_t cap = dev.is_cuda() ? kProbeTokensGpu : kProbeTokens;
  const int64_t available = memory_for_fit_checks(c, dev.memory_available());
  int64_t probe_bytes = 0;
  const auto [Bp, Tp] = probe_micro_batch(c, cap, available >= 0 ? available / 2 : INT64_MAX, &probe_bytes);
  if (Bp == 0) {
    ProbeResult skipped;
    skipped.device = dev.str();
    skipped.skipped = strformat("probe skipped: its 2-layer model needs %s at its smallest micro-batch (128 tokens), "
                                "over half of the %s available on %s",
                                format_bytes(double(probe_bytes)).c_str(), format_bytes(double(available)).c_str(),
                                dev.str().c_str());
    return skipped;
  }
  // Memory from both. Time on CPU from the 2-layer model only (its per-layer median), so the 1-layer one
  // runs a single measured step; on a GPU a layer's time is the difference of the two models' median
  // micro-steps (CUDA events; a GPU's step time holds still where a shared CPU's does not). A hybrid model
  // (Qwen3.5) is probed per layer kind: 1- and 2-layer models of linear-attention layers and of full-attention
  // layers, and the model is their shared part plus each kind's layer times its count.
  const bool gpu = dev.is_cuda();
  struct Kind {
    ProbeKind kind;
    int64_t count;
    OneProbe one, two;
    double layer_s = 0, layer_flops = 0;
  };
  std::vector<Kind> kinds;
  if (shape.linear.empty()) {
    kinds.push_back({ProbeKind::kModel, L, {}, {}});
  } else {
    if (shape.linear_layers() > 0) kinds.push_back({ProbeKind::kLinear, shape.linear_layers(), {}, {}});
    if (shape.linear_layers() < L) kinds.push_back({ProbeKind::kFull, L - shape.linear_layers(), {}, {}});
  }
  ProbeResult p;
  p.device = dev.str();
  p.tokens = int64_t(B) * T;
  const double scale_tokens = double(int64_t(B) * T) / double(int64_t(Bp) * Tp);
  const metrics::LoraSpec ml = metrics::LoraSpec::from_names(c.lora.enabled, c.lora.r, c.lora.targets);
  const double fpt = double(metrics::training_flops_per_token(flops_shape(shape), ml, T).total());
  const double fpt_probe = double(metrics::training_flops_per_token(flops_shape(shape), ml, Tp).total());
  for (Kind& k : kinds) {
    // Each model starts from an empty allocator cache (a GPU's: what the 1-layer model left cached would
    // otherwise shape the 2-layer model's reserved bytes), and the run after the probe does too.
    k.one = probe_layers(c, dev, 1, Bp, static_cast<int>(Tp), gpu, k.kind);
    dev.release_cached();
    k.two = probe_layers(c, dev, 2, Bp, static_cast<int>(Tp), true, k.kind);
    dev.release_cached();
    k.layer_s = gpu ? std::max(0.0, k.two.micro_s - k.one.micro_s) : k.two.layer_s;
    // One layer's FLOPs at the probe's micro-batch: the 2-layer model's less the 1-layer model's.
    k.layer_flops = (double(metrics::training_flops_per_token(flops_shape(probe_shape(c, 2, k.kind)), ml, Tp).total()) -
                     double(metrics::training_flops_per_token(flops_shape(probe_shape(c, 1, k.kind)), ml, Tp).total())) *
                    double(int64_t(Bp) * Tp);
  }
  // The part every model shares (embedding, head, the step's fixed costs) from the first kind's two models, then
  // each kind's layers: with one kind, one + (two - one)(L - 1).
  const Kind& first = kinds.front();
  auto total = [&](auto of) {
    double v = of(first.one) - (of(first.two) - of(first.one));
    for (const Kind& k : kinds) v += double(k.count) * (of(k.two) - of(k.one));
    return v;
  };
  p.activation_bytes =
      int64_t(std::llround(total([](const OneProbe& o) { return double(o.activations); }) * scale_tokens));
  p.slack_bytes = std::max<int64_t>(
      0, int64_t(std::llround(total([](const OneProbe& o) { return double(o.slack); }) * scale_tokens)));
  // Time: the 2-layer model's step with its layers replaced by the model's (the per-layer median is robust
  // where the difference of two step times is not). The update's time follows the trainable parameters, which
  // (LoRA or full fine-tuning alike) are almost all in the decoder layers.
  double micro = first.two.micro_s - 2.0 * first.layer_s, layers_s = 0, layers_flops = 0;
  p.optimizer_s = 0;
  for (const Kind& k : kinds) {
    p.persistent_bytes = std::max({p.persistent_bytes, k.one.persistent, k.two.persistent});
    micro += double(k.count) * k.layer_s;
    layers_s += double(k.count) * k.layer_s;
    layers_flops += double(k.count) * k.layer_flops;
    p.optimizer_s += k.two.optimizer_s * double(k.count) / 2.0;
  }
  p.micro_s = micro * scale_tokens * fpt / fpt_probe;
  p.layer_gflops = L > 1 && layers_s > 0 ? layers_flops / layers_s / 1e9 : 0;
  const std::string models = kinds.size() > 1 ? "1- and 2-layer models of each layer kind" : "1- and 2-layer models";
  p.note = gpu ? strformat("probe: %s on %s, micro-batch %d x %lld tokens", models.c_str(), p.device.c_str(), Bp,
                           (long long)Tp)
               : strformat("probe: %s, micro-batch %d x %lld tokens, %d thread%s", models.c_str(), Bp,
                           (long long)Tp, c.parallel.threads_per_rank, c.parallel.threads_per_rank == 1 ? "" : "s");
  if (Bp != B || Tp != T)
    p.note += strformat("; extrapolated to %d x %lld tokens (memory by tokens, time by FLOPs)", B, (long long)T);
  return p;
}

int64_t activation_lower_bound(const RunConfig& c) {
  return activation_lower_bound(c, model_shape_of(c), batch_geometry_of(c, 1).micro_batch_tokens());
}

int64_t activation_lower_bound(const RunConfig& c, const model::ModelShape& s, int64_t N) {
  const metrics::LoraSpec lora = metrics::LoraSpec::from_names(c.lora.enabled, c.lora.r, c.lora.targets);
  const int64_t ds = at::elementSize(dtype_of(c));
  // What each layer keeps for backward (model/qwen2.hpp's LayerCache; the roofline's byte count counts the
  // same tensors written and read back).
  const metrics::TransformerShape fs = flops_shape(s);
  const int64_t D = s.hidden, layers = s.layers;
  if (c.model.activation_checkpointing)
    return layers * N * D * ds + N * metrics::max_layer_saved_bytes_per_token(fs, lora, ds) + N * D * ds;
  return N * metrics::saved_bytes_per_token(fs, lora, ds) + N * D * ds;
}

namespace {

// What every row of a plan is computed from.
struct PlanInputs {
  const RunConfig& c;
  const PlanOptions& o;
  const ProbeResult* probe;  // null: the activation lower bound, no time
  model::ModelShape shape;
  model::ModelLayout layout;
  at::ScalarType dtype;
  int64_t ds = 0;              // bytes per element of the model dtype
  int64_t N = 0, D = 0;        // tokens of a rank's micro-batch; hidden size
  int accum = 1;
  int64_t pt = 0;              // trainable parameters
  int64_t layer_c = 0, layer_t = 0;  // the largest decoder layer unit (FSDP gathers one at a time)
  int64_t process = 0;         // this process's RSS before anything is allocated (what every rank also holds)
  int64_t avail_node = 0;      // memory of the node, or of one of its GPUs
  int gpus = 1, cpus = 1;      // the node's
};

PlanInputs plan_inputs(const RunConfig& c, const PlanOptions& o, const ProbeResult* probe) {
  PlanInputs in{c, o, probe, model_shape_of(c), {}, dtype_of(c)};
  in.layout = layout_of(c, in.shape);
  in.ds = at::elementSize(in.dtype);
  const data::BatchGeometry geo = batch_geometry_of(c, 1);  // per rank: the world varies by row
  in.N = geo.micro_batch_tokens();
  in.D = in.shape.hidden;
  in.accum = geo.grad_accum;
  in.pt = in.layout.trainable_params();
  for (const auto& u : in.layout.units) {
    if (u.kind != model::UnitKind::kLayer) continue;
    in.layer_c = std::max(in.layer_c, u.compute_numel);
    in.layer_t = std::max(in.layer_t, u.trainable_numel);
  }
  in.process = sys::current_rss();
  in.avail_node = memory_for_fit_checks(c, o.gpu ? o.gpu_available : sys::memory_available_bytes());
  in.gpus = std::max(1, o.gpus_per_node);
  in.cpus = o.node_cpus > 0 ? o.node_cpus : sys::usable_cpus();
  return in;
}

// Bytes of one FSDP decoder layer gathered: its compute weights and (LoRA) its trainable ones.
int64_t fsdp_layer_bytes(const PlanInputs& in, int w) {
  return round_up(in.layer_c, w) * in.ds + (in.layout.full_finetune ? 0 : round_up(in.layer_t, w) * 4);
}

// What a strategy holds beyond its model state at the step's peak.
int64_t strategy_extra_bytes(const PlanInputs& in, const std::string& st, int w) {
  if (st == "zero2") return in.pt * 4 - in.pt * 4 / w;  // the full gradient buffer of the micro-step, until reduce-scattered
  if (st != "fsdp") return 0;
  // A prefetched second layer only where prefetch is not bounded by the step's peak: bounded
  // (parallel.prefetch_within_peak), it is never gathered while the peak is reached.
  const int held = in.c.parallel.prefetch && !in.c.parallel.prefetch_within_peak ? 2 : 1;
  // gathered layers + a layer's full gradient in backward + the vocabulary exchange: every rank's hidden
  // states (W x N x D in the model dtype) and their fp32 gradient.
  return held * fsdp_layer_bytes(in, w) + round_up(in.layer_t, w) * 4 + (w - 1) * in.N * in.D * (in.ds + 4);
}

// Memory of the row's ranks against what their node (CPU) or GPU has; returns how oversubscribed the
// compute is (ranks per GPU, or ranks x threads per CPU) and whether the node has GPUs enough.
double place_on_node(PlanRow& r, const PlanInputs& in, bool* enough_gpus) {
  const PlanOptions& o = in.o;
  *enough_gpus = true;
  if (o.gpu) {  // each rank's memory and time are its GPU's, shared by the ranks that run on it
    r.ranks_per_gpu = o.share_gpus ? (r.ranks_per_node + in.gpus - 1) / in.gpus : 1;
    *enough_gpus = o.share_gpus || r.ranks_per_node <= in.gpus;
    r.rss = -1;
    r.reserved = r.tensor_peak + (in.probe ? in.probe->slack_bytes : 0);
    r.available = in.avail_node >= 0 ? in.avail_node / r.ranks_per_gpu : -1;
    r.fits = *enough_gpus && (r.available < 0 || r.reserved <= r.available);
    return r.ranks_per_gpu;
  }
  r.rss = r.tensor_peak + in.process;
  r.reserved = r.tensor_peak;
  r.available = in.avail_node >= 0 ? in.avail_node / r.ranks_per_node : -1;
  r.fits = r.available < 0 || r.rss <= r.available;
  return std::max(1.0, double(r.ranks_per_node) * in.c.parallel.threads_per_rank / double(in.cpus));
}

// Seconds of a step's collectives under strategy `st` on `w` ranks, over the bus bandwidths `bw`. hsdp:
// fsdp's within a shard group of w / replicas ranks, and each micro-step's gradient shards all-reduced across
// the replicas.
// `across`: the bandwidth of the replicas' all-reduce (between nodes when they are on several).
double comm_seconds(const PlanInputs& in, const std::string& st, int w, const CommBandwidth& bw, int replicas = 1,
                    const CommBandwidth* across = nullptr) {
  RunConfig cc = in.c;
  cc.parallel.strategy = st;
  const int syncs = strategy_spec_of(cc).sync_every_micro ? in.accum : 1;
  const double grads = double(in.pt) * 4;
  if (st == "hsdp") {
    const int shard = w / replicas;
    return comm_seconds(in, "fsdp", shard, bw) +
           (replicas > 1 ? syncs * transfer_s(across ? *across : bw, "all_reduce", grads / shard, replicas) : 0.0);
  }
  if (st == "ddp") return syncs * transfer_s(bw, "all_reduce", grads, w);
  if (st == "zero1") return syncs * transfer_s(bw, "all_reduce", grads, w) + transfer_s(bw, "all_gather", grads, w);
  if (st == "zero2")
    return syncs * transfer_s(bw, "reduce_scatter", grads, w) + transfer_s(bw, "all_gather", grads, w);
  if (st != "fsdp") return 0;
  const double passes = in.c.parallel.reshard_after_forward ? 2 : 1;
  const double vocab = double(w * in.N * in.D) * (2 * in.ds + 4);  // embedding out, hidden states in, their gradient
  return in.accum * (passes * double(in.shape.layers) * transfer_s(bw, "all_gather", double(fsdp_layer_bytes(in, w)), w) +
                     transfer_s(bw, "reduce_scatter", grads, w) + transfer_s(bw, "all_gather", vocab, w));
}

// The bandwidth of the collectives that cross nodes: a row whose ranks span several nodes uses the bandwidth
// between nodes where it is known, else the one table.
const CommBandwidth& between_nodes(const PlanInputs& in, const PlanRow& r, const CommBandwidth& bw) {
  return r.world > r.ranks_per_node && in.o.inter_node.known() ? in.o.inter_node : bw;
}

// The row's step time from the probe: compute (oversubscribed as the node is) plus the collectives.
void predict_time(PlanRow& r, const PlanInputs& in, double oversub, const CommBandwidth& bw) {
  const ProbeResult& p = *in.probe;
  const bool sharded_optimizer =
      r.strategy == "zero1" || r.strategy == "zero2" || r.strategy == "fsdp" || r.strategy == "hsdp";
  const int owners = r.world / r.dp_replicate;  // the ranks one optimizer step is shared by
  r.compute_s = (in.accum * p.micro_s + (sharded_optimizer ? p.optimizer_s / owners : p.optimizer_s)) * oversub;
  // No bandwidth known (one process on a GPU, no --comm file): the collectives' time is unknown. On several nodes
  // the collectives that span them run at the bandwidth between nodes (where given): all of them, or hsdp's
  // all-reduce across the replicas when its shard groups are inside nodes.
  const CommBandwidth& inter = between_nodes(in, r, bw);
  const bool groups_inside = r.strategy == "hsdp" && r.ranks_per_node % (r.world / r.dp_replicate) == 0;
  r.comm_s = r.world > 1 && !bw.known() ? NAN
             : r.strategy == "hsdp"    ? comm_seconds(in, r.strategy, r.world, groups_inside ? bw : inter,
                                                      r.dp_replicate, &inter)
                                       : comm_seconds(in, r.strategy, r.world, inter, r.dp_replicate);
  r.step_s = r.compute_s + r.comm_s;
  r.tokens_per_s = double(r.world) * in.accum * double(in.N) / r.step_s;
}

// A tensor-parallel row: `inner` (single or ddp) across w / T groups of T ranks, each rank holding its part.
void plan_tp_row(PlanRow& r, const PlanInputs& in, const std::string& inner, const CommBandwidth& bw) {
  const int T = r.tp, dp = r.world / T;
  r.dp_replicate = dp;
  const model::ModelShape part = model::tp_local_shape(in.shape, T);
  model::ModelLayout pl = model::build_layout(part, in.layout.lora);
  const strategy::MemoryPrediction ms = strategy::predict_model_state(inner, pl, in.dtype, dp);
  r.model_state = ms.total();
  r.formula = ms.formula + strformat(" of a 1/%d part", T);
  const int64_t whole = activation_lower_bound(in.c, in.shape, in.N), mine = activation_lower_bound(in.c, part, in.N);
  const double share = whole > 0 ? double(mine) / double(whole) : 1.0;
  r.activations = in.probe ? int64_t(double(in.probe->activation_bytes) * share) : mine;
  r.tensor_peak = r.model_state + r.activations + (in.probe ? in.probe->persistent_bytes : 0);
  bool enough_gpus = true;
  const double oversub = place_on_node(r, in, &enough_gpus);
  if (!in.probe) return;
  const metrics::LoraSpec ml = metrics::LoraSpec::from_names(in.c.lora.enabled, in.c.lora.r, in.c.lora.targets);
  const int64_t T_seq = batch_geometry_of(in.c, 1).seq_len;
  const double f_whole = double(metrics::training_flops_per_token(flops_shape(in.shape), ml, T_seq).total());
  const double f_part = double(metrics::training_flops_per_token(flops_shape(part), ml, T_seq).total());
  const double fshare = f_whole > 0 ? f_part / f_whole : 1.0;
  const double pshare = in.pt > 0 ? double(pl.trainable_params()) / double(in.pt) : 1.0;
  r.compute_s = (in.accum * in.probe->micro_s * fshare + in.probe->optimizer_s * pshare) * oversub;
  // Per micro-step inside the group: per layer two all-reduces of N x D forward (three with the recomputation of
  // activation checkpointing) and two backward; the embedding's rows (N x D) and the head's input gradient (fp32).
  const double act = double(in.N * in.D * in.ds);
  const double fwd = in.c.model.activation_checkpointing ? 4 : 2;
  const double per_micro = double(in.shape.layers) * (fwd + 2) * transfer_s(bw, "all_reduce", act, T) +
                           transfer_s(bw, "all_reduce", act, T) +
                           transfer_s(bw, "all_reduce", double(in.N * in.D * 4), T);
  RunConfig cc = in.c;
  cc.parallel.strategy = inner;
  const int syncs = strategy_spec_of(cc).sync_every_micro ? in.accum : 1;
  const double grads = double(pl.trainable_params()) * 4;
  // The groups are inside nodes; ddp's all-reduce across them spans the nodes the row has.
  const CommBandwidth& inter = between_nodes(in, r, bw);
  r.comm_s = r.world > 1 && !bw.known()
                 ? NAN
                 : in.accum * per_micro + (inner == "ddp" ? syncs * transfer_s(inter, "all_reduce", grads, dp) : 0.0);
  r.step_s = r.compute_s + r.comm_s;
  r.tokens_per_s = double(dp) * in.accum * double(in.N) / r.step_s;
}

// Unless told: CPU ranks all on this node; GPU ranks on nodes like this one, one rank per GPU (NCCL), or all on
// this node sharing its GPUs (parallel.backend = mpi).
int ranks_per_node(const PlanInputs& in, int w) {
  const PlanOptions& o = in.o;
  return o.ranks_per_node > 0 ? std::min(w, o.ranks_per_node) : o.gpu && !o.share_gpus ? std::min(w, in.gpus) : w;
}

PlanRow plan_row(const PlanInputs& in, const std::string& name, int w, const CommBandwidth& bw) {
  const PlanOptions& o = in.o;
  PlanRow r;
  const auto [st, tp] = split_tp_strategy(name);
  r.strategy = name;
  r.world = w;
  r.tp = tp;
  r.ranks_per_node = ranks_per_node(in, w);
  if (tp > 1) {  // refused as a run would refuse it
    std::string why;
    if (w % tp != 0) why = strformat("%d tensor-parallel ranks do not divide %d ranks", tp, w);
    else if (r.ranks_per_node % tp != 0) why = strformat("a tensor-parallel group of %d ranks must lie within a node of %d", tp, r.ranks_per_node);
    else if (st != "ddp" && !(st == "single" && w == tp)) why = "tensor parallelism runs with single (one group) or ddp";
    else if (in.layout.full_finetune) why = "tensor parallelism trains LoRA adapters";
    if (why.empty()) {
      try {
        model::tp_local_shape(in.shape, tp);
      } catch (const ConfigError& e) {
        why = e.what();
      }
    }
    if (!why.empty()) {
      r.fits = false;
      r.note = why;
      return r;
    }
    plan_tp_row(r, in, st, bw);
    if (!r.fits)
      r.note = strformat("does not fit: needs %s per rank, %s available%s",
                         format_bytes(double(o.gpu ? r.reserved : r.rss)).c_str(),
                         format_bytes(double(r.available)).c_str(), o.gpu ? " on its GPU" : "");
    return r;
  }
  // hsdp: what a rank holds is fsdp's over its shard group; the replicas (one per node unless
  // parallel.dp_replicate says) hold copies.
  if (st == "hsdp")
    r.dp_replicate = in.c.parallel.dp_replicate > 0 ? in.c.parallel.dp_replicate
                                                    : std::max(1, w / std::max(1, r.ranks_per_node));
  if (w % r.dp_replicate != 0) {
    r.fits = false;
    r.note = strformat("%d replicas do not divide %d ranks (parallel.dp_replicate)", r.dp_replicate, w);
    return r;
  }
  const int group = w / r.dp_replicate;
  const strategy::MemoryPrediction ms = strategy::predict_model_state(st, in.layout, in.dtype, group);
  r.model_state = ms.total();
  r.formula = ms.formula;
  r.activations = in.probe ? in.probe->activation_bytes : activation_lower_bound(in.c);
  r.strategy_extra = strategy_extra_bytes(in, st == "hsdp" ? "fsdp" : st, group);
  r.tensor_peak = r.model_state + r.activations + r.strategy_extra + (in.probe ? in.probe->persistent_bytes : 0);
  bool enough_gpus = true;
  const double oversub = place_on_node(r, in, &enough_gpus);
  if (in.probe) predict_time(r, in, oversub, bw);
  if (!enough_gpus)
    r.note = strformat("needs %d GPUs per node (one rank per GPU with NCCL), a node like this one has %d; "
                       "lower --ranks-per-node, or set parallel.backend = mpi to share them",
                       r.ranks_per_node, in.gpus);
  else if (!r.fits)
    r.note = strformat("does not fit: needs %s per rank, %s available%s",
                       format_bytes(double(o.gpu ? r.reserved : r.rss)).c_str(),
                       format_bytes(double(r.available)).c_str(), o.gpu ? " on its GPU" : "");
  return r;
}

}  // namespace

std::vector<PlanRow> make_plan(const RunConfig& c, const PlanOptions& o, const ProbeResult* probe,
                               const CommBandwidth& bw) {
  const PlanInputs in = plan_inputs(c, o, probe);
  std::vector<PlanRow> rows;
  for (int w : o.worlds) {
    std::vector<std::string> strategies = o.strategies;
    if (strategies.empty()) {
      strategies = w == 1 ? std::vector<std::string>{"single"} : std::vector<std::string>{"ddp", "zero1", "zero2", "fsdp"};
      // Ranks on several nodes (--ranks-per-node): hsdp with a shard group per node too.
      if (o.ranks_per_node > 0 && w > o.ranks_per_node && w % o.ranks_per_node == 0) strategies.push_back("hsdp");
      // Tensor-parallel groups inside a node where the model splits into them (LoRA only).
      const int per_node = ranks_per_node(in, w);
      for (int tp = 2; tp <= per_node && w > 1 && !in.layout.full_finetune; tp *= 2) {
        if (w % tp != 0 || per_node % tp != 0) continue;
        try {
          model::tp_local_shape(in.shape, tp);
        } catch (const ConfigError&) {
          continue;
        }
        strategies.push_back(strformat("tp%d+%s", tp, tp == w ? "single" : "ddp"));
      }
    }
    for (const auto& name : strategies) {
      const auto [st, tp] = split_tp_strategy(name);
      // single: one rank, or one tensor-parallel group; ddp across one group is ddp of one replica.
      if (st == "single" ? w == tp : w > 1) rows.push_back(plan_row(in, name, w, bw));
    }
  }
  return rows;
}

std::string plan_strategy_name(const RunConfig& c) {
  return c.parallel.tp > 1 ? strformat("tp%d+%s", c.parallel.tp, c.parallel.strategy.c_str()) : c.parallel.strategy;
}

std::pair<std::string, int> split_tp_strategy(const std::string& name) {
  if (name.rfind("tp", 0) != 0) return {name, 1};
  const size_t plus = name.find('+');
  int tp = 0;
  try {
    tp = plus == std::string::npos ? 0 : std::stoi(name.substr(2, plus - 2));
  } catch (const std::exception&) {
    tp = 0;
  }
  if (tp < 1 || plus + 1 >= name.size())
    throw ConfigError("\"" + name + "\": a tensor-parallel strategy is written tpT+S, e.g. tp2+ddp or tp2+single");
  return {name.substr(plus + 1), tp};
}

std::string plan_markdown(const RunConfig& c, const std::vector<PlanRow>& rows, const ProbeResult* probe,
                          const CommBandwidth& bw, const PlanOptions& po) {
  const model::ModelShape shape = model_shape_of(c);
  const data::BatchGeometry geo = batch_geometry_of(c, 1);
  const std::string where =
      !po.gpu          ? strformat("%d thread%s per rank", c.parallel.threads_per_rank, c.parallel.threads_per_rank == 1 ? "" : "s")
      : po.share_gpus ? std::string("ranks sharing GPUs (parallel.backend = mpi)")
                      : std::string("one GPU per rank");
  std::string o = strformat("# lorabench plan: %s, %s, LoRA %s, micro-batch %d x seq %d, grad_accum %d, %s\n\n",
                            shape.name.c_str(), c.model.dtype.c_str(),
                            c.lora.enabled ? ("r" + std::to_string(c.lora.r)).c_str() : "off", geo.micro_batch,
                            geo.seq_len, geo.grad_accum, where.c_str());
  o += strformat("| strategy | ranks | ranks/node | model state / rank | formula | activations + workspace | "
                 "strategy buffers | tensor peak / rank | %s | fits | step (s) | compute (s) | comm (s) | tokens/s |\n",
                 po.gpu ? "reserved / rank | GPU memory / rank" : "RSS / rank | available / rank");
  o += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  auto b = [](int64_t v) { return v < 0 ? std::string("?") : format_bytes(double(v)); };
  auto t = [](const char* f, double v) { return std::isfinite(v) ? strformat(f, v) : std::string("?"); };
  for (const auto& r : rows) {
    const std::string per_node =
        r.ranks_per_gpu > 1 ? strformat("%d (%d per GPU)", r.ranks_per_node, r.ranks_per_gpu) : std::to_string(r.ranks_per_node);
    const std::string name = r.tp > 1 ? strformat("%s (dp %d x tp %d)", r.strategy.c_str(), r.world / r.tp, r.tp)
                             : r.dp_replicate > 1 ? strformat("%s (%d x %d)", r.strategy.c_str(), r.dp_replicate,
                                                              r.world / r.dp_replicate)
                                                  : r.strategy;
    o += strformat("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |", name.c_str(), r.world,
                   per_node.c_str(), b(r.model_state).c_str(), r.formula.c_str(), b(r.activations).c_str(),
                   b(r.strategy_extra).c_str(), b(r.tensor_peak).c_str(), b(po.gpu ? r.reserved : r.rss).c_str(),
                   b(r.available).c_str(), r.fits ? "yes" : "**no**");
    if (probe)
      o += " " + t("%.3f", r.step_s) + " | " + t("%.3f", r.compute_s) + " | " + t("%.3f", r.comm_s) + " | " +
           t("%.1f", r.tokens_per_s) + " |\n";
    else
      o += " — | — | — | — |\n";
  }
  o += "\n";
  if (probe) {
    o += strformat("- Activations and time from the %s: one micro-batch forward + backward %.3f s, optimizer %.3f s, "
                   "activations %s; one decoder layer computes at %.1f GFLOP/s.\n",
                   probe->note.c_str(), probe->micro_s, probe->optimizer_s,
                   format_bytes(double(probe->activation_bytes)).c_str(), probe->layer_gflops);
    if (probe->persistent_bytes > 0)
      o += "- Held between steps beyond the model state (libraries' workspaces), measured by the probe and in the "
           "tensor peak: " + format_bytes(double(probe->persistent_bytes)) + ".\n";
  } else {
    o += "- No probe: activations are the lower bound of the saved tensors; no time predicted.\n";
  }
  if (bw.known())
    o += strformat("- Bus bandwidth (GB/s): all_reduce %.2f, all_gather %.2f, reduce_scatter %.2f, from %s.\n",
                   bw.all_reduce, bw.all_gather, bw.reduce_scatter, bw.source.c_str());
  else
    o += "- Bus bandwidth: " + bw.source + ".\n";
  const bool several_nodes = std::any_of(rows.begin(), rows.end(), [](const PlanRow& r) { return r.world > r.ranks_per_node; });
  if (po.inter_node.known())
    o += strformat("- Between nodes (GB/s): all_reduce %.2f, all_gather %.2f, reduce_scatter %.2f, from %s: the "
                   "collectives of rows on several nodes that span them use it (all of ddp's, zero's and fsdp's; "
                   "hsdp's across the replicas; ddp's across tensor-parallel groups), the others the bandwidth "
                   "above.\n",
                   po.inter_node.all_reduce, po.inter_node.all_gather, po.inter_node.reduce_scatter,
                   po.inter_node.source.c_str());
  else if (several_nodes)
    o += "- Between nodes: not given (--comm-inter RUN.h5, a `lorabench comm` run with one rank per node): the "
         "bandwidth above is used for every collective, those that cross nodes too.\n";
  if (po.gpu) {
    o += strformat("- GPU: %s, %s available for a run; %d on this node. reserved = tensor peak + what the caching "
                   "allocator holds beyond the tensors at the peak (%s, measured by the probe); it must fit in the "
                   "GPU's memory, split over the ranks sharing the GPU, whose time it also splits.\n",
                   po.gpu_name.c_str(), b(po.gpu_available).c_str(), po.gpus_per_node,
                   probe ? format_bytes(double(probe->slack_bytes)).c_str() : "not measured without the probe");
  } else {
    o += strformat("- This node: %d usable CPUs, %s available; ranks sharing the CPUs are slowed by ranks/node x "
                   "threads / CPUs when above 1. RSS = tensor peak + this process's own footprint (%s).\n",
                   po.node_cpus, format_bytes(double(sys::memory_available_bytes())).c_str(),
                   format_bytes(double(sys::current_rss())).c_str());
  }
  for (const auto& r : rows)
    if (!r.note.empty()) o += "- " + r.strategy + " on " + std::to_string(r.world) + ": " + r.note + "\n";
  // The meshes ranked: for each number of ranks, the rows that fit by predicted step time.
  if (probe) {
    std::map<int, std::vector<const PlanRow*>> by_world;
    for (const auto& r : rows)
      if (r.fits && std::isfinite(r.step_s) && r.step_s > 0) by_world[r.world].push_back(&r);
    for (auto& [w, rs] : by_world) {
      if (rs.size() < 2) continue;
      std::stable_sort(rs.begin(), rs.end(), [](const PlanRow* a, const PlanRow* b) { return a->step_s < b->step_s; });
      std::string line = strformat("- Ranked on %d ranks (predicted step, fitting rows): ", w);
      for (size_t i = 0; i < rs.size(); ++i)
        line += strformat("%s%zu. %s %.3f s", i ? ", " : "", i + 1, rs[i]->strategy.c_str(), rs[i]->step_s);
      o += line + "\n";
    }
  }
  return o;
}

int64_t memory_for_fit_checks(const RunConfig& c, int64_t measured) {
  return c.fault.memory_available_mb > 0 ? int64_t(c.fault.memory_available_mb) << 20 : measured;
}

void check_fits_or_throw(const RunConfig& c, int world, int ranks_sharing, int64_t available, const std::string& where,
                         int nodes) {
  if (available < 0) return;
  const model::ModelShape shape = model_shape_of(c);
  const model::ModelLayout layout = layout_of(c, shape);
  // hsdp: the model state is sharded over a shard group (world / replicas ranks) only.
  const int replicas = c.parallel.strategy != "hsdp" ? 1 : c.parallel.dp_replicate > 0 ? c.parallel.dp_replicate
                                                                                        : std::max(1, nodes);
  const strategy::MemoryPrediction ms =
      strategy::predict_model_state(c.parallel.strategy, layout, dtype_of(c), std::max(1, world / replicas));
  const int64_t act = activation_lower_bound(c);
  const int64_t need = ms.total() + act;
  const data::BatchGeometry geo = batch_geometry_of(c, world);
  const int64_t per_rank = available / std::max(1, ranks_sharing);
  if (need <= per_rank) return;
  throw ConfigError(strformat(
      "this run cannot fit: each rank needs at least %s (model state %s = %s, activations of %d x %d tokens at "
      "least %s), and %s has %s available for %d rank%s (%s each). Lower data.seq_len or "
      "train.micro_batch, set model.activation_checkpointing = true, shard with parallel.strategy = fsdp, or use "
      "more nodes; `lorabench plan` predicts each option.",
      format_bytes(double(need)).c_str(), format_bytes(double(ms.total())).c_str(), ms.formula.c_str(),
      geo.micro_batch, geo.seq_len, format_bytes(double(act)).c_str(), where.c_str(),
      format_bytes(double(available)).c_str(), ranks_sharing, ranks_sharing == 1 ? "" : "s",
      format_bytes(double(per_rank)).c_str()));
}

void write_prediction(io::RunFileWriter& run, const PlanRow& p, bool cuda, const std::string& how) {
  run.write_summary("predicted_tensor_peak_bytes", double(p.tensor_peak));
  run.write_summary("predicted_activation_bytes", double(p.activations));
  if (cuda)
    run.write_summary("predicted_reserved_bytes", double(p.reserved));
  else
    run.write_summary("predicted_rss_bytes", double(p.rss));
  run.write_summary("predicted_step_time_s", p.step_s);
  run.write_summary("predicted_compute_s", p.compute_s);
  run.write_summary("predicted_comm_s", p.comm_s);
  run.write_summary("predicted_tokens_per_s", p.tokens_per_s);
  run.write_summary("predicted_how", how);
}

}  // namespace lorabench::train
