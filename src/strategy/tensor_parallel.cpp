// Tensor parallelism (model/tensor_parallel.hpp) around a data-parallel strategy: the inner strategy (single, or
// ddp over the ranks that hold the same part) owns this rank's part of the model as if it were a model of its own;
// this one gives the layers their collectives over the tensor-parallel group, computes the vocabulary-parallel
// embedding and LM head + loss on the rank's vocabulary rows, and translates the trainable state between the
// rank's part and the full model's layout (what checkpoints and adapters hold: the unsplit PEFT tensors).
#include <ATen/ATen.h>

#include <algorithm>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/model/tensor_parallel.hpp"
#include "lorabench/model/weights.hpp"
#include "strategy_common.hpp"

namespace lorabench::strategy {

namespace {

class TensorParallelStrategy : public TrainingStrategy {
 public:
  TensorParallelStrategy(const StrategySpec& spec, const model::ModelLayout& m, at::ScalarType dtype,
                         comm::Communicator* dp, device::Device& dev, const MeshGroups& mesh)
      : TrainingStrategy(m, dtype, dp, dev), tp_comm_(mesh.tp), kv_comm_(mesh.tp_kv), tp_(mesh.tp->size()),
        rank_(mesh.tp->rank()) {
    if (spec.name != "single" && spec.name != "ddp")
      throw ConfigError("parallel.tp = " + std::to_string(tp_) + ": tensor parallelism combines with single or ddp "
                        "(data parallelism across the tensor-parallel groups), not with " + spec.name);
    if (m.full_finetune)
      throw ConfigError("parallel.tp = " + std::to_string(tp_) + ": tensor parallelism trains LoRA adapters; full "
                        "fine-tuning (lora.enabled = false) runs with tp = 1");
    local_ = model::build_layout(model::tp_local_shape(m.shape, tp_), m.lora);
    local_.kernels = m.kernels;
    info_.kv_replicas = model::tp_kv_replicas(m.shape, tp_);
    if (info_.kv_replicas > 1) {
      LB_CHECK(kv_comm_ != nullptr && kv_comm_->size() == info_.kv_replicas,
               "tensor parallelism: replicated key/value heads need the group of ranks sharing them");
    }
    info_.sum = [this](at::Tensor& t) { reduce(*tp_comm_, t, comm::ReduceOp::kSum); };
    info_.kv_sum = [this](at::Tensor& t) { reduce(*kv_comm_, t, comm::ReduceOp::kSum); };
    info_.o_in_full = m.shape.q_dim();
    info_.o_in_offset = rank_ * local_.shape.q_dim();
    info_.down_in_full = m.shape.intermediate;
    info_.down_in_offset = rank_ * local_.shape.intermediate;
    inner_ = TrainingStrategy::create(spec, local_, dtype, dp, &dev);
  }

  const char* name() const override { return inner_->name(); }
  const model::ModelLayout& compute_layout() const override { return local_; }
  const model::TensorParallel* tensor_parallel() const override { return &info_; }

  void initialize(const InitSource& src) override {
    InitSource mine = src;
    mine.fill = [this, src](const model::ModelLayout&, int u, const at::Tensor& compute, const at::Tensor& trainable) {
      const model::UnitLayout& fu = m_.units[size_t(u)];
      at::Tensor fc = at::zeros({fu.compute_numel}, compute.options());
      at::Tensor ft = trainable.defined() ? at::zeros({fu.trainable_numel}, trainable.options()) : at::Tensor();
      fill_unit(m_, u, src, fc, ft);
      model::tp_copy_unit(m_, local_, tp_, rank_, u, true, fc, compute, true);
      if (ft.defined()) model::tp_copy_unit(m_, local_, tp_, rank_, u, false, ft, trainable, true);
    };
    inner_->initialize(mine);
  }

