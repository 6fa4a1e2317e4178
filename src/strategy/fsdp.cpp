// fsdp: ZeRO-3 semantics. At rest every rank holds piece r of every unit's flat buffers (base weights,
// LoRA or master weights, gradients, AdamW state). A decoder layer's weights are all-gathered before its
// forward (optionally while the previous layer computes), freed after it when reshard_after_forward, and
// gathered again for its backward; its gradients are reduce-scattered back to their owners.
//
// The embedding (and an untied LM head) is sharded by vocabulary rows instead and never gathered: the
// lookup all-gathers the token ids and reduce-scatters the rows each rank owns, and the fused head + loss
// all-gathers the hidden states, computes softmax statistics over the local rows and combines them
// across ranks. That moves O(tokens x hidden) instead of O(vocabulary x hidden) and keeps the largest
// matrix of a small model from ever being resident in full.
//
// hsdp is this strategy on one shard group of the mesh, with `replicate_` joining the groups: each gradient
// shard, once reduce-scattered within the group, is all-reduced over the ranks that hold the same shard in
// the other groups (issued one layer later in the backward, so it overlaps the next layer's computation;
// the vocabulary units' shards, which the embedding and head accumulate locally, on the last micro-step).
// Everything else (gathers, the vocabulary exchange, the norm, checkpoints' gathered state) stays inside
// the group, whose replicas hold the same values.
#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "lorabench/core/error.hpp"
#include "lorabench/model/weights.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "strategy_common.hpp"

namespace lorabench::strategy {

namespace {

class FsdpStrategy final : public TrainingStrategy {
 public:
  FsdpStrategy(const StrategySpec& spec, const model::ModelLayout& m, at::ScalarType dtype, comm::Communicator* comm,
               device::Device& dev, comm::Communicator* replicate)
      : TrainingStrategy(m, dtype, comm, dev), spec_(spec), world_(comm->size()), rank_(comm->rank()),
        replicate_(replicate) {
    units_.resize(m_.units.size());
    const int64_t D = m_.shape.hidden;
    // Rows per rank of the (V, D) vocabulary matrices, covering the unit's whole (aligned) buffer.
    const int64_t rows = (m_.units[0].compute_numel + D - 1) / D;
    rows_per_rank_ = (rows + world_ - 1) / world_;
    for (size_t u = 0; u < m_.units.size(); ++u) {
      Unit& x = units_[u];
      const auto& lu = m_.units[u];
      x.vocab = lu.kind == model::UnitKind::kEmbed || lu.kind == model::UnitKind::kHead;
      if (x.vocab) {
        // Row sharding: the unit is exactly one (V, D) matrix; pieces are whole rows.
        LB_CHECK(lu.compute.size() == 1 && lu.compute[0].offset == 0, "vocabulary unit must hold one matrix");
        x.c_piece = rows_per_rank_ * D;
      } else {
        x.c_piece = (lu.compute_numel + world_ - 1) / world_;
      }
      x.c_padded = x.c_piece * world_;
      if (lu.trainable_numel > 0) {
        x.t_piece = x.vocab ? x.c_piece : (lu.trainable_numel + world_ - 1) / world_;
        x.t_padded = x.t_piece * world_;
        for (const auto& s : lu.trainable)
          if (s.decay) x.decay.emplace_back(s.offset, s.numel);
        x.decay = optim::intersect(x.decay, rank_ * x.t_piece, x.t_piece);
      }
    }
  }

  const char* name() const override { return replicate_ ? "hsdp" : "fsdp"; }

