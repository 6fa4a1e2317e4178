// Training strategies: where parameters, gradients and optimizer state live, and which collectives keep
// the ranks in step. The trainer owns one and drives it; the model's forward/backward reaches the
// weights through it (it is the model's UnitProvider).
//
//   single  one rank, everything local (the reference every other strategy must reproduce)
//   ddp     replicated parameters; gradients all-reduced in buckets as soon as backward finishes them
//   zero1   ddp + optimizer state sharded (each rank updates its piece, then parameters are all-gathered)
//   zero2   zero1 + gradients reduce-scattered to their owners instead of all-reduced
//   fsdp    every parameter sharded at rest (frozen base included); a layer's weights are all-gathered
//           for its forward and again for its backward, its gradients reduce-scattered; the embedding
//           and LM head stay sharded by vocabulary rows and exchange activations instead of weights
//   hsdp    fsdp inside each shard group of the data-parallel mesh (comm/mesh.hpp), the groups replicas of
//           each other: each reduce-scattered gradient shard is then all-reduced across the replicas, so
//           only that reduction crosses the mesh's replicate dimension (across nodes)
//
// Every strategy sums gradients over ranks (the loss is pre-scaled by 1 / tokens of the global batch), so
// for the same global batch all of them compute the single-rank update up to summation order.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lorabench/comm/communicator.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/model/layout.hpp"
#include "lorabench/model/step.hpp"
#include "lorabench/model/weights.hpp"
#include "lorabench/optim/adamw.hpp"

namespace lorabench::strategy {

struct StrategySpec {
  std::string name;                // single | ddp | zero1 | zero2 | fsdp | hsdp
  double bucket_mb = 25;           // gradient bucket size (ddp, zero1, zero2)
  bool sync_every_micro = false;   // reduce gradients after every micro-step, not only the last
  bool reshard_after_forward = true;  // fsdp
  bool prefetch = true;               // fsdp
  bool prefetch_within_peak = true;   // fsdp: a prefetch may not raise the tensor-memory high-water mark
  int grad_accum = 1;
};

// Where the initial weights come from. Every rank reads the same source; a sharded strategy keeps its part.
struct InitSource {
  uint64_t seed = 0;                        // random init (and LoRA init) seed
  const model::Snapshot* snapshot = nullptr;  // base weights, or nullptr for random init
  // false: every weight is a small constant instead (the planner's probe: memory and time do not depend on
  // the values, and drawing a vocabulary-sized embedding from a normal distribution costs seconds)
  bool random_values = true;
  // Where set, fills a unit's buffers instead of the above (tensor parallelism: the full unit from the above, then
  // this rank's slices of it).
  std::function<void(const model::ModelLayout& m, int unit, const at::Tensor& compute, const at::Tensor& trainable)>
      fill;
};

// Model-state memory of one rank in bytes, from the ZeRO paper's accounting (what the strategy keeps
// between steps), recorded beside the measurement.
struct MemoryPrediction {
  int64_t params = 0;     // base (compute) weights + LoRA or fp32 master weights
  int64_t grads = 0;
  int64_t optimizer = 0;  // AdamW m and v
  int64_t total() const { return params + grads + optimizer; }
  std::string formula;    // human-readable, e.g. "2Ψc/N + 4Ψt/N + 4Ψt/N + 8Ψt/N"
};

// The model state `strategy` keeps per rank on `world` ranks (what its predict_memory() returns), from the
// layout alone: the planner's accounting before anything is allocated. hsdp: `world` is the shard group's
// size (the replicas hold copies).
MemoryPrediction predict_model_state(const std::string& strategy, const model::ModelLayout& m, at::ScalarType dtype,
                                     int world);

// The per-unit state of the trainable parameters, full size, in the trainable layout: what checkpoints
// and adapters store (name -> tensor comes from the layout's slots).
struct FullState {
  std::vector<at::Tensor> params, exp_avg, exp_avg_sq;  // one per unit (undefined where none)
  int64_t step = 0;                                     // optimizer steps taken
};

// One unit's part of the trainable state that a rank owns: the elements its optimizer step updates,
// [offset, offset + params.numel()) of the unit's trainable buffer (the coordinates of FullState's tensors).
struct OwnedSlice {
  int unit = 0;
  int64_t offset = 0;
  at::Tensor params, exp_avg, exp_avg_sq;  // 1-d, the same length
};

// A rank's trainable state as it holds it, read without communication. The tensors are views of the
// strategy's storage (on its device): what the rank computes with, not a gathered copy.
struct LocalState {
  // What this rank owns, in unit order, padding excluded. single, ddp: every unit whole (each rank owns
  // all of it); zero1, zero2: the rank's piece of every bucket, cut at unit boundaries; fsdp: the rank's
  // piece of every unit. The sharded strategies' slices of all ranks cover every unit exactly once.
  std::vector<OwnedSlice> owned;
  // Per unit, this rank's copy of the unit's full parameters where every rank holds one (single, ddp, zero1,
  // zero2); undefined where they are sharded (fsdp) or the unit has none.
  std::vector<at::Tensor> replicated_params;
  int64_t step = 0;  // optimizer steps taken
  // How many ranks own each element: hsdp's replica groups each cover every unit once; 1 elsewhere.
  int replicas = 1;
};

// hsdp's communicators (comm::split_mesh): this rank's shard group, and the ranks holding the same shard in
// the other replica groups. Tensor parallelism's: this rank's tensor-parallel group and, where key/value heads are
// replicated (model/tensor_parallel.hpp), the ranks of it that hold the same ones (else null).
struct MeshGroups {
  comm::Communicator* shard = nullptr;
  comm::Communicator* replicate = nullptr;
  comm::Communicator* tp = nullptr;
  comm::Communicator* tp_kv = nullptr;
};

class TrainingStrategy : public model::UnitProvider {
 public:
  // comm may be null only for `single` on one rank. A combination the strategy does not support is a
  // ConfigError. Every tensor of the strategy lives on `dev` (nullptr: device::cpu_device()); with a CUDA
  // device the communicator must take device buffers (NCCL, or MPI behind make_staging_communicator).
  // hsdp computes on `mesh`'s communicators (both set, split from `comm`); the others ignore them. With
  // `mesh.tp` of more than one rank the model is split over that group (tensor parallelism, `m` the full model's
  // layout) and `spec` (single or ddp) is the data-parallel strategy over `comm`, the ranks that hold the same part
  // (null or one rank: no data parallelism).
  static std::unique_ptr<TrainingStrategy> create(const StrategySpec& spec, const model::ModelLayout& m,
                                                  at::ScalarType dtype, comm::Communicator* comm,
                                                  device::Device* dev = nullptr, const MeshGroups& mesh = {});