  // ---- the model's units: this rank's part, held by the inner strategy ----
  at::Tensor compute(int unit, model::Pass pass) override { return inner_->compute(unit, pass); }
  at::Tensor trainable(int unit, model::Pass pass) override { return inner_->trainable(unit, pass); }
  at::Tensor grad(int unit) override { return inner_->grad(unit); }
  void release(int unit, model::Pass pass) override { inner_->release(unit, pass); }
  void backward_done(int unit) override { inner_->backward_done(unit); }

  // The vocabulary-parallel embedding: each rank looks up the ids in its rows, the group sums.
  at::Tensor embed_lookup(const model::ModelLayout& m, const at::Tensor& ids) override {
    at::Tensor x = model::embed_rows_lookup(model::embedding_of(m, inner_->compute(0, model::Pass::kForward)),
                                            rank_ * m.shape.vocab_size, ids);
    inner_->release(0, model::Pass::kForward);
    reduce(*tp_comm_, x, comm::ReduceOp::kSum);
    return x;
  }

  // The vocabulary-parallel head and loss: the rank's rows' partial softmax statistics combined over the group
  // (model::sharded_head_terms), the input gradient summed over it.
  model::HeadLoss lm_head_loss(const model::ModelLayout& m, const at::Tensor& hn, const at::Tensor& targets,
                               double grad_scale, int64_t chunk) override {
    if (chunk <= 0)
      throw ConfigError("model.fused_head: the unfused reference head needs the whole head matrix on one rank; "
                        "tensor parallelism splits it by vocabulary rows (use tp = 1 to compare the paths)");
    const int u = m.head_unit();
    const int64_t per = m.shape.vocab_size, row0 = std::min<int64_t>(m_.shape.vocab_size, rank_ * per);
    const int64_t valid_rows = std::min<int64_t>(per, m_.shape.vocab_size - row0);
    at::Tensor rows = model::head_of(m, inner_->compute(u, model::Pass::kForward)).narrow(0, 0, valid_rows);
    at::Tensor valid = targets.ne(-100);
    at::Tensor tgt = at::where(valid, targets, at::full_like(targets, -1));  // ignored: in no rank's rows
    model::HeadReductions group;
    group.max = [this](at::Tensor& t) { reduce(*tp_comm_, t, comm::ReduceOp::kMax); };
    group.sum = [this](at::Tensor& t) { reduce(*tp_comm_, t, comm::ReduceOp::kSum); };
    model::HeadTerms t = model::sharded_head_terms(m.kernels, hn, rows, row0, tgt, valid, grad_scale, chunk, group);
    inner_->release(u, model::Pass::kForward);
    model::HeadLoss out;
    out.counted = valid.sum();
    out.loss_sum = t.losses.to(at::kDouble).sum();
    at::Tensor dh = t.d.contiguous();  // summed in fp32, rounded once like the unsplit head's
    reduce(*tp_comm_, dh, comm::ReduceOp::kSum);
    out.dh = dh.to(dtype_);
    return out;
  }

  void embed_backward(const model::ModelLayout&, const at::Tensor&, const at::Tensor&) override {
    LB_CHECK(false, "tensor parallelism trains no embedding");
  }

  // ---- the step ----
  void begin_micro(int micro) override { inner_->begin_micro(micro); }
  void end_micro() override { inner_->end_micro(); }

  // Every element once: each rank's part of the step's (data-parallel reduced) gradient, each element divided by
  // the number of ranks holding it (the replicated matrix of each LoRA pair, replicated key/value heads), summed
  // over the group.
  double grad_sq_norm() override {
    at::Tensor parts = at::zeros({1}, opts(at::kDouble));
    for (size_t u = 0; u < local_.units.size(); ++u) {
      if (local_.units[u].trainable.empty()) continue;
      at::Tensor g = inner_->step_grad(static_cast<int>(u));
      LB_CHECK(g.defined(), "tensor parallelism: the inner strategy does not hold the step's gradient");
      for (const auto& slot : local_.units[u].trainable) {
        const int holders = model::tp_slice(m_.shape, tp_, rank_, slot.name).holders;
        parts.add_(model::slot_view(g, slot).to(at::kDouble).square().sum().div_(holders));
      }
    }
    reduce(*tp_comm_, parts, comm::ReduceOp::kSum);
    return parts.item<double>();
  }
  void scale_grads(double factor) override { inner_->scale_grads(factor); }
  void optimizer_step(const optim::AdamWConfig& c, double lr) override { inner_->optimizer_step(c, lr); }
  void discard_grads() override { inner_->discard_grads(); }