  void initialize(const InitSource& src) override {
    const auto f32 = opts(at::kFloat);
    for (size_t u = 0; u < units_.size(); ++u) {
      Unit& x = units_[u];
      const auto& lu = m_.units[u];
      at::Tensor full_t;
      if (src.random_values && src.snapshot != nullptr && !m_.full_finetune) {
        // A snapshot's base weights: this rank's piece straight from the file (the load's peak is the pieces, not
        // a whole unit and a converted copy of its largest tensor); the LoRA weights as fill_unit makes them.
        x.c_shard = at::empty({x.c_piece}, opts(dtype_));
        model::load_unit_range(*src.snapshot, m_, static_cast<int>(u), x.c_shard, rank_ * x.c_piece);
        if (lu.trainable_numel > 0) {
          full_t = at::zeros({x.t_padded}, f32);
          model::init_lora(m_, static_cast<int>(u), full_t.narrow(0, 0, lu.trainable_numel), src.seed);
        }
      } else {
        // Build the full unit once, keep this rank's piece.
        at::Tensor full_c = at::zeros({x.c_padded}, opts(dtype_));
        if (lu.trainable_numel > 0)
          full_t = (m_.full_finetune && dtype_ == at::kFloat) ? full_c : at::zeros({x.t_padded}, f32);
        fill_unit(m_, static_cast<int>(u), src, full_c.narrow(0, 0, std::min(x.c_padded, lu.compute_numel)),
                  full_t.defined() ? full_t.narrow(0, 0, lu.trainable_numel) : at::Tensor());
        x.c_shard = full_c.narrow(0, rank_ * x.c_piece, x.c_piece).clone();
      }
      if (full_t.defined()) {
        x.t_shard = (m_.full_finetune && dtype_ == at::kFloat) ? x.c_shard
                                                               : full_t.narrow(0, rank_ * x.t_piece, x.t_piece).clone();
        x.g_shard = at::zeros({x.t_piece}, f32);
        x.m = at::zeros({x.t_piece}, f32);
        x.v = at::zeros({x.t_piece}, f32);
      }
    }
  }

  // ---- UnitProvider ----
  at::Tensor compute(int unit, model::Pass pass) override {
    issue_gather(unit);
    prefetch_next(unit, pass);
    Unit& x = units_[unit];
    wait_gather(x);
    if (bounded_prefetch() && m_.units[unit].kind == model::UnitKind::kLayer) {
      window_start_ = dev_.memory().current;
      dev_.reset_window_peak();
    }
    return x.c_full;
  }

  at::Tensor trainable(int unit, model::Pass pass) override {
    Unit& x = units_[unit];
    if (m_.full_finetune || !x.t_shard.defined()) return at::Tensor();  // full FT computes from c_full
    issue_gather(unit);
    wait_gather(x);
    return x.t_full;
  }

  at::Tensor grad(int unit) override {
    Unit& x = units_[unit];
    if (!x.t_shard.defined()) return at::Tensor();
    LB_CHECK(!x.vocab, "vocabulary units keep their gradients sharded");
    if (!x.g_full.defined()) x.g_full = at::zeros({x.t_padded}, opts(at::kFloat));
    return x.g_full.narrow(0, 0, m_.units[unit].trainable_numel);
  }

  void release(int unit, model::Pass pass) override {
    Unit& x = units_[unit];
    if (bounded_prefetch() && m_.units[unit].kind == model::UnitKind::kLayer && window_start_ >= 0) {
      transient_ = std::max(transient_, dev_.window_peak() - window_start_);
      window_start_ = -1;
    }
    if (pass == model::Pass::kForward && !spec_.reshard_after_forward && m_.units[unit].kind == model::UnitKind::kLayer)
      return;
    wait_gather(x);  // a prefetched gather must land before its buffer is dropped
    x.c_full = at::Tensor();
    x.t_full = at::Tensor();
  }

  void begin_micro(int micro) override {
    last_micro_ = micro == spec_.grad_accum - 1;
    sync_now_ = spec_.sync_every_micro || last_micro_;
  }

  void backward_done(int unit) override {
    comm_->progress();
    Unit& x = units_[unit];
    if (!x.t_shard.defined() || x.vocab || !sync_now_) return;
    if (!x.g_full.defined()) x.g_full = at::zeros({x.t_padded}, opts(at::kFloat));
    x.g_recv = at::empty({x.t_piece}, opts(at::kFloat));
    x.g_work = comm_->reduce_scatter_async(x.g_full.data_ptr(), x.g_recv.data_ptr(), x.t_piece,
                                           comm::DataType::kFloat32, comm::ReduceOp::kSum);
    if (replicate_) {
      // The previous unit's shard is complete by now (or nearly): on to its replicas. A fixed lag of one
      // unit, so that every rank issues the replicate dimension's collectives in the same order.
      if (across_pending_ >= 0) reduce_across_replicas(units_[across_pending_]);
      across_pending_ = unit;
    }
  }

