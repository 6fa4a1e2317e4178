// The planner (`lorabench plan`, docs/plan.md): per-rank memory and step time of a configuration under
// each strategy and world size, predicted before a run allocates anything, and the check that refuses a
// training run that cannot fit.
//
// Memory per rank = the strategy's model state (the ZeRO accounting of predict_model_state) + the
// activations and workspace of one micro-step + what the strategy holds beyond its model state (FSDP's
// gathered layers and vocabulary exchange, ZeRO-2's full gradient buffer in backward). The activations
// and workspace are measured, not guessed: a probe trains 1- and 2-layer versions of the model (same
// width, vocabulary, dtype, LoRA, micro-batch and sequence) for two steps under the counting allocator,
// and the difference gives one layer's share, so L layers cost probe(1) + (L-1) x (probe(2) - probe(1)).
// Time per rank: the same probes' forward + backward and optimizer times extrapolated the same way, times
// the oversubscription of the node's CPUs, plus each collective's bytes over the bus bandwidth of a
// `lorabench comm` run file (or one measured now, or estimated from memcpy when neither is possible).
// On a GPU the probe runs on the run's device (the caching allocator's statistics, CUDA events), a rank's
// memory is its GPU's, and ranks sharing one GPU (parallel.backend = mpi) split its memory and its time.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lorabench/comm/communicator.hpp"
#include "lorabench/config/run_config.hpp"
#include "lorabench/model/shape.hpp"

namespace lorabench::device {
class Device;
}

namespace lorabench::io {
class RunFileWriter;
}

