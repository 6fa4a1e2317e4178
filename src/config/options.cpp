#include "lorabench/config/options.hpp"

#include <boost/program_options.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"

namespace po = boost::program_options;

namespace lorabench {

namespace {

// ---- value converters: strict, with messages that say what was expected -------------------------

[[noreturn]] void bad(const std::string& msg) { throw std::invalid_argument(msg); }

int64_t to_int(const std::string& v, int64_t lo, int64_t hi) {
  std::string s = trim(v);
  if (s.empty()) bad("expected an integer, got an empty value");
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE) bad("expected an integer, got \"" + s + "\"");
  if (x < lo || x > hi) {
    if (hi == std::numeric_limits<int>::max()) bad("must be >= " + std::to_string(lo) + ", got " + s);
    bad("must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + s);
  }
  return x;
}

double to_float(const std::string& v, double lo, double hi, bool lo_open = false, bool hi_open = false) {
  std::string s = trim(v);
  if (s.empty()) bad("expected a number, got an empty value");
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(s.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(x)) bad("expected a finite number, got \"" + s + "\"");
  bool below = lo_open ? !(x > lo) : !(x >= lo);
  bool above = hi_open ? !(x < hi) : !(x <= hi);
  if (below || above) {
    std::string range = std::string(lo_open ? "(" : "[") + strformat("%g", lo) + ", " +
                        (std::isinf(hi) ? "inf" : strformat("%g", hi)) + (hi_open || std::isinf(hi) ? ")" : "]");
    bad("must be in " + range + ", got " + s);
  }
  return x;
}

bool to_bool(const std::string& v) {
  std::string s = trim(v);
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  if (s == "true" || s == "1" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return false;
  bad("expected true or false, got \"" + trim(v) + "\"");
}

std::string to_enum(const std::string& v, const std::vector<std::string>& choices) {
  std::string s = trim(v);
  for (const auto& c : choices)
    if (s == c) return s;
  bad("expected one of " + join(choices, "|") + ", got \"" + s + "\"");
}

std::string fmt_float(double x) { return strformat("%.10g", x); }
std::string fmt_bool(bool b) { return b ? "true" : "false"; }

// model::preset_names(), which this layer does not link (Qwen3Shape.ThePresetKeyOffersEveryPreset checks).
const std::vector<std::string> kPresets = {"tiny",       "small",      "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b",
                                           "qwen2.5-7b", "qwen3-tiny", "qwen3-0.6b",   "qwen3-1.7b",   "qwen3-4b",
                                           "qwen3-8b",   "qwen3-14b",  "qwen3-32b",  "qwen3.5-tiny",
                                           "qwen3.5-0.8b", "qwen3.5-2b", "qwen3.5-4b", "qwen3.5-9b", "qwen3.5-27b"};
// model::proj_short_name's names: the attention's and MLP's projections, then Qwen3.5's linear-attention ones.
const std::vector<std::string> kLoraTargets = {"q",           "k",         "v",         "o",         "gate",     "up",
                                               "down",        "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
                                               "out_proj"};

// ---- table builders -------------------------------------------------------------------------------

template <class S, class T>
using Member = T S::*;
template <class S>
using Section = S RunConfig::*;

template <class S>
OptionSpec int_opt(const char* key, Section<S> sec, Member<S, int> m, int def, int lo, int hi, const char* help) {
  return {key, "int", std::to_string(def), help,
          [=](RunConfig& c, const std::string& v) { (c.*sec).*m = static_cast<int>(to_int(v, lo, hi)); },
          [=](const RunConfig& c) { return std::to_string((c.*sec).*m); }};
}

template <class S>
OptionSpec float_opt(const char* key, Section<S> sec, Member<S, double> m, const char* def, double lo, double hi,
                     bool lo_open, const char* help) {
  return {key, "float", def, help,
          [=](RunConfig& c, const std::string& v) { (c.*sec).*m = to_float(v, lo, hi, lo_open, false); },
          [=](const RunConfig& c) { return fmt_float((c.*sec).*m); }};
}

template <class S>
OptionSpec bool_opt(const char* key, Section<S> sec, Member<S, bool> m, bool def, const char* help) {
  return {key, "bool", fmt_bool(def), help,
          [=](RunConfig& c, const std::string& v) { (c.*sec).*m = to_bool(v); },
          [=](const RunConfig& c) { return fmt_bool((c.*sec).*m); }};
}

template <class S>
OptionSpec string_opt(const char* key, Section<S> sec, Member<S, std::string> m, const char* def, const char* help) {
  return {key, "string", def, help, [=](RunConfig& c, const std::string& v) { (c.*sec).*m = trim(v); },
          [=](const RunConfig& c) { return (c.*sec).*m; }};
}

template <class S>
OptionSpec enum_opt(const char* key, Section<S> sec, Member<S, std::string> m, std::vector<std::string> choices,
                    const char* def, const char* help) {
  std::string type = join(choices, "|");
  return {key, type, def, help,
          [=](RunConfig& c, const std::string& v) { (c.*sec).*m = to_enum(v, choices); },
          [=](const RunConfig& c) { return (c.*sec).*m; }};
}

template <class S>
OptionSpec list_opt(const char* key, Section<S> sec, Member<S, std::vector<std::string>> m, const char* def,
                    const char* help) {
  return {key, "list", def, help,
          [=](RunConfig& c, const std::string& v) { (c.*sec).*m = split(v, ','); },
          [=](const RunConfig& c) { return join((c.*sec).*m, ","); }};
}

std::vector<OptionSpec> build_table() {
  using RC = RunConfig;
  const double inf = std::numeric_limits<double>::infinity();
  const int imax = std::numeric_limits<int>::max();
  std::vector<OptionSpec> t;

  // [run]
  t.push_back(string_opt("run.name", &RC::run, &RunSection::name, "",
                         "run directory name under output_dir; empty: <input stem>[-<strategy>]-n<ranks>, numbered (-2, -3, ...) when taken"));
  t.push_back(bool_opt("run.predict", &RC::run, &RunSection::predict, true,
                       "probe 1- and 2-layer models at start and record the planner's predicted memory and step "
                       "time beside the measurement (lorabench plan; a few seconds)"));
  t.push_back(string_opt("run.output_dir", &RC::run, &RunSection::output_dir, "outputs",
                         "directory that receives <name>/run.h5, checkpoints/ and adapter/"));
  t.push_back({"run.seed", "uint64", "1234", "seed of model init, data order, synthetic tokens and dropout",
               [](RC& c, const std::string& v) {
                 c.run.seed = static_cast<uint64_t>(to_int(v, 0, std::numeric_limits<int64_t>::max()));
               },
               [](const RC& c) { return std::to_string(c.run.seed); }});
  t.push_back(int_opt("run.steps", &RC::run, &RunSection::steps, 20, 1, imax, "optimizer steps per trial"));
  t.push_back(int_opt("run.warmup_steps", &RC::run, &RunSection::warmup_steps, 2, 0, imax,
                      "benchmark warm-up steps, excluded from the summary means"));
  t.push_back(int_opt("run.repeat", &RC::run, &RunSection::repeat, 1, 1, 1000,
                      "trials; model, optimizer and data are re-created for each"));
  t.push_back(int_opt("run.log_every", &RC::run, &RunSection::log_every, 1, 1, imax,
                      "steps between progress lines and run-file flushes"));
  t.push_back(bool_opt("run.quiet", &RC::run, &RunSection::quiet, false, "no progress lines (for CI)"));
  t.push_back(bool_opt("run.overwrite", &RC::run, &RunSection::overwrite, false,
                       "replace an existing run directory (default: refuse); never one a live run holds"));

  // [model]
  t.push_back(enum_opt("model.preset", &RC::model, &ModelSection::preset, kPresets, "qwen2.5-0.5b",
                       "architecture preset (used when model.path is empty)"));
  t.push_back(string_opt("model.path", &RC::model, &ModelSection::path, "",
                         "Hugging Face snapshot directory (config.json + *.safetensors); empty = random init"));
  t.push_back(enum_opt("model.dtype", &RC::model, &ModelSection::dtype, {"fp32", "bf16"}, "bf16",
                       "weights and activations; norms, softmax, loss and LoRA state stay fp32"));
  t.push_back(bool_opt("model.activation_checkpointing", &RC::model, &ModelSection::activation_checkpointing, false,
                       "keep only each decoder layer's input and recompute the layer in backward"));
  t.push_back(bool_opt("model.fused_head", &RC::model, &ModelSection::fused_head, true,
                       "vocabulary-chunked LM head + loss; false = the unfused reference (full logits, "
                       "more memory) to check numerics"));
  t.push_back(bool_opt("model.fused_kernels", &RC::model, &ModelSection::fused_kernels, true,
                       "lorabench's fused kernels for RMSNorm's forward, RoPE, SwiGLU and the head's softmax (CPU "
                       "kernels on the CPU, CUDA kernels on a GPU); false = the device-generic ATen compositions "
                       "(to compare the two)"));
  t.push_back(enum_opt("model.cuda_attention", &RC::model, &ModelSection::cuda_attention,
                       {"auto", "flash", "efficient"}, "auto",
                       "attention kernel on a GPU: flash = FlashAttention-2 (bf16 only; key/value heads as they "
                       "are), efficient = the memory-efficient kernel (fp32 and bf16; key/value heads repeated to "
                       "the query heads), auto = flash for bf16, efficient for fp32"));
  t.push_back(enum_opt("model.cpu_attention", &RC::model, &ModelSection::cpu_attention, {"auto", "flash", "blocked"},
                       "auto",
                       "attention kernel on the CPU: blocked = lorabench's (bf16 only; needs AVX-512 BF16), flash "
                       "= libtorch's CPU flash kernel, auto = blocked for bf16 where the CPU has AVX-512 BF16, "
                       "flash otherwise"));

  // [lora]
  t.push_back(bool_opt("lora.enabled", &RC::lora, &LoraSection::enabled, true,
                       "LoRA adapters; false = full fine-tuning of every weight"));
  t.push_back(int_opt("lora.r", &RC::lora, &LoraSection::r, 16, 1, 4096, "LoRA rank"));
  t.push_back(float_opt("lora.alpha", &RC::lora, &LoraSection::alpha, "32", 0, inf, true,
                        "LoRA alpha; scaling = alpha/r (alpha/sqrt(r) with rslora)"));
  t.push_back({"lora.dropout", "float", "0", "dropout probability on the LoRA branch input, in [0, 1)",
               [](RC& c, const std::string& v) { c.lora.dropout = to_float(v, 0, 1, false, true); },
               [](const RC& c) { return fmt_float(c.lora.dropout); }});
  t.push_back({"lora.targets", "list", "q,k,v,o,gate,up,down",
               "projections that get adapters: any of q,k,v,o,gate,up,down and, in Qwen3.5's linear-attention "
               "layers, in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,out_proj",
               [](RC& c, const std::string& v) {
                 auto items = split(v, ',');
                 if (items.empty()) bad("expected at least one of " + join(kLoraTargets, ","));
                 std::set<std::string> seen;
                 for (const auto& x : items) {
                   if (std::find(kLoraTargets.begin(), kLoraTargets.end(), x) == kLoraTargets.end())
                     bad("unknown target \"" + x + "\" (expected any of " + join(kLoraTargets, ",") + ")");
                   if (!seen.insert(x).second) bad("target \"" + x + "\" listed twice");
                 }
                 c.lora.targets = items;
               },
               [](const RC& c) { return join(c.lora.targets, ","); }});
  t.push_back(bool_opt("lora.rslora", &RC::lora, &LoraSection::rslora, false, "rank-stabilised scaling alpha/sqrt(r)"));
  t.push_back(string_opt("lora.init_from", &RC::lora, &LoraSection::init_from, "",
                         "PEFT adapter directory to start from (r, alpha, rslora, targets must match); empty = "
                         "PEFT's init (A Kaiming-uniform, B zero)"));

  // [data]
  t.push_back(enum_opt("data.format", &RC::data, &DataSection::format, {"auto", "alpaca", "chat", "synthetic"},
                       "synthetic", "dataset format; synthetic = seeded random tokens"));
  t.push_back(string_opt("data.path", &RC::data, &DataSection::path, "", "dataset file: JSONL or a JSON array"));
  t.push_back(string_opt("data.tokenizer", &RC::data, &DataSection::tokenizer, "",
                         "tokenizer.json (empty: model.path's, else the bundled tokenizer of the model's family, "
                         "Qwen2.5 or Qwen3)"));
  t.push_back(enum_opt("data.chat_template", &RC::data, &DataSection::chat_template, {"auto", "qwen2.5", "qwen3"},
                       "auto", "chat template of alpaca and chat data; auto = the model family's"));
  t.push_back(bool_opt("data.enable_thinking", &RC::data, &DataSection::enable_thinking, true,
                       "qwen3 template: keep the reasoning (think blocks) of the final turns and train it; false trains "
                       "the non-thinking mode (reasoning dropped, the empty think block is prompt)"));
  t.push_back(int_opt("data.seq_len", &RC::data, &DataSection::seq_len, 256, 2, 1 << 20, "tokens per sequence"));
  t.push_back(bool_opt("data.pack", &RC::data, &DataSection::pack, false, "pack examples into full sequences"));
  t.push_back(bool_opt("data.shuffle", &RC::data, &DataSection::shuffle, true, "reshuffle the order every epoch"));
  t.push_back(enum_opt("data.on_bad_record", &RC::data, &DataSection::on_bad_record, {"error", "skip"}, "error",
                       "a malformed record stops the run (error) or is skipped and counted (skip)"));
  t.push_back(string_opt("data.eval_path", &RC::data, &DataSection::eval_path, "",
                         "held-out dataset for train.eval_every (same format as data.path)"));
  t.push_back(float_opt("data.eval_fraction", &RC::data, &DataSection::eval_fraction, "0", 0, 0.5, false,
                        "hold out the last fraction of data.path's records for evaluation instead of data.eval_path"));
  t.push_back(int_opt("data.eval_samples", &RC::data, &DataSection::eval_samples, 0, 0, 1 << 30,
                      "samples per evaluation; 0 = the whole held-out set (synthetic data: required, a held-out "
                      "stream of random tokens)"));

  // [train]
  t.push_back(int_opt("train.micro_batch", &RC::train, &TrainSection::micro_batch, 1, 1, 1 << 20,
                      "sequences per rank per micro-step"));
  t.push_back(int_opt("train.grad_accum", &RC::train, &TrainSection::grad_accum, 1, 1, 1 << 20,
                      "micro-steps per optimizer step (global batch = micro_batch x grad_accum x world size)"));
  t.push_back(float_opt("train.lr", &RC::train, &TrainSection::lr, "1e-4", 0, inf, false, "peak learning rate"));
  t.push_back({"train.betas", "float,float", "0.9,0.999", "AdamW betas, each in [0, 1)",
               [](RC& c, const std::string& v) {
                 auto p = split(v, ',');
                 if (p.size() != 2) bad("expected two numbers \"beta1,beta2\", got \"" + trim(v) + "\"");
                 c.train.beta1 = to_float(p[0], 0, 1, false, true);
                 c.train.beta2 = to_float(p[1], 0, 1, false, true);
               },
               [](const RC& c) { return fmt_float(c.train.beta1) + "," + fmt_float(c.train.beta2); }});
  t.push_back(float_opt("train.eps", &RC::train, &TrainSection::eps, "1e-8", 0, inf, true, "AdamW epsilon"));
  t.push_back(float_opt("train.weight_decay", &RC::train, &TrainSection::weight_decay, "0", 0, inf, false,
                        "decoupled weight decay (never on biases and norm weights)"));
  t.push_back(enum_opt("train.schedule", &RC::train, &TrainSection::schedule, {"constant", "cosine", "linear"},
                       "constant", "learning-rate schedule after warm-up"));
  t.push_back(int_opt("train.warmup_steps", &RC::train, &TrainSection::warmup_steps, 0, 0, imax,
                      "linear LR warm-up steps"));
  t.push_back(float_opt("train.min_lr", &RC::train, &TrainSection::min_lr, "0", 0, inf, false,
                        "LR floor of the cosine and linear schedules"));
  t.push_back(float_opt("train.max_grad_norm", &RC::train, &TrainSection::max_grad_norm, "1.0", 0, inf, false,
                        "clip the global gradient norm to this value; 0 = off"));
  t.push_back(enum_opt("train.on_nonfinite", &RC::train, &TrainSection::on_nonfinite, {"stop", "skip"}, "stop",
                       "a NaN/Inf loss or gradient norm stops every rank, or skips the update on every rank"));
  t.push_back(enum_opt("train.on_empty_step", &RC::train, &TrainSection::on_empty_step, {"stop", "skip"}, "stop",
                       "a step whose global batch has no token to train on (every answer truncated away by "
                       "data.seq_len) stops the run (exit 2), or is skipped without an update; either way the run "
                       "is INVALID"));
  t.push_back(int_opt("train.eval_every", &RC::train, &TrainSection::eval_every, 0, 0, imax,
                      "held-out loss and perplexity every N optimizer steps and after the last (0 = never)"));

  // [parallel]
  t.push_back(enum_opt("parallel.strategy", &RC::parallel, &ParallelSection::strategy,
                       {"single", "ddp", "zero1", "zero2", "fsdp", "hsdp"}, "single",
                       "where parameters, gradients and optimizer state live (hsdp: fsdp inside each shard group "
                       "of the mesh, gradients all-reduced across the replicas; docs/strategies.md)"));
  t.push_back(enum_opt("parallel.backend", &RC::parallel, &ParallelSection::backend, {"auto", "mpi", "nccl"}, "auto",
                       "communicator: auto = nccl on GPUs, mpi on CPUs; mpi on GPUs stages buffers through pinned "
                       "host memory (several ranks may then share one GPU)"));
  t.push_back(enum_opt("parallel.device", &RC::parallel, &ParallelSection::device, {"auto", "cpu", "cuda"}, "auto",
                       "where each rank's tensors live: auto = the GPU of its local rank when the build has CUDA and "
                       "one is visible, else the CPU (docs/gpu.md)"));
  t.push_back(int_opt("parallel.threads_per_rank", &RC::parallel, &ParallelSection::threads_per_rank, 1, 1, 1024,
                      "intra-op threads per rank (libtorch and BLAS)"));
  t.push_back(float_opt("parallel.bucket_mb", &RC::parallel, &ParallelSection::bucket_mb, "25", 0, inf, true,
                        "DDP gradient bucket size in MiB"));
  t.push_back(enum_opt("parallel.grad_sync", &RC::parallel, &ParallelSection::grad_sync, {"auto", "every", "last"},
                       "auto", "gradient communication with accumulation: every micro-step or the last only"));
  t.push_back(bool_opt("parallel.reshard_after_forward", &RC::parallel, &ParallelSection::reshard_after_forward,
                       true, "FSDP: free each layer's gathered weights after its forward"));
  t.push_back(bool_opt("parallel.prefetch", &RC::parallel, &ParallelSection::prefetch, true,
                       "FSDP: start gathering the next layer's weights before computing this one"));
  t.push_back(bool_opt("parallel.prefetch_within_peak", &RC::parallel, &ParallelSection::prefetch_within_peak, true,
                       "FSDP: issue a prefetch only when the rank's tensor memory plus the gathered layer stays "
                       "within the highest peak seen so far (earlier steps and this one), so overlap never raises "
                       "peak memory; false prefetches every layer"));
  t.push_back(int_opt("parallel.emulate_nodes", &RC::parallel, &ParallelSection::emulate_nodes, 0, 0, 4096,
                      "split each host's ranks into this many emulated nodes (0 = real topology)"));
  t.push_back(int_opt("parallel.dp_replicate", &RC::parallel, &ParallelSection::dp_replicate, 0, 0, 65536,
                      "hsdp: replica groups of the data-parallel mesh (dp_replicate x dp_shard = ranks); each shard "
                      "group is placed inside a node; 0 = one replica per node"));

  t.push_back(int_opt("parallel.tp", &RC::parallel, &ParallelSection::tp, 1, 1, 4096,
                      "tensor-parallel ranks per group (Megatron style, inside a node): each rank holds whole heads "
                      "and a slice of the MLP, the embedding and head by vocabulary rows; the groups run "
                      "parallel.strategy (single: one group; ddp: data parallel across groups); LoRA on Qwen2/Qwen3 "
                      "(docs/strategies.md)"));

  // [checkpoint]
  t.push_back(int_opt("checkpoint.every", &RC::checkpoint, &CheckpointSection::every, 0, 0, imax,
                      "steps between checkpoints; 0 = none"));
  t.push_back(int_opt("checkpoint.keep_last", &RC::checkpoint, &CheckpointSection::keep_last, 2, 0, imax,
                      "complete checkpoints to keep; 0 = all"));
  t.push_back(string_opt("checkpoint.resume", &RC::checkpoint, &CheckpointSection::resume, "none",
                         "none, latest, auto (latest when the run directory has checkpoints, else step 0: "
                         "what a requeued batch job uses), or the path of a checkpoint file"));
  t.push_back(bool_opt("checkpoint.save_adapter", &RC::checkpoint, &CheckpointSection::save_adapter, true,
                       "write the LoRA adapter in PEFT format at the end of training"));

  // [profile]
  t.push_back(list_opt("profile.papi_events", &RC::profile, &ProfileSection::papi_events, "PAPI_TOT_INS,PAPI_TOT_CYC",
                       "PAPI events counted per phase"));
  t.push_back(list_opt("profile.papi_fallback", &RC::profile, &ProfileSection::papi_fallback,
                       "perf::TASK-CLOCK,perf::PAGE-FAULTS,perf::CONTEXT-SWITCHES",
                       "events tried when configured ones are unavailable"));
  t.push_back(bool_opt("profile.trace", &RC::profile, &ProfileSection::trace, false,
                       "write a Chrome trace JSON per rank (costs time)"));
  t.push_back(float_opt("profile.peak_gflops", &RC::profile, &ProfileSection::peak_gflops, "0", 0, inf, false,
                        "per-rank peak GFLOP/s for MFU; 0 = measure with a GEMM calibration at start"));
  t.push_back(float_opt("profile.mem_bandwidth_gbs", &RC::profile, &ProfileSection::mem_bandwidth_gbs, "0", 0, inf,
                        false, "per-rank memory bandwidth GB/s for the roofline; 0 = measure with a triad on every rank "
                        "at start"));

  // [fault]
  t.push_back(int_opt("fault.nan_at_step", &RC::fault, &FaultSection::nan_at_step, -1, -1, imax,
                      "inject a NaN loss at this step (-1 = never)"));
  t.push_back(int_opt("fault.nan_rank", &RC::fault, &FaultSection::nan_rank, 0, 0, imax, "rank that injects the NaN"));
  t.push_back(int_opt("fault.kill_rank", &RC::fault, &FaultSection::kill_rank, -1, -1, imax,
                      "rank that SIGKILLs itself (-1 = none)"));
  t.push_back(int_opt("fault.kill_at_step", &RC::fault, &FaultSection::kill_at_step, -1, -1, imax,
                      "step at whose start kill_rank dies"));
  t.push_back(int_opt("fault.signal_rank", &RC::fault, &FaultSection::signal_rank, -1, -1, imax,
                      "rank that sends itself fault.signal (-1 = none): a preemption as Slurm delivers it"));
  t.push_back(int_opt("fault.signal_at_step", &RC::fault, &FaultSection::signal_at_step, -1, -1, imax,
                      "step at whose start signal_rank signals itself"));
  t.push_back(enum_opt("fault.signal", &RC::fault, &FaultSection::signal, {"usr1", "term"}, "usr1",
                       "the signal signal_rank sends itself: SIGUSR1 or SIGTERM"));
  t.push_back(bool_opt("fault.signal_again", &RC::fault, &FaultSection::signal_again, false,
                       "signal_rank signals itself once more while the stop checkpoint is being written"));
  t.push_back(int_opt("fault.slow_rank", &RC::fault, &FaultSection::slow_rank, -1, -1, imax,
                      "rank whose compute is slowed by slow_factor (-1 = none)"));
  t.push_back(float_opt("fault.slow_factor", &RC::fault, &FaultSection::slow_factor, "1", 1, inf, false,
                        "slow_rank's forward, backward and optimizer take this many times as long (it sleeps "
                        "factor - 1 times each measured stretch of compute)"));
  t.push_back(float_opt("fault.data_delay_ms", &RC::fault, &FaultSection::data_delay_ms, "0", 0, inf, false,
                        "every rank sleeps this long per micro-batch while building its batches (a slow data "
                        "pipeline)"));
  t.push_back(float_opt("fault.comm_delay_ms", &RC::fault, &FaultSection::comm_delay_ms, "0", 0, inf, false,
                        "every data-plane collective completes this much later than the backend completed it "
                        "(a slow link; always exposed)"));
  t.push_back(int_opt("fault.drift_rank", &RC::fault, &FaultSection::drift_rank, -1, -1, imax,
                      "rank whose own trainable state moves by one ulp after each trial's final gather (-1 = none): "
                      "a write the gather missed; the verdict's replicas_identical or shards_consistent check must "
                      "then fail"));
  t.push_back(int_opt("fault.memory_available_mb", &RC::fault, &FaultSection::memory_available_mb, 0, 0, imax,
                      "the memory (MiB) that the fit checks take this node, or its GPU, to have (0 = what it has): "
                      "a small machine, to see a run refused before it starts"));
  return t;
}

using Problem = ConfigProblems::Problem;

[[noreturn]] void throw_problems(const std::vector<Problem>& problems) {
  std::string msg = problems.size() == 1 ? "configuration error:" : "configuration errors:";
  for (const auto& p : problems) {
    msg += "\n  " + p.where + ": ";
    if (!p.key.empty()) msg += p.key + ": ";
    msg += p.message;
  }
  throw ConfigError(msg);
}

// Line numbers of keys and of every non-blank, non-comment line, so Boost's messages and ours can point
// at the line. Boost.ProgramOptions does the parsing; this scan only locates.
struct IniIndex {
  std::map<std::string, std::vector<int>> key_lines;  // "section.key" -> lines (more than one = duplicate)
  std::vector<std::pair<int, std::string>> bad_lines; // lines that are neither [section] nor key = value
};

IniIndex index_ini(const std::string& text) {
  IniIndex idx;
  std::istringstream in(text);
  std::string line, section;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    auto hash = line.find('#');
    std::string s = trim(hash == std::string::npos ? line : line.substr(0, hash));
    if (s.empty()) continue;
    if (s.front() == '[') {
      if (s.back() == ']') {
        section = trim(s.substr(1, s.size() - 2));
      } else {
        idx.bad_lines.emplace_back(n, trim(line));
      }
      continue;
    }
    auto eq = s.find('=');
    if (eq == std::string::npos || trim(s.substr(0, eq)).empty()) {
      idx.bad_lines.emplace_back(n, trim(line));
      continue;
    }
    std::string key = trim(s.substr(0, eq));
    idx.key_lines[section.empty() ? key : section + "." + key].push_back(n);
  }
  return idx;
}

}  // namespace

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = build_table();
  return table;
}