  void end_micro() override {
    if (!sync_now_) return;
    if (replicate_) {
      if (across_pending_ >= 0) reduce_across_replicas(units_[across_pending_]);
      across_pending_ = -1;
      // The vocabulary units' shards hold this rank's whole accumulation (no reduce-scatter): summed over
      // the replicas once, on the last micro-step.
      for (auto& x : units_)
        if (last_micro_ && x.vocab && x.g_shard.defined())
          x.a_work = replicate_->all_reduce_async(x.g_shard.data_ptr(), x.t_piece, comm::DataType::kFloat32,
                                                  comm::ReduceOp::kSum);
    }
    for (auto& x : units_) {
      if (x.g_work) {
        comm_->wait(x.g_work);
        x.g_work.reset();
      }
      if (x.a_work) {
        replicate_->wait(x.a_work);
        x.a_work.reset();
      }
      if (!x.g_recv.defined()) continue;
      x.g_shard.add_(x.g_recv);
      x.g_recv = at::Tensor();
      x.g_full = at::Tensor();
    }
  }

  double grad_sq_norm() override {
    // Each shard's fp32 norm squared in fp64, summed in unit order on the device: one host sync.
    at::Tensor acc = at::zeros({}, opts(at::kDouble));
    for (auto& x : units_)
      if (x.g_shard.defined()) acc.add_(x.g_shard.norm().to(at::kDouble).square());
    return all_reduce_sum(acc.item<double>());
  }

  void scale_grads(double f) override {
    for (auto& x : units_)
      if (x.g_shard.defined()) x.g_shard.mul_(f);
  }

  void optimizer_step(const optim::AdamWConfig& c, double lr) override {
    ++step_;
    high_water_ = std::max(high_water_, dev_.memory().peak);
    if (bounded_prefetch()) agree_prefetch_bound();
    for (auto& x : units_) {
      if (!x.t_shard.defined()) continue;
      optim::adamw_update(x.t_shard, x.g_shard, x.m, x.v, step_, lr, c, x.decay);
      if (m_.full_finetune && dtype_ != at::kFloat) x.c_shard.copy_(x.t_shard);
    }
    discard_grads();
  }

  void discard_grads() override {
    for (auto& x : units_) {
      if (x.g_shard.defined()) x.g_shard.zero_();
      x.g_full = at::Tensor();
    }
  }

  FullState gather_state() override {
    FullState s;
    s.step = step_;
    for (size_t u = 0; u < units_.size(); ++u) {
      Unit& x = units_[u];
      if (!x.t_shard.defined()) {
        s.params.emplace_back();
        s.exp_avg.emplace_back();
        s.exp_avg_sq.emplace_back();
        continue;
      }
      const int64_t n = m_.units[u].trainable_numel;
      s.params.push_back(gather_full(x.t_shard, x.t_piece).narrow(0, 0, n));
      s.exp_avg.push_back(gather_full(x.m, x.t_piece).narrow(0, 0, n));
      s.exp_avg_sq.push_back(gather_full(x.v, x.t_piece).narrow(0, 0, n));
    }
    return s;
  }

  void load_state(const FullState& s) override {
    step_ = s.step;
    for (size_t u = 0; u < units_.size(); ++u) {
      Unit& x = units_[u];
      if (!x.t_shard.defined()) continue;
      copy_piece(s.params[u], x.t_shard, x.t_piece);
      copy_piece(s.exp_avg[u], x.m, x.t_piece);
      copy_piece(s.exp_avg_sq[u], x.v, x.t_piece);
      if (m_.full_finetune && dtype_ != at::kFloat) x.c_shard.copy_(x.t_shard);
    }
    discard_grads();
  }