namespace lorabench::train {

// Bus bandwidth (GB/s, nccl-tests' definition) of the three collectives the strategies use.
struct CommBandwidth {
  double all_reduce = 0, all_gather = 0, reduce_scatter = 0;
  std::string source;  // "FILE (lorabench comm, N ranks)", "measured now on N ranks", "estimate: ...", "not known: ..."
  bool known() const { return all_reduce > 0 || all_gather > 0 || reduce_scatter > 0; }
};

// One micro-step of the model measured by the probe, extrapolated to the configured depth.
struct ProbeResult {
  std::string device = "cpu";    // where it ran ("cpu", "cuda:0")
  int64_t tokens = 0;            // micro_batch x seq_len of the probe
  int64_t activation_bytes = 0;  // peak tensor bytes of a step above the model state, L layers
  int64_t persistent_bytes = 0;  // held between steps beyond the model state (libraries' workspaces, e.g.
                                 // cuBLAS's on a GPU): measured, independent of the depth
  int64_t slack_bytes = 0;       // GPU: what the caching allocator reserves beyond the tensors at the peak
                                 // (block rounding, segments), L layers; 0 on CPU
  double micro_s = 0;            // forward + backward of one micro-batch, L layers
  double optimizer_s = 0;        // the update of every trainable parameter
  double layer_gflops = 0;       // the layer's model FLOPs / its measured time (what the time rests on)
  std::string note;              // how it was measured / extrapolated
  // Not empty: the probe did not run, and says why (its own model would have taken more than half the memory
  // available even at its smallest micro-batch); the other fields are 0 and callers fall back to the lower
  // bound.
  std::string skipped;
};

struct PlanRow {
  std::string strategy;
  int world = 1;
  int ranks_per_node = 1;
  int dp_replicate = 1;       // hsdp: replica groups (shard groups of world / dp_replicate ranks); 1 elsewhere
  int tp = 1;                 // tensor-parallel ranks per group (strategy "tpT+S": S across world / T groups)
  int64_t model_state = 0;    // bytes per rank (predict_model_state)
  std::string formula;        // its ZeRO formula
  int64_t activations = 0;    // activations + workspace of a micro-step
  int64_t strategy_extra = 0; // gathered layers, exchange buffers, transient full-size gradients
  int64_t tensor_peak = 0;    // the sum: what mem_peak_bytes measures (CPU: the counting allocator; GPU: the
                              // caching allocator's allocated bytes)
  int64_t rss = 0;            // CPU: + the process's own footprint (libraries, allocator); GPU: -1 (the tensors
                              // are not in host memory)
  int64_t reserved = 0;       // GPU: tensor peak + the allocator's slack (what mem_reserved_peak_bytes measures,
                              // and what must fit); CPU: = tensor_peak
  int ranks_per_gpu = 0;      // GPU: ranks sharing one GPU; 0 on CPU
  int64_t available = -1;     // memory per rank on this node, or of its GPU (-1 unknown)
  bool fits = true;
  double compute_s = 0, comm_s = 0, step_s = 0, tokens_per_s = 0;  // per optimizer step; tokens/s all ranks
  std::string note;
};

struct PlanOptions {
  std::vector<int> worlds;              // world sizes to plan (e.g. 1, 2, 4)
  // empty: every strategy that applies, tensor parallelism x ddp included ("tp2+ddp": parallel.tp = 2 groups
  // inside a node, ddp across them; "tp2+single": one group of 2)
  std::vector<std::string> strategies;
  int ranks_per_node = 0;               // 0: min(world, SLURM_NTASKS_PER_NODE or world)
  int node_cpus = 0;                    // CPUs the node's ranks may use; 0: this process's (usable_cpus)
  std::string comm_file;                // a `lorabench comm` run file for the bandwidths
  bool probe = true;                    // false: no probe (the analytic lower bound only)
  // GPU ranks (parallel.device resolved to cuda): memory per rank is its GPU's, not the node's.
  bool gpu = false;
  std::string gpu_name;                 // "cuda:0 (NVIDIA H200)", for the table's notes
  int gpus_per_node = 0;                // GPUs a node's ranks may use (device::gpus_on_host: the distinct
                                        // GPUs of this host's ranks, or what one process sees if more)
  int64_t gpu_available = -1;           // bytes one GPU has for a run (free + the allocator's unused cache)
  bool share_gpus = false;              // parallel.backend = mpi: ranks may share a GPU; NCCL: one rank per GPU
  // Bus bandwidth between nodes (--comm-inter: a `lorabench comm` run with one rank per node): the collectives
  // whose ranks span nodes use it (every collective of ddp, zero1, zero2 and fsdp on more than one node; hsdp's
  // all-reduce across the replicas; ddp's across tensor-parallel groups), those inside a node the make_plan `bw`.
  // Not known: `bw` for every collective, and the table says so.
  CommBandwidth inter_node;
};

// Bus bandwidth of all_reduce, all_gather and reduce_scatter measured now on the ranks of `world`
// (collective; 16 MiB fp32 per rank, best of 3 after a warm-up), with buffers on `dev` (device memory for
// NCCL or the staging communicator on a GPU).
CommBandwidth measure_bandwidth(comm::Communicator& comm, MPI_Comm world, device::Device& dev);
// One process: half the memcpy bandwidth of 64 MiB, as an estimate for ranks that share a node's memory.
CommBandwidth estimate_bandwidth();

// Collective. The CPUs the ranks of this node may run on together: the union of their affinity masks
// (each rank bound to its own core sees one CPU; the job has them all).
int node_cpus(MPI_Comm world);

// Bus bandwidths from a comm run file (fp32 rows at the largest size measured).
CommBandwidth bandwidth_from_file(const std::string& path);

// The probe (allocates one- and two-layer models on `dev`; a few seconds). On CPU it REQUIRES the counting
// allocator. On CUDA it times both models by their step times (CUDA events) instead of the per-layer
// host-clock hook, and returns the allocator's cache to the GPU when done (Device::release_cached).
// Bounded: the 2-layer model's state plus its activations' lower bound stay within half the memory the fit
// checks see (memory_for_fit_checks); over it, the probe's micro-batch shrinks (memory is extrapolated by
// tokens), and when even 128 tokens would not fit it does not run (ProbeResult::skipped).
ProbeResult probe_model(const RunConfig& c, device::Device& dev);
// The probe's micro-batch (sequences, tokens per sequence) for a run of micro_batch x seq_len on a device
// whose cap is `cap_tokens`, with its memory (`bytes`: 2-layer state + activations' lower bound) under
// `budget`; {0, 0} when none is. Exposed for tests.
std::pair<int, int64_t> probe_micro_batch(const RunConfig& c, int64_t cap_tokens, int64_t budget, int64_t* bytes);

// The activations a micro-step must hold at least: every decoder layer's saved tensors (LayerCache) and
// the final hidden state, without any workspace. Used to refuse impossible runs without a probe.
int64_t activation_lower_bound(const RunConfig& c);
// The same for `shape` (a cut-down copy of the run's) and a micro-batch of `tokens`.
int64_t activation_lower_bound(const RunConfig& c, const model::ModelShape& shape, int64_t tokens);

// The planner's name of a configuration's strategy: parallel.strategy, or with parallel.tp = T "tpT+strategy".
std::string plan_strategy_name(const RunConfig& c);
// "tp2+ddp" -> ("ddp", 2); "fsdp" -> ("fsdp", 1). Throws ConfigError for a malformed tp prefix.
std::pair<std::string, int> split_tp_strategy(const std::string& name);

// Rows for every (strategy, world) asked. `probe` may be null (then activations = the lower bound and no
// time is predicted). A tensor-parallel row holds the model state of its part of the model (ddp's accounting
// over the groups), activations scaled from the probe by the saved tensors of its part against the whole
// model's, compute time by its part's FLOPs, and per micro-step the group's all-reduces (two of tokens x hidden
// per layer and direction, three forward per layer with activation checkpointing's recomputation, the
// vocabulary-parallel embedding and head) beside ddp's gradient all-reduce across the groups.
std::vector<PlanRow> make_plan(const RunConfig& c, const PlanOptions& o, const ProbeResult* probe,
                               const CommBandwidth& bw);

// Markdown table of the rows, with the inputs they rest on (o: the node's CPUs or its GPUs).
std::string plan_markdown(const RunConfig& c, const std::vector<PlanRow>& rows, const ProbeResult* probe,
                          const CommBandwidth& bw, const PlanOptions& o);

// The prediction of a run recorded in its run file (predicted_* summary attributes; docs/hdf5-schema.md):
// `row` for this run's strategy and world, `how` what it rests on (the probe, the bandwidth's source).
void write_prediction(io::RunFileWriter& run, const PlanRow& row, bool cuda, const std::string& how);

// The start-of-training check: ConfigError with the numbers when this rank's model state plus the
// activation lower bound exceeds the memory available to each of the ranks sharing it: `available` bytes
// (negative: unknown, no check) of `where` ("this node" for host memory, the GPU for device memory) split
// over `ranks_sharing`. `nodes`: the job's nodes (hsdp's default replicas).
void check_fits_or_throw(const RunConfig& c, int world, int ranks_sharing, int64_t available, const std::string& where,
                         int nodes = 1);
// The memory (bytes) the fit checks take a node or GPU to have: fault.memory_available_mb when set, else
// `measured` (what the device reports).
int64_t memory_for_fit_checks(const RunConfig& c, int64_t measured);

}  // namespace lorabench::train
