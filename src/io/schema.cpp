#include "lorabench/io/schema.hpp"

namespace lorabench::schema {

const std::vector<h5::Column>& rank_columns() {
  static const std::vector<h5::Column> cols = {
      {"rank", true}, {"local_rank", true}, {"node", true}, {"pid", true}, {"threads", true}, {"cuda_device", true}};
  return cols;
}

const std::vector<StepColumnInfo>& step_columns() {
  static const std::vector<StepColumnInfo> cols = {
      {"trial", true, "", "trial index (run.repeat)"},
      {"step", true, "", "optimizer step, from 0"},
      {"rank", true, "", "rank that measured the row"},
      {"loss", false, "nats", "mean causal-LM loss over the global batch's counted tokens"},
      {"lr", false, "", "learning rate applied at this step"},
      {"grad_norm", false, "", "global L2 norm of the trainable gradients before clipping"},
      {"clipped", true, "", "1 when the gradients were scaled down by train.max_grad_norm"},
      {"tokens", true, "tokens", "real (non-padding) tokens this rank processed in the step"},
      {"loss_tokens", true, "tokens", "tokens of this rank that carried loss"},
      {"step_s", false, "s", "wall time of the whole step on this rank"},
      {"data_s", false, "s", "building the micro-batches"},
      {"forward_s", false, "s", "forward passes, including the LM head and loss"},
      {"backward_s", false, "s", "backward passes (compute; waits for communication excluded)"},
      {"comm_exposed_s", false, "s", "time blocked waiting for communication that compute did not hide"},
      {"optimizer_s", false, "s", "gradient norm, clipping and the optimizer update (waits excluded)"},
      {"compute_s", false, "s", "step_s - comm_exposed_s: the step without time blocked on communication"},
      {"wait_peers_s", false, "s",
       "the part of comm_exposed_s spent before the last rank arrived at the collective (waiting for peers)"},
      {"transfer_s", false, "s", "comm_exposed_s - wait_peers_s: blocked after every rank had arrived"},
      {"collectives", true, "", "collectives this rank recorded in the step (data and control plane)"},
      {"straggler_ratio", false, "",
       "this step's largest compute_s over ranks / the median of the other ranks' (the same in every rank's row)"},
      {"slowest_rank", true, "", "the rank with this step's largest compute_s (the same in every rank's row)"},
      {"tokens_per_s", false, "tokens/s", "tokens / step_s on this rank"},
      {"flops", false, "FLOP", "model FLOPs of this rank's step (LoRA-aware formula, docs/metrics.md)"},
      {"mfu", false, "", "flops / step_s / peak FLOP/s of this rank"},
      {"mem_current_bytes", true, "B", "tensor memory held at the end of the step (CUDA: the caching allocator's allocated bytes)"},
      {"mem_peak_bytes", true, "B",
       "peak tensor memory during the step (CUDA: torch.cuda.max_memory_allocated, reset each step)"},
      {"rss_peak_bytes", true, "B", "peak resident set size during the step (VmHWM, reset each step)"},
      {"bytes_all_reduce", true, "B", "payload bytes this rank passed to all_reduce in the step"},
      {"bytes_reduce_scatter", true, "B", "payload bytes passed to reduce_scatter"},
      {"bytes_all_gather", true, "B", "payload bytes passed to all_gather"},
      {"bytes_broadcast", true, "B", "payload bytes passed to broadcast"},
      {"bytes_all_to_all", true, "B", "payload bytes passed to all_to_all"},
      {"mem_reserved_peak_bytes", true, "B",
       "peak memory the allocator held during the step (CUDA: torch.cuda.max_memory_reserved, reset each step; "
       "CPU: = mem_peak_bytes)"},
  };
  return cols;
}

std::vector<h5::Column> step_table_columns() {
  std::vector<h5::Column> out;
  for (const auto& c : step_columns()) out.push_back({c.name, c.integer});
  return out;
}

const std::vector<std::pair<const char*, const char*>>& summary_attributes() {
  static const std::vector<std::pair<const char*, const char*>> attrs = {
      {"strategy", "parallel.strategy"},
      {"world_size", "ranks in the job"},
      {"micro_batch", "sequences per rank per micro-step"},
      {"grad_accum", "micro-steps per optimizer step"},
      {"global_batch_size", "micro_batch x grad_accum x world_size"},
      {"seq_len", "tokens per sequence"},
      {"dtype", "model.dtype"},
      {"model", "preset name or snapshot directory"},
      {"model_family", "the architecture: qwen2 (Qwen2, Qwen2.5), qwen3 or qwen3_5 (a snapshot's config.json model_type)"},
      {"model_layers", "the decoder layers: \"24 layers\", or a hybrid model's mix (\"18 linear-attention + 6 full-attention layers\")"},
      {"total_params", "parameters of the model (adapters included)"},
      {"trainable_params", "parameters the optimizer updates"},
      {"trainable_ratio", "trainable_params / total_params"},
      {"trials", "run.repeat"},
      {"measured_steps", "steps per trial in the means (warm-up excluded)"},
      {"step_time_mean_s", "mean over trials of the per-trial mean step time (max over ranks per step)"},
      {"step_time_std_s", "sample standard deviation of the per-trial means (0 with one trial)"},
      {"step_time_median_s", "median over measured steps of the max-over-ranks step time"},
      {"tokens_per_s_mean", "mean over trials of the global tokens/s (all ranks' tokens / max step time)"},
      {"tokens_per_s_std", "sample standard deviation over trials (0 with one trial)"},
      {"loss_first", "loss at step 0 of the first trial"},
      {"loss_last", "loss at the last step of the first trial"},
      {"mem_peak_bytes_max", "largest per-rank peak tensor memory of any step"},
      {"mem_current_bytes_max", "largest per-rank tensor memory held at the end of the last step (model state)"},
      {"rss_peak_bytes_max", "largest per-rank peak RSS of any step"},
      {"mem_reserved_peak_bytes_max", "largest per-rank peak of the memory the allocator held (CUDA: reserved; CPU: "
                                      "= mem_peak_bytes_max)"},
      {"flops_per_step", "model FLOPs of one optimizer step over all ranks (docs/metrics.md)"},
      {"flops_per_token", "model FLOPs per token at seq_len"},
      {"peak_flops_per_rank", "peak FLOP/s per rank used for MFU"},
      {"peak_flops_source", "\"calibrated\" (GEMM measured at start) or \"configured\" (profile.peak_gflops)"},
      {"peak_flops_detail", "how the peak was obtained"},
      {"mfu_mean", "mean over measured steps of flops_per_step / (max step time x world x peak)"},
      {"mem_bandwidth_per_rank", "memory bandwidth per rank in bytes/s for the roofline (docs/metrics.md)"},
      {"mem_bandwidth_source", "\"measured\" (a triad on every rank at once at start) or \"configured\" "
                               "(profile.mem_bandwidth_gbs)"},
      {"mem_bandwidth_detail", "how the bandwidth was obtained: the method, the array size, the ranks at once"},
      {"roofline_ridge_flops_per_byte", "peak_flops_per_rank / mem_bandwidth_per_rank: below this intensity a phase "
                                        "is memory bound"},
      {"roofline_forward_flops", "FLOPs per rank and step of the forward phase (hardware FLOPs; likewise for "
                                 "backward, with the recomputation of activation checkpointing, optimizer: 0, and "
                                 "step: their sum)"},
      {"roofline_forward_bytes", "bytes per rank and step the forward phase must move (docs/metrics.md, likewise "
                                 "for backward, optimizer, step)"},
      {"roofline_forward_bound_s", "max(flops / peak, bytes / bandwidth): the roofline's lower bound of the phase's "
                                   "time (step: the sum of the phases' bounds)"},
      {"roofline_forward_measured_s", "the median rank's mean measured forward_s (step: forward + backward + "
                                      "optimizer)"},
      {"roofline_forward_fraction", "bound_s / measured_s: how close the phase is to its roofline (1 = at it)"},
      {"roofline_forward_limit", "\"memory\" or \"compute\": which term of the bound is larger (step: the one "
                                 "whose phases' bounds add up to more)"},
      {"roofline_backward_flops", ""}, {"roofline_backward_bytes", ""}, {"roofline_backward_bound_s", ""},
      {"roofline_backward_measured_s", ""}, {"roofline_backward_fraction", ""}, {"roofline_backward_limit", ""},
      {"roofline_optimizer_flops", ""}, {"roofline_optimizer_bytes", ""}, {"roofline_optimizer_bound_s", ""},
      {"roofline_optimizer_measured_s", ""}, {"roofline_optimizer_fraction", ""}, {"roofline_optimizer_limit", ""},
      {"roofline_step_flops", ""}, {"roofline_step_bytes", ""}, {"roofline_step_bound_s", ""},
      {"roofline_step_measured_s", ""}, {"roofline_step_fraction", ""}, {"roofline_step_limit", ""},
      {"clipped_steps", "steps whose gradients were clipped"},
      {"skipped_steps", "steps whose update was dropped (train.on_nonfinite = skip)"},
      {"empty_steps", "steps whose global batch had no token to train on, skipped (train.on_empty_step = skip)"},
      {"skipped_records", "dataset records skipped (data.on_bad_record = skip)"},
      {"data_source", "one line describing the data"},
      {"predicted_params_bytes", "predicted per-rank parameter bytes (ZeRO accounting)"},
      {"predicted_grads_bytes", "predicted per-rank gradient bytes"},
      {"predicted_optimizer_bytes", "predicted per-rank AdamW state bytes"},
      {"predicted_model_state_bytes", "sum of the three predictions"},
      {"predicted_formula", "the prediction as a formula of Ψc (compute params) and Ψt (trainable params)"},
      {"prefetched_layers", "fsdp: decoder-layer all-gathers issued ahead of their use in the last trial, rank 0 "
                            "(parallel.prefetch, bounded by parallel.prefetch_within_peak); 0 for other strategies"},
      {"papi_status", "which counters were counted and which were unavailable, and why"},
      {"step_time_rank_min_s", "min over ranks of each rank's mean measured step time"},
      {"step_time_rank_median_s", "median over ranks of the same"},
      {"step_time_rank_max_s", "max over ranks of the same"},
      {"compute_s_rank_min", "min over ranks of each rank's mean compute_s (likewise _median, _max; and for "
                             "wait_peers_s, transfer_s)"},
      {"compute_s_rank_median", ""}, {"compute_s_rank_max", ""},
      {"wait_peers_s_rank_min", ""}, {"wait_peers_s_rank_median", ""}, {"wait_peers_s_rank_max", ""},
      {"transfer_s_rank_min", ""}, {"transfer_s_rank_median", ""}, {"transfer_s_rank_max", ""},
      {"straggler_ratio", "the slowest rank's mean compute_s over the median of the other ranks' means (1 = "
                          "balanced, and with one rank)"},
      {"slowest_rank", "rank with the largest mean compute_s"},
      {"straggler_threshold", "per-step ratio from which a step counts as having a straggler (1.10)"},
      {"straggler_step_ratio_median", "median over measured steps of the per-step straggler_ratio"},
      {"straggler_steps", "measured steps whose straggler_ratio reaches straggler_threshold"},
      {"straggler_kind", "balanced (no such step), persistent (the same rank in most measured steps), intermittent "
                         "(most steps have one, no rank in most), hiccup (some steps, not the median step)"},
      {"straggler_rank", "the rank named: the one most often slowest when persistent, else slowest_rank"},
      {"straggler_rank_steps", "measured steps in which straggler_rank was the slowest by at least the threshold"},
      {"straggler_factor", "straggler_rank's mean compute_s / the median of the other ranks' (NaN with one rank)"},
      {"straggler_phase", "the phase (data, forward, backward, optimizer) in which straggler_rank exceeds the "
                          "other ranks' median most"},
      {"straggler_phase_excess_s", "by how much, seconds per step"},
      {"clock_sync", "how the ranks' clocks were related for the wait/transfer split (shared clock or ping-pong)"},
      {"clock_offset_error_s", "bound of the error of any rank's clock offset (0 on one host)"},
      {"data_s_rank_min", "min over ranks of the mean data_s (likewise _median, _max; and for forward_s, "
                          "backward_s, comm_exposed_s, optimizer_s)"},
      {"data_s_rank_median", ""}, {"data_s_rank_max", ""},
      {"forward_s_rank_min", ""}, {"forward_s_rank_median", ""}, {"forward_s_rank_max", ""},
      {"backward_s_rank_min", ""}, {"backward_s_rank_median", ""}, {"backward_s_rank_max", ""},
      {"comm_exposed_s_rank_min", ""}, {"comm_exposed_s_rank_median", ""}, {"comm_exposed_s_rank_max", ""},
      {"optimizer_s_rank_min", ""}, {"optimizer_s_rank_median", ""}, {"optimizer_s_rank_max", ""},
  };
  return attrs;
}

// /comm/results of `lorabench comm` run files (docs/hdf5-schema-comm.md).
const std::vector<CommColumnInfo>& comm_result_columns() {
  static const std::vector<CommColumnInfo> cols = {
      {"op", true, "", "collective: index into /comm/op_names (0 all_reduce, 1 all_gather, 2 reduce_scatter, "
                       "3 broadcast, 4 all_to_all)"},
      {"dtype", true, "", "element type: index into /comm/dtype_names (0 fp32, 1 bf16, 2 fp16, 3 int32, 4 int64)"},
      {"bytes", true, "B", "nccl-tests' size: the larger buffer of one call"},
      {"count", true, "elements", "bytes / element size"},
      {"time_avg_s", false, "s", "seconds per call through the Communicator: per-rank mean, averaged over ranks"},
      {"time_min_s", false, "s", "smallest per-rank mean"},
      {"time_max_s", false, "s", "largest per-rank mean"},
      {"algbw_GBps", false, "GB/s", "bytes / time_avg_s / 1e9"},
      {"busbw_GBps", false, "GB/s", "algbw x the op's bus factor (nccl-tests)"},
      {"raw_mpi_time_s", false, "s", "seconds per call of the blocking MPI call (MPI_Allreduce, ...) on host memory"},
      {"raw_mpi_busbw_GBps", false, "GB/s", "bus bandwidth of the raw MPI call"},
      {"memcpy_time_s", false, "s", "seconds per memcpy of `bytes` (device: cudaMemcpy D2D), all ranks at once"},
      {"memcpy_GBps", false, "GB/s", "bytes / memcpy_time_s / 1e9"},
      {"check_passed", true, "", "1 result equals the closed form on every rank, 0 it does not, -1 not checked"},
      {"wrong", true, "elements", "elements that differ from the closed form, summed over ranks"},
  };
  return cols;
}

std::vector<h5::Column> comm_result_table_columns() {
  std::vector<h5::Column> out;
  for (const auto& c : comm_result_columns()) out.push_back({c.name, c.integer});
  return out;
}

}  // namespace lorabench::schema