  // ---- the state in the full model's layout ----
  FullState gather_state() override {
    FullState local = inner_->gather_state(), full;
    full.step = local.step;
    full.params = to_full(local.params);
    full.exp_avg = to_full(local.exp_avg);
    full.exp_avg_sq = to_full(local.exp_avg_sq);
    return full;
  }

  FullState part_of(const FullState& s) override {
    FullState local;
    local.step = s.step;
    local.params = to_local(s.params);
    local.exp_avg = to_local(s.exp_avg);
    local.exp_avg_sq = to_local(s.exp_avg_sq);
    return local;
  }

  void load_state(const FullState& s) override { inner_->load_state(part_of(s)); }

  // In the coordinates of this rank's part (compute_layout()).
  LocalState local_state() override { return inner_->local_state(); }

  MemoryPrediction predict_memory() const override {
    MemoryPrediction p = inner_->predict_memory();
    p.formula += strformat(" (this rank's part of the model, tp %d)", tp_);
    return p;
  }

 private:
  // In place over `c`, the tensor contiguous on the strategy's device.
  void reduce(comm::Communicator& c, at::Tensor& t, comm::ReduceOp op) const {
    LB_CHECK(t.is_contiguous(), "tensor parallelism: a collective on a strided tensor");
    c.all_reduce(t.data_ptr(), size_t(t.numel()), comm_dtype(t.scalar_type()), op);
  }

  // Every rank's part of each unit's trainable tensor, gathered over the group and placed in the full layout.
  std::vector<at::Tensor> to_full(const std::vector<at::Tensor>& local) {
    std::vector<at::Tensor> out(local.size());
    for (size_t u = 0; u < local.size(); ++u) {
      if (!local[u].defined()) continue;
      at::Tensor mine = local[u].contiguous();
      at::Tensor all = at::empty({tp_, mine.numel()}, mine.options());
      tp_comm_->all_gather(mine.data_ptr(), all.data_ptr(), size_t(mine.numel()), comm_dtype(mine.scalar_type()));
      out[u] = at::zeros({m_.units[u].trainable_numel}, mine.options());
      for (int r = 0; r < tp_; ++r)
        model::tp_copy_unit(m_, local_, tp_, r, static_cast<int>(u), false, out[u], all[r], false);
    }
    return out;
  }

  std::vector<at::Tensor> to_local(const std::vector<at::Tensor>& full) {
    std::vector<at::Tensor> out(full.size());
    for (size_t u = 0; u < full.size(); ++u) {
      if (!full[u].defined()) continue;
      out[u] = at::zeros({local_.units[u].trainable_numel}, full[u].options());
      model::tp_copy_unit(m_, local_, tp_, rank_, static_cast<int>(u), false, full[u], out[u], true);
    }
    return out;
  }

  comm::Communicator* tp_comm_;
  comm::Communicator* kv_comm_;
  int tp_, rank_;
  model::ModelLayout local_;
  model::TensorParallel info_;
  std::unique_ptr<TrainingStrategy> inner_;
};

}  // namespace

std::unique_ptr<TrainingStrategy> make_tensor_parallel(const StrategySpec& spec, const model::ModelLayout& m,
                                                       at::ScalarType dtype, comm::Communicator* dp,
                                                       device::Device& dev, const MeshGroups& mesh) {
  if (dev.is_cuda() && !mesh.tp->device_buffers())
    throw Error("tensor parallelism: the model is on " + dev.str() + " but the tensor-parallel group's communicator "
                "takes host buffers");
  return std::make_unique<TensorParallelStrategy>(spec, m, dtype, dp, dev, mesh);
}

}  // namespace lorabench::strategy