const OptionSpec* find_option(const std::string& key) {
  for (const auto& o : option_table())
    if (o.key == key) return &o;
  return nullptr;
}

RunConfig default_run_config() {
  RunConfig c;
  for (const auto& o : option_table()) {
    o.set(c, o.default_value);
    c.origin[o.key] = "default";
  }
  return c;
}

RunConfig parse_run_config(const std::string& path, const std::string& text,
                           const std::vector<std::string>& overrides) {
  RunConfig cfg = default_run_config();
  cfg.input_path = path;
  cfg.input_text = text;
  cfg.overrides = overrides;
  std::vector<Problem> problems;
  const std::string file = path.empty() ? "<input>" : path;

  if (!text.empty()) {
    IniIndex idx = index_ini(text);
    for (const auto& [line, content] : idx.bad_lines)
      problems.push_back({file + ":" + std::to_string(line), "",
                          "not a [section] header or key = value line: \"" + content + "\""});
    auto where = [&](const std::string& key) {
      auto it = idx.key_lines.find(key);
      return it == idx.key_lines.end() ? file : file + ":" + std::to_string(it->second.front());
    };
    for (const auto& [key, lines] : idx.key_lines) {
      if (lines.size() > 1)
        problems.push_back({file + ":" + std::to_string(lines[1]), key,
                            "set more than once (first on line " + std::to_string(lines[0]) + ")"});
    }
    if (problems.empty()) {
      po::options_description desc;
      for (const auto& o : option_table()) desc.add_options()(o.key.c_str(), po::value<std::string>());
      std::istringstream in(text);
      po::parsed_options parsed(&desc);
      try {
        parsed = po::parse_config_file(in, desc, /*allow_unregistered=*/true);
      } catch (const po::error& e) {
        problems.push_back({file, "", e.what()});
      }
      for (const auto& opt : parsed.options) {
        const std::string& key = opt.string_key;
        const OptionSpec* spec = find_option(key);
        if (opt.unregistered || spec == nullptr) {
          std::string hint;
          auto dot = key.find('.');
          if (dot == std::string::npos) hint = " (keys belong to a [section])";
          problems.push_back({where(key), key, "unknown key" + hint});
          continue;
        }
        const std::string value = opt.value.empty() ? std::string() : opt.value.front();
        try {
          spec->set(cfg, value);
          cfg.origin[key] = where(key);
        } catch (const std::invalid_argument& e) {
          problems.push_back({where(key), key, e.what()});
        }
      }
    }
  }

  for (const auto& ov : overrides) {
    auto eq = ov.find('=');
    if (eq == std::string::npos) {
      problems.push_back({"--set " + ov, "", "expected section.key=value"});
      continue;
    }
    std::string key = trim(ov.substr(0, eq));
    const OptionSpec* spec = find_option(key);
    if (spec == nullptr) {
      problems.push_back({"--set", key, "unknown key"});
      continue;
    }
    try {
      spec->set(cfg, ov.substr(eq + 1));
      cfg.origin[key] = "--set";
    } catch (const std::invalid_argument& e) {
      problems.push_back({"--set", key, e.what()});
    }
  }
  if (!problems.empty()) throw_problems(problems);
  return cfg;
}

