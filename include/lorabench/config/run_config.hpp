// RunConfig: the one validated description of a run. Parsed once from the input .ini file plus
// `--set section.key=value` overrides, validated once, then passed down as `const RunConfig&`.
//
// Every field is registered in the option table (options.hpp) with its type, default and meaning; the
// defaults below are applied from that table, so the table is the single source of truth. The field
// comments here only say what the value means to the code that reads it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lorabench {

struct RunSection {
  std::string name;        // run directory name under output_dir; empty = default_run_name() (config/paths.hpp)
  std::string output_dir;  // where runs are written
  uint64_t seed = 0;       // everything random derives from this (init, data, dropout)
  int steps = 0;           // optimizer steps per trial
  int warmup_steps = 0;    // benchmark warm-up steps excluded from the summary means
  int repeat = 0;          // trials: model, optimizer and data re-created for each
  int log_every = 0;       // progress line and run-file flush interval, in steps
  bool quiet = false;      // no progress lines (warnings and errors still print)
  bool overwrite = false;  // replace an existing run directory instead of refusing
  bool predict = true;     // record the planner's prediction (probe at start) beside the measurement
};

struct ModelSection {
  std::string preset;  // tiny | small | qwen2.5-0.5b | qwen2.5-1.5b | qwen2.5-3b | qwen2.5-7b
  std::string path;    // Hugging Face snapshot directory; empty = random init of the preset
  std::string dtype;   // fp32 | bf16 (weights and activations; LoRA state is always fp32)
  bool activation_checkpointing = false;  // recompute each decoder layer in backward
  bool fused_head = true;  // false: the unfused reference LM head + loss (numerics checks)
  bool fused_kernels = true;  // false: the device-generic ATen path on CPU too (what a GPU runs)
  std::string cuda_attention;  // auto | flash | efficient: the attention kernel on a GPU
  std::string cpu_attention;   // auto | flash | blocked: the attention kernel on the CPU
};

struct LoraSection {
  bool enabled = true;               // false = full fine-tuning of every weight
  int r = 0;
  double alpha = 0;
  double dropout = 0;                // on the LoRA branch input only
  std::vector<std::string> targets;  // subset of q,k,v,o,gate,up,down
  bool rslora = false;               // scaling alpha/sqrt(r) instead of alpha/r
  std::string init_from;             // a PEFT adapter directory to start from; empty = PEFT's init
};

struct DataSection {
  std::string format;         // auto | alpaca | chat | synthetic
  std::string path;           // dataset file (JSONL or JSON array); unused for synthetic
  std::string tokenizer;      // tokenizer.json; empty = the model snapshot's or the bundled one of its family
  std::string chat_template;  // auto | qwen2.5 | qwen3 (auto: the model family's)
  bool enable_thinking = true;  // qwen3: train the thinking mode (reasoning kept) or the non-thinking one
  int seq_len = 0;            // tokens per sample (truncation / padding / packing length)
  bool pack = false;          // pack several examples into one sequence
  bool shuffle = true;        // reshuffle the sample order every epoch
  std::string on_bad_record;  // error | skip
  std::string eval_path;      // held-out dataset file (same format as path); empty = none
  double eval_fraction = 0;   // hold out the last fraction of path's records instead (0 = none)
  int eval_samples = 0;       // samples per evaluation; 0 = the whole held-out set (synthetic: required)
};

struct TrainSection {
  int micro_batch = 0;     // samples per rank per micro-step
  int grad_accum = 0;      // micro-steps per optimizer step
  double lr = 0;           // peak learning rate
  double beta1 = 0, beta2 = 0;
  double eps = 0;
  double weight_decay = 0;
  std::string schedule;    // constant | cosine | linear
  int warmup_steps = 0;    // LR warm-up steps (linear from 0)
  double min_lr = 0;       // floor of cosine / linear decay
  double max_grad_norm = 0;  // clip by global norm; 0 = off
  std::string on_nonfinite;  // stop | skip
  std::string on_empty_step;  // stop | skip: a step whose global batch has no token to train on
  int eval_every = 0;        // evaluate the held-out loss every N optimizer steps and after the last; 0 = never
};

struct ParallelSection {
  std::string strategy;         // single | ddp | zero1 | zero2 | fsdp | hsdp
  std::string backend;          // auto | mpi | nccl
  std::string device;           // auto | cpu | cuda
  int threads_per_rank = 0;     // intra-op threads (libtorch and BLAS) per rank
  double bucket_mb = 0;         // DDP gradient bucket size, MiB
  std::string grad_sync;        // auto | every | last (gradient accumulation)
  bool reshard_after_forward = true;  // FSDP: free gathered weights after each layer's forward
  bool prefetch = true;         // FSDP: gather the next layer while computing this one
  bool prefetch_within_peak = true;  // FSDP: only prefetches that keep tensor memory within the peak so far
  int emulate_nodes = 0;        // split one host's ranks into this many emulated nodes (0/1 = off)
  int dp_replicate = 0;         // hsdp: replica groups of the data-parallel mesh (0 = one per node)
  int tp = 1;                   // tensor-parallel ranks per group (1: none)
};

struct CheckpointSection {
  int every = 0;       // steps between checkpoints; 0 = none
  int keep_last = 0;   // complete checkpoints kept; 0 = keep all
  std::string resume;  // none | latest | PATH
  bool save_adapter = true;  // write the PEFT adapter at the end of training
};

struct ProfileSection {
  std::vector<std::string> papi_events;    // counted per phase when available
  std::vector<std::string> papi_fallback;  // tried when a configured event is unavailable
  bool trace = false;                      // Chrome trace JSON per rank
  double peak_gflops = 0;                  // per-rank peak for MFU; 0 = measure at startup
  double mem_bandwidth_gbs = 0;            // per-rank memory bandwidth for the roofline; 0 = measure at startup
};

struct FaultSection {
  int nan_at_step = -1;  // inject a NaN loss at this step ...
  int nan_rank = 0;      // ... on this rank
  int kill_rank = -1;    // SIGKILL this rank ...
  int kill_at_step = -1; // ... at the start of this step
  int signal_rank = -1;      // this rank sends itself `signal` ...
  int signal_at_step = -1;   // ... at the start of this step
  std::string signal = "usr1";  // usr1 | term
  bool signal_again = false;    // ... and once more while the stop checkpoint is written
  int slow_rank = -1;        // this rank's forward, backward and optimizer compute ...
  double slow_factor = 1;    // ... take this many times as long (a sleep of (factor - 1) x the measured compute)
  double data_delay_ms = 0;  // every rank sleeps this long per micro-batch while building its batches
  double comm_delay_ms = 0;  // every data-plane collective completes this much later than the backend did
  int drift_rank = -1;       // this rank's own trainable state moves one ulp after each trial's final gather
  int memory_available_mb = 0;  // the memory the fit checks see, per node or GPU (0 = what it really has)
};

struct RunConfig {
  RunSection run;
  ModelSection model;
  LoraSection lora;
  DataSection data;
  TrainSection train;
  ParallelSection parallel;
  CheckpointSection checkpoint;
  ProfileSection profile;
  FaultSection fault;

  // Where the values came from.
  std::string input_path;               // the .ini file ("" when none)
  std::string input_text;               // its original text
  std::vector<std::string> overrides;   // the --set arguments, in order
  // key -> "file:line", "--set" or "default": where each value came from (for messages and the table).
  std::map<std::string, std::string> origin;
};

}  // namespace lorabench