  LocalState local_state() override {
    LocalState s;
    s.step = step_;
    s.replicas = replicate_ ? replicate_->size() : 1;
    s.replicated_params.resize(units_.size());  // nothing trainable is replicated at rest (within a group)
    for (size_t u = 0; u < units_.size(); ++u) {
      Unit& x = units_[u];
      if (!x.t_shard.defined()) continue;
      // Piece r covers [r * t_piece, (r + 1) * t_piece) of the padded unit; the padding is not owned state.
      const int64_t lo = rank_ * x.t_piece, hi = std::min(m_.units[u].trainable_numel, lo + x.t_piece);
      if (hi <= lo) continue;
      s.owned.push_back({static_cast<int>(u), lo, x.t_shard.narrow(0, 0, hi - lo), x.m.narrow(0, 0, hi - lo),
                         x.v.narrow(0, 0, hi - lo)});
    }
    return s;
  }

  int64_t prefetched_layers() const override { return prefetched_; }

  MemoryPrediction predict_memory() const override { return predict_model_state(name(), m_, dtype_, world_); }

  // ---- vocabulary-sharded embedding and head ----
  at::Tensor embed_lookup(const model::ModelLayout& m, const at::Tensor& ids) override {
    const int64_t N = ids.size(0), D = m.shape.hidden;
    at::Tensor ids_all = all_gather_tensor(ids.contiguous());  // (W*N)
    at::Tensor x_all =
        model::embed_rows_lookup(units_[0].c_shard.view({rows_per_rank_, D}), rank_ * rows_per_rank_, ids_all);
    at::Tensor x = at::empty({N, D}, opts(dtype_));
    comm_->reduce_scatter(x_all.data_ptr(), x.data_ptr(), N * D, comm_dtype(dtype_), comm::ReduceOp::kSum);
    return x;
  }

  model::HeadLoss lm_head_loss(const model::ModelLayout& m, const at::Tensor& hn, const at::Tensor& targets,
                               double grad_scale, int64_t chunk) override {
    if (chunk <= 0)
      throw ConfigError("model.fused_head: the unfused reference head needs the whole head matrix on one rank; "
                        "fsdp keeps it sharded by vocabulary rows (use single or ddp to compare the paths)");
    const int64_t N = hn.size(0), D = m.shape.hidden, V = m.shape.vocab_size;
    Unit& hu = units_[m.head_unit()];
    const int64_t row0 = rank_ * rows_per_rank_;
    const int64_t valid_rows = std::clamp<int64_t>(V - row0, 0, rows_per_rank_);
    at::Tensor rows = hu.c_shard.view({rows_per_rank_, D}).narrow(0, 0, valid_rows);

    // Every rank's tokens against this rank's rows: a chunk of chunk/W rows keeps the (tokens x chunk)
    // transients the size of the unsharded head's.
    chunk = std::max<int64_t>(1024, chunk / world_);
    at::Tensor h_all = all_gather_tensor(hn.contiguous());           // (W*N, D)
    at::Tensor t_all = all_gather_tensor(targets.contiguous());       // (W*N)
    at::Tensor valid = t_all.ne(-100);
    at::Tensor tgt = at::where(valid, t_all, at::full_like(t_all, -1));  // ignored: in no rank's rows
    model::HeadReductions across_ranks;
    across_ranks.max = [this](at::Tensor& t) {
      comm_->all_reduce(t.data_ptr(), size_t(t.numel()), comm::DataType::kFloat32, comm::ReduceOp::kMax);
    };
    across_ranks.sum = [this](at::Tensor& t) {
      comm_->all_reduce(t.data_ptr(), size_t(t.numel()), comm::DataType::kFloat32, comm::ReduceOp::kSum);
    };
    model::HeadTerms t = model::sharded_head_terms(m.kernels, h_all, rows, row0, tgt, valid, grad_scale, chunk, across_ranks);

    model::HeadLoss out;
    out.counted = valid.narrow(0, rank_ * N, N).sum();
    out.loss_sum = t.losses.narrow(0, rank_ * N, N).to(at::kDouble).sum();
    // dh of every token from this rank's rows, summed over ranks by the reduce-scatter that also hands
    // each rank its own tokens.
    at::Tensor d_all = t.d.contiguous();
    at::Tensor dh = at::empty({N, D}, opts(at::kFloat));  // reduced in fp32, rounded once like the unsharded head
    comm_->reduce_scatter(d_all.data_ptr(), dh.data_ptr(), N * D, comm::DataType::kFloat32, comm::ReduceOp::kSum);
    out.dh = dh.to(dtype_);

    if (m.full_finetune) {
      at::Tensor g_rows = hu.g_shard.view({rows_per_rank_, D}).narrow(0, 0, valid_rows);
      model::head_weight_grad(h_all, rows, row0, tgt, t.lse, t.token_scale, g_rows, chunk);
    }
    return out;
  }