std::vector<std::string> repeated_overrides(const std::vector<std::string>& overrides) {
  std::vector<std::string> order;                       // keys in the order of their first --set
  std::map<std::string, std::vector<std::string>> given;  // key -> every "--set key=value" of it
  for (const auto& ov : overrides) {
    const auto eq = ov.find('=');
    if (eq == std::string::npos) continue;  // parse_run_config reports it
    const std::string key = trim(ov.substr(0, eq));
    if (given[key].empty()) order.push_back(key);
    given[key].push_back("--set " + ov);
  }
  std::vector<std::string> out;
  for (const auto& key : order) {
    const auto& all = given[key];
    if (all.size() > 1) out.push_back(join(all, ", then ") + ": the last one is used");
  }
  return out;
}

void ConfigProblems::add(const std::string& key, const std::string& message) {
  const auto it = c_.origin.find(key);
  std::string where = it == c_.origin.end() ? "config" : it->second;
  if (where == "default") where = (c_.input_path.empty() ? "<input>" : c_.input_path) + " (default)";
  problems_.push_back({where, key, message});
}

void ConfigProblems::throw_if_any() const {
  if (!problems_.empty()) throw_problems(problems_);
}

void validate_run_config(const RunConfig& c, const ValidationContext& ctx) {
  ConfigProblems problems(c);
  auto add = [&](const std::string& key, const std::string& msg) { problems.add(key, msg); };
  const auto& p = c.parallel;
  if (p.strategy == "single" && ctx.world_size > p.tp)
    add("parallel.strategy", "single runs on one rank" + std::string(p.tp > 1 ? " per tensor-parallel group" : "") +
                                 " but the job has " + std::to_string(ctx.world_size) + " ranks (use ddp, zero1, "
                                 "zero2 or fsdp, or launch " + std::to_string(p.tp) + (p.tp > 1 ? " ranks)" : " rank)"));
  if (p.tp > 1) {
    if (ctx.world_size % p.tp != 0)
      add("parallel.tp", std::to_string(p.tp) + " tensor-parallel ranks per group do not divide the " +
                             std::to_string(ctx.world_size) + " ranks");
    if (p.strategy != "single" && p.strategy != "ddp")
      add("parallel.tp", "tensor parallelism combines with parallel.strategy single (one group) or ddp (data "
                         "parallel across the groups), not " + p.strategy);
    if (!c.lora.enabled)
      add("parallel.tp", "tensor parallelism trains LoRA adapters; full fine-tuning (lora.enabled = false) runs with "
                         "tp = 1");
    if (!c.model.fused_head)
      add("parallel.tp", "the unfused reference head (model.fused_head = false) needs the whole head on one rank; "
                         "tensor parallelism splits it by vocabulary rows");
  }
  if (p.backend == "nccl" && !ctx.nccl_built)
    add("parallel.backend", "nccl was asked for but this build has no NCCL backend (rebuild with "
                            "-DLORABENCH_WITH_NCCL=ON against a CUDA libtorch, or use mpi)");
  if (p.backend == "nccl" && ctx.nccl_built && !ctx.cuda_available)
    add("parallel.backend", "nccl was asked for but no CUDA device is available to this rank");
  if (p.backend == "nccl" && p.device == "cpu")
    add("parallel.backend", "nccl needs the model on CUDA devices but parallel.device = cpu (use mpi, or cuda)");
  if (p.device == "cuda" && !ctx.cuda_built)
    add("parallel.device", "cuda was asked for but this build has no CUDA path (build against a CUDA libtorch "
                           "with the CUDA toolkit, docs/build.md, or use cpu)");
  else if (p.device == "cuda" && !ctx.cuda_available)
    add("parallel.device", "cuda was asked for but this process sees no CUDA device (check nvidia-smi, "
                           "CUDA_VISIBLE_DEVICES and the job's --gpus / --gpus-per-task)");
  if (p.emulate_nodes > ctx.world_size)
    add("parallel.emulate_nodes", "cannot split " + std::to_string(ctx.world_size) + " ranks into " +
                                      std::to_string(p.emulate_nodes) + " nodes");
  if (p.dp_replicate > 0 && p.strategy != "hsdp")
    add("parallel.dp_replicate", "sets the replicas of hsdp's mesh, but parallel.strategy is " + p.strategy +
                                     " (set parallel.strategy = hsdp, or leave dp_replicate at 0)");
  if (p.strategy == "hsdp" && p.dp_replicate > 0 && ctx.world_size % p.dp_replicate != 0)
    add("parallel.dp_replicate", std::to_string(p.dp_replicate) + " replicas do not divide the " +
                                     std::to_string(ctx.world_size) + " ranks");
  if (c.model.cuda_attention == "flash" && c.model.dtype == "fp32")
    add("model.cuda_attention", "flash (FlashAttention-2) has no fp32 kernel; with model.dtype = fp32 use auto or "
                                "efficient, or set model.dtype = bf16");
  if (c.model.cpu_attention == "blocked" && c.model.dtype == "fp32")
    add("model.cpu_attention", "blocked is a bf16 kernel; with model.dtype = fp32 use auto or flash, or set "
                               "model.dtype = bf16");
  else if (c.model.cpu_attention == "blocked" && p.device != "cuda" && !ctx.cpu_blocked_attention)
    add("model.cpu_attention", "blocked needs a CPU with AVX-512 BF16 (and libtorch's brgemm for it); this one "
                               "has not: use auto or flash");
  if (!c.model.fused_head && (p.strategy == "fsdp" || p.strategy == "hsdp"))
    add("model.fused_head", "the unfused reference head needs the whole head on one rank; " + p.strategy +
                                " shards it (compare the paths with single or ddp)");
  if (c.run.warmup_steps >= c.run.steps)
    add("run.warmup_steps", "must be smaller than run.steps (" + std::to_string(c.run.steps) +
                                ") so at least one step is measured");
  if (c.train.min_lr > c.train.lr) add("train.min_lr", "is larger than train.lr");
  const bool synthetic = c.data.format == "synthetic";
  const bool held_out = !c.data.eval_path.empty() || c.data.eval_fraction > 0 || c.data.eval_samples > 0;
  if (c.train.eval_every > 0) {
    if (synthetic && c.data.eval_samples == 0)
      add("data.eval_samples", "train.eval_every with synthetic data needs data.eval_samples > 0");
    if (synthetic && (!c.data.eval_path.empty() || c.data.eval_fraction > 0))
      add("data.eval_path", "synthetic data evaluates on a held-out token stream: unset data.eval_path and "
                            "data.eval_fraction");
    if (!synthetic && c.data.eval_path.empty() && c.data.eval_fraction == 0)
      add("train.eval_every", "needs a held-out set: data.eval_path or data.eval_fraction");
    if (!c.data.eval_path.empty() && c.data.eval_fraction > 0)
      add("data.eval_fraction", "and data.eval_path are both set (choose one held-out set)");
  } else if (held_out) {
    add("train.eval_every", "is 0 but a held-out set is configured (data.eval_path, eval_fraction or eval_samples): "
                            "set train.eval_every");
  }
  if (!c.lora.enabled && !c.lora.init_from.empty())
    add("lora.init_from", "is set but lora.enabled = false trains no adapter");
  if (c.data.format == "synthetic" && !c.data.path.empty())
    add("data.path", "is set but data.format = synthetic ignores it (set data.format to auto, alpaca or chat)");
  if (c.data.format != "synthetic" && c.data.path.empty())
    add("data.path", "data.format = " + c.data.format + " needs a dataset file");
  if (c.fault.nan_at_step >= 0 && c.fault.nan_rank >= ctx.world_size)
    add("fault.nan_rank", "rank " + std::to_string(c.fault.nan_rank) + " does not exist in a job of " +
                              std::to_string(ctx.world_size) + " ranks");
  if (c.fault.kill_rank >= ctx.world_size)
    add("fault.kill_rank", "rank " + std::to_string(c.fault.kill_rank) + " does not exist in a job of " +
                               std::to_string(ctx.world_size) + " ranks");
  if ((c.fault.kill_rank >= 0) != (c.fault.kill_at_step >= 0))
    add("fault.kill_at_step", "fault.kill_rank and fault.kill_at_step must be set together");
  if (c.fault.signal_rank >= ctx.world_size)
    add("fault.signal_rank", "rank " + std::to_string(c.fault.signal_rank) + " does not exist in a job of " +
                                 std::to_string(ctx.world_size) + " ranks");
  if ((c.fault.signal_rank >= 0) != (c.fault.signal_at_step >= 0))
    add("fault.signal_at_step", "fault.signal_rank and fault.signal_at_step must be set together");
  if (c.fault.slow_rank >= ctx.world_size)
    add("fault.slow_rank", "rank " + std::to_string(c.fault.slow_rank) + " does not exist in a job of " +
                               std::to_string(ctx.world_size) + " ranks");
  if (c.fault.slow_rank >= 0 && c.fault.slow_factor == 1)
    add("fault.slow_factor", "fault.slow_rank is set but slow_factor is 1 (nothing would be slowed; set a factor > 1)");
  if (c.fault.slow_rank < 0 && c.fault.slow_factor != 1)
    add("fault.slow_rank", "fault.slow_factor is " + fmt_float(c.fault.slow_factor) +
                               " but no rank is chosen (set fault.slow_rank)");
  if (c.fault.drift_rank >= ctx.world_size)
    add("fault.drift_rank", "rank " + std::to_string(c.fault.drift_rank) + " does not exist in a job of " +
                                std::to_string(ctx.world_size) + " ranks");
  else if (c.fault.drift_rank >= 0 && ctx.world_size < 2 && (p.strategy == "single" || p.strategy == "ddp"))
    add("fault.drift_rank", "one rank of " + p.strategy + " has no other copy of the state to disagree with, so "
                            "the drift could not be seen (use 2 or more ranks, or a sharded strategy)");
  if (!c.run.name.empty() && (c.run.name.find('/') != std::string::npos || c.run.name == "." || c.run.name == ".."))
    add("run.name", "must be a plain directory name, got \"" + c.run.name + "\"");
  problems.throw_if_any();
}