  virtual const char* name() const = 0;
  const model::ModelLayout& layout() const { return m_; }

  // Collective. Allocates this rank's storage and fills it from `src`.
  virtual void initialize(const InitSource& src) = 0;

  // The micro-step protocol of one optimizer step:
  //   begin_micro(0) forward_backward(...) end_micro() ... begin_micro(A-1) ... end_micro()
  //   grad_sq_norm(), scale_grads(), optimizer_step()
  virtual void begin_micro(int micro) = 0;
  // Waits for this micro-step's reductions when they must complete now (the exposed communication).
  virtual void end_micro() = 0;
  // Collective where gradients are sharded. Sum of squares of the global gradient, the same value on
  // every rank.
  virtual double grad_sq_norm() = 0;
  virtual void scale_grads(double factor) = 0;
  // Applies AdamW to what this rank owns, makes the new parameters visible where they are replicated,
  // and zeroes the gradients.
  virtual void optimizer_step(const optim::AdamWConfig& c, double lr) = 0;
  // Drops this step's gradients without an update (train.on_nonfinite = skip).
  virtual void discard_grads() = 0;

  // Collective. The full trainable state (every rank receives it).
  virtual FullState gather_state() = 0;
  // Collective. Replaces the trainable state with `s` (full tensors, same on every rank).
  virtual void load_state(const FullState& s) = 0;
  // Not collective. This rank's own part of the trainable state and its replicated copies, as it holds
  // them (no gather): what checks of a sharded state compare (train/state_check.hpp, the strategy tests).
  virtual LocalState local_state() = 0;

  // The layout the step runs on: the model's (layout()), or with tensor parallelism this rank's part of it.
  virtual const model::ModelLayout& compute_layout() const { return m_; }
  // Not collective. This rank's part of a full state (gather_state()'s, in layout()) in compute_layout()'s
  // coordinates, those of local_state(): the state itself, or with tensor parallelism this rank's slices of it.
  virtual FullState part_of(const FullState& full) { return full; }
  // This step's gradient of `unit` after the last end_micro(), as the optimizer will read it (single, ddp, zero1:
  // the reduced full buffer of the unit); undefined where gradients are sharded.
  virtual at::Tensor step_grad(int unit) { return at::Tensor(); }

  virtual MemoryPrediction predict_memory() const = 0;
  // FSDP: decoder-layer gathers issued ahead of their use so far (prefetches), on this rank.
  virtual int64_t prefetched_layers() const { return 0; }

  comm::Communicator* communicator() const { return comm_; }
  device::Device& device() const { return dev_; }

 protected:
  TrainingStrategy(const model::ModelLayout& m, at::ScalarType dtype, comm::Communicator* comm, device::Device& dev);
  // Options of this rank's tensors: dtype t on the strategy's device.
  at::TensorOptions opts(at::ScalarType t) const;
  // Collective: the sum of x over all ranks, in fp64 (through a device scalar where the communicator
  // takes device buffers).
  double all_reduce_sum(double x) const;
  // Collective: x[i] := the minimum of x[i] over all ranks, in fp64 (likewise).
  void all_reduce_min(std::vector<double>& x) const;
  const model::ModelLayout& m_;
  at::ScalarType dtype_;
  comm::Communicator* comm_;
  device::Device& dev_;
};

// comm::DataType of an ATen dtype (fp32, bf16, fp16, int32, int64).
comm::DataType comm_dtype(at::ScalarType t);

}  // namespace lorabench::strategy