  void embed_backward(const model::ModelLayout& m, const at::Tensor& ids, const at::Tensor& dx) override {
    const int64_t D = m.shape.hidden;
    at::Tensor ids_all = all_gather_tensor(ids.contiguous());
    at::Tensor dx_all = all_gather_tensor(dx.to(at::kFloat).contiguous());  // (W*N, D)
    at::Tensor local = ids_all - rank_ * rows_per_rank_;
    at::Tensor own = local.ge(0).logical_and_(local.lt(rows_per_rank_)).nonzero().view({-1});
    units_[0].g_shard.view({rows_per_rank_, D}).index_add_(0, local.index_select(0, own), dx_all.index_select(0, own));
  }

 private:
  struct Unit {
    bool vocab = false;
    int64_t c_piece = 0, c_padded = 0, t_piece = 0, t_padded = 0;
    at::Tensor c_shard, t_shard, g_shard, m, v;
    optim::Ranges decay;  // within the owned trainable piece
    at::Tensor c_full, t_full, g_full, g_recv;
    std::unique_ptr<comm::Work> c_work, t_work, g_work;
    std::unique_ptr<comm::Work> a_work;  // hsdp: the all-reduce of the gradient shard across the replicas
  };

  // hsdp: waits for x's reduce-scatter within the group and starts the all-reduce of its shard across the
  // replicas (end_micro waits for it).
  void reduce_across_replicas(Unit& x) {
    comm_->wait(x.g_work);
    x.g_work.reset();
    x.a_work = replicate_->all_reduce_async(x.g_recv.data_ptr(), x.t_piece, comm::DataType::kFloat32,
                                            comm::ReduceOp::kSum);
  }

  void issue_gather(int unit) {
    Unit& x = units_[unit];
    if (!x.c_full.defined()) {
      x.c_full = at::empty({x.c_padded}, opts(dtype_));
      x.c_work = comm_->all_gather_async(x.c_shard.data_ptr(), x.c_full.data_ptr(), x.c_piece, comm_dtype(dtype_));
    }
    if (!m_.full_finetune && x.t_shard.defined() && !x.t_full.defined()) {
      x.t_full = at::empty({x.t_padded}, opts(at::kFloat));
      x.t_work = comm_->all_gather_async(x.t_shard.data_ptr(), x.t_full.data_ptr(), x.t_piece,
                                         comm::DataType::kFloat32);
    }
  }

  void wait_gather(Unit& x) {
    if (x.c_work) {
      comm_->wait(x.c_work);
      x.c_work.reset();
    }
    if (x.t_work) {
      comm_->wait(x.t_work);
      x.t_work.reset();
    }
  }

  bool bounded_prefetch() const {
    return spec_.prefetch && spec_.prefetch_within_peak && dev_.memory_tracked();
  }

  // Every rank must issue its collectives in the same order, and a prefetch moves a layer's gather ahead
  // of the previous layer's reduce-scatter in the backward. So the bound prefetch_next decides with is the
  // ranks' common one, agreed at every optimizer step: the lowest high water and the largest rise within a
  // layer over all ranks. Ranks whose own peaks differ (a data-dependent allocation, as full fine-tuning's
  // embedding gradient rows) would otherwise prefetch different layers, and the collectives of one rank
  // would meet different ones on another (a hang, or data mixed between layers). One all-reduce of two
  // numbers per step.
  void agree_prefetch_bound() {
    std::vector<double> v = {double(high_water_), -double(transient_)};
    all_reduce_min(v);
    agreed_high_water_ = static_cast<int64_t>(v[0]);
    agreed_transient_ = static_cast<int64_t>(-v[1]);
  }