std::vector<std::pair<std::string, std::string>> resolved_values(const RunConfig& c) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& o : option_table()) out.emplace_back(o.key, o.get(c));
  return out;
}

std::string effective_config_table(const RunConfig& c) {
  size_t kw = 3, vw = 5;
  for (const auto& o : option_table()) {
    kw = std::max(kw, o.key.size());
    vw = std::max(vw, std::min<size_t>(o.get(c).size(), 48));
  }
  std::string out = strformat("%-*s  %-*s  %s\n", int(kw), "key", int(vw), "value", "from");
  for (const auto& o : option_table()) {
    auto it = c.origin.find(o.key);
    std::string v = o.get(c);
    if (v.empty()) v = "\"\"";
    out += strformat("%-*s  %-*s  %s\n", int(kw), o.key.c_str(), int(vw), v.c_str(),
                     it == c.origin.end() ? "default" : it->second.c_str());
  }
  return out;
}

std::string options_help() {
  std::string out;
  std::string section;
  for (const auto& o : option_table()) {
    std::string s = o.key.substr(0, o.key.find('.'));
    if (s != section) {
      section = s;
      out += "\n  [" + section + "]\n";
    }
    std::string def = o.default_value.empty() ? "\"\"" : o.default_value;
    out += strformat("    %-34s %s (%s, default %s)\n", o.key.c_str(), o.help.c_str(), o.type.c_str(), def.c_str());
  }
  return out;
}

std::string options_markdown() {
  std::string out = "| key | type | default | meaning |\n| --- | --- | --- | --- |\n";
  for (const auto& o : option_table()) {
    std::string type = o.type;
    for (size_t i = 0; (i = type.find('|', i)) != std::string::npos; i += 2) type.replace(i, 1, "\\|");
    out += "| `" + o.key + "` | " + type + " | `" + o.default_value + "` | " + o.help + " |\n";
  }
  return out;
}

}  // namespace lorabench