  // Starts gathering the decoder layer that will be needed next (forward: the following layer;
  // backward: the preceding one). With prefetch_within_peak, only when the rank's tensor memory, plus the
  // gathered buffers, plus the largest rise of tensor memory seen within a layer's computation, stays
  // within the highest step peak so far: activations are largest at the end of the forward and the start
  // of the backward, where a second gathered layer would otherwise set the step's peak. Those layers are
  // gathered on demand instead (their gather is exposed communication).
  void prefetch_next(int unit, model::Pass pass) {
    if (!spec_.prefetch || m_.units[unit].kind != model::UnitKind::kLayer) return;
    const int next = pass == model::Pass::kForward ? unit + 1 : unit - 1;
    if (next < 1 || next > static_cast<int>(m_.shape.layers)) return;
    const Unit& y = units_[next];
    if (bounded_prefetch() && !y.c_full.defined()) {
      // The bound is 0 in the first step: nothing is prefetched there, so its peak is the step's
      // footprint without prefetching, the bound of every later step.
      int64_t need = y.c_padded * static_cast<int64_t>(at::elementSize(dtype_));
      if (!m_.full_finetune && y.t_shard.defined() && !y.t_full.defined()) need += y.t_padded * 4;
      if (dev_.memory().current + need + agreed_transient_ > agreed_high_water_) return;
    }
    if (!units_[next].c_full.defined()) ++prefetched_;
    issue_gather(next);
  }

  at::Tensor all_gather_tensor(const at::Tensor& t) {
    std::vector<int64_t> shape = t.sizes().vec();
    shape[0] *= world_;
    at::Tensor out = at::empty(shape, t.options());
    comm_->all_gather(t.data_ptr(), out.data_ptr(), t.numel(), comm_dtype(t.scalar_type()));
    return out;
  }

  at::Tensor gather_full(const at::Tensor& piece, int64_t n) {
    at::Tensor out = at::empty({n * world_}, piece.options());
    comm_->all_gather(piece.data_ptr(), out.data_ptr(), n, comm_dtype(piece.scalar_type()));
    return out;
  }

  void copy_piece(const at::Tensor& full, at::Tensor& piece, int64_t n) {
    const int64_t lo = rank_ * n, hi = std::min<int64_t>(full.numel(), lo + n);
    piece.zero_();
    if (hi > lo) piece.narrow(0, 0, hi - lo).copy_(full.narrow(0, lo, hi - lo));
  }

  StrategySpec spec_;
  int world_, rank_;  // of the shard group (hsdp) or the job (fsdp)
  comm::Communicator* replicate_ = nullptr;  // hsdp: the ranks holding this rank's shard in the other groups
  int across_pending_ = -1;  // hsdp: the unit whose reduce-scatter was issued last and not yet reduced across
  bool last_micro_ = true;
  int64_t rows_per_rank_ = 0;
  std::vector<Unit> units_;
  bool sync_now_ = true;
  int64_t step_ = 0;
  int64_t high_water_ = 0;       // the highest per-step tensor-memory peak of the steps so far
  int64_t transient_ = 0;        // the largest rise of tensor memory within one layer's computation
  int64_t agreed_high_water_ = 0;  // what prefetch_next bounds by: the above, agreed over the ranks at the
  int64_t agreed_transient_ = 0;   // last optimizer step (agree_prefetch_bound)
  int64_t window_start_ = -1;    // tensor memory when the current layer's computation started
  int64_t prefetched_ = 0;
};

}  // namespace

std::unique_ptr<TrainingStrategy> make_fsdp(const StrategySpec& spec, const model::ModelLayout& m, at::ScalarType dtype,
                                            comm::Communicator* comm, device::Device& dev,
                                            comm::Communicator* replicate) {
  return std::make_unique<FsdpStrategy>(spec, m, dtype, comm, dev, replicate);
}

}  // namespace lorabench::strategy
