// single, ddp, zero1, zero2: every rank holds the full model; they differ in how gradients are reduced
// and where the optimizer state lives.
//
// The trainable parameters and their gradients live in buckets: consecutive units in backward order,
// about parallel.bucket_mb each, one contiguous fp32 buffer per bucket. A bucket's reduction starts the
// moment backward has finished its last unit, so it overlaps the backward of the units still to come.
// ZeRO shards every bucket into world-size pieces (padded): rank r owns piece r of each bucket.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "strategy_common.hpp"

namespace lorabench::strategy {

namespace {

enum class Kind { kSingle, kDdp, kZero1, kZero2 };

class ReplicatedStrategy final : public TrainingStrategy {
 public:
  ReplicatedStrategy(Kind kind, const StrategySpec& spec, const model::ModelLayout& m, at::ScalarType dtype,
                     comm::Communicator* comm, device::Device& dev)
      : TrainingStrategy(m, dtype, comm, dev), kind_(kind), spec_(spec) {
    world_ = comm_ ? comm_->size() : 1;
    rank_ = comm_ ? comm_->rank() : 0;
    build_buckets();
  }

  const char* name() const override {
    switch (kind_) {
      case Kind::kSingle: return "single";
      case Kind::kDdp: return "ddp";
      case Kind::kZero1: return "zero1";
      case Kind::kZero2: return "zero2";
    }
    return "?";
  }

  void initialize(const InitSource& src) override {
    const auto f32 = opts(at::kFloat);
    for (auto& b : buckets_) {
      b.params = at::zeros({b.padded}, f32);
      if (kind_ != Kind::kZero2) b.grads = at::zeros({b.padded}, f32);
      const int64_t opt = sharded() ? piece(b) : b.padded;
      b.m = at::zeros({opt}, f32);
      b.v = at::zeros({opt}, f32);
      if (kind_ == Kind::kZero2) b.shard_grad = at::zeros({piece(b)}, f32);
    }
    compute_.assign(m_.units.size(), at::Tensor());
    for (size_t u = 0; u < m_.units.size(); ++u) {
      const auto& unit = m_.units[u];
      at::Tensor t = trainable_view(static_cast<int>(u));
      if (m_.full_finetune && dtype_ == at::kFloat) {
        compute_[u] = t;  // fp32 full fine-tuning: the master weights are the compute weights
      } else {
        compute_[u] = at::zeros({unit.compute_numel}, opts(dtype_));
      }
      fill_unit(m_, static_cast<int>(u), src, compute_[u], t);
    }
  }

  at::Tensor compute(int unit, model::Pass) override { return compute_[unit]; }
  at::Tensor trainable(int unit, model::Pass) override { return trainable_view(unit); }

  at::Tensor grad(int unit) override {
    const int bi = unit_bucket_[unit];
    if (bi < 0) return at::Tensor();
    Bucket& b = buckets_[bi];
    at::Tensor& buf = use_scratch_ ? b.scratch : b.grads;
    if (!buf.defined()) buf = at::zeros({b.padded}, opts(at::kFloat));  // zero2's per-step gradient buffer
    return buf.narrow(0, unit_offset_[unit], m_.units[unit].trainable_numel);
  }

  void begin_micro(int micro) override {
    // zero2 reduce-scatters even on one rank: that is how its gradients reach the owned shard.
    sync_now_ = (world_ > 1 || kind_ == Kind::kZero2) && (spec_.sync_every_micro || micro == spec_.grad_accum - 1);
    // ddp/zero1 reducing every micro-step with accumulation: this micro-step's gradients go to a
    // scratch buffer that is reduced and then added, so earlier micro-steps are not reduced twice.
    use_scratch_ = sync_now_ && spec_.sync_every_micro && spec_.grad_accum > 1 &&
                   (kind_ == Kind::kDdp || kind_ == Kind::kZero1);
    for (auto& b : buckets_) {
      b.remaining = static_cast<int>(b.units.size());
      if (use_scratch_) b.scratch = at::zeros({b.padded}, opts(at::kFloat));
    }
  }

  void backward_done(int unit) override {
    if (comm_) comm_->progress();
    const int bi = unit_bucket_[unit];
    if (bi < 0) return;
    Bucket& b = buckets_[bi];
    if (--b.remaining > 0 || !sync_now_) return;
    if (kind_ == Kind::kZero2) {
      if (!b.grads.defined()) b.grads = at::zeros({b.padded}, opts(at::kFloat));
      b.recv = at::empty({piece(b)}, opts(at::kFloat));
      b.work = comm_->reduce_scatter_async(b.grads.data_ptr(), b.recv.data_ptr(), piece(b), comm::DataType::kFloat32,
                                           comm::ReduceOp::kSum);
    } else {
      at::Tensor& buf = use_scratch_ ? b.scratch : b.grads;
      b.work = comm_->all_reduce_async(buf.data_ptr(), b.padded, comm::DataType::kFloat32, comm::ReduceOp::kSum);
    }
  }

  void end_micro() override {
    if (!sync_now_) return;
    for (auto& b : buckets_) {
      LB_CHECK(b.remaining == 0, "backward did not finish every unit of a bucket");
      if (b.work) {
        comm_->wait(b.work);
        b.work.reset();
      }
      if (kind_ == Kind::kZero2) {
        b.shard_grad.add_(b.recv);
        b.recv = at::Tensor();
        b.grads = at::Tensor();  // the full gradient buffer only lives until its reduce-scatter
      } else if (use_scratch_) {
        b.grads.add_(b.scratch);
        b.scratch = at::Tensor();
      }
    }
  }

  at::Tensor step_grad(int unit) override {
    const int bi = unit_bucket_[unit];
    if (bi < 0 || kind_ == Kind::kZero2) return at::Tensor();
    return buckets_[bi].grads.narrow(0, unit_offset_[unit], m_.units[unit].trainable_numel);
  }

  double grad_sq_norm() override {
    // Each bucket's fp32 norm squared in fp64, summed in bucket order on the device: one host sync.
    at::Tensor acc = at::zeros({}, opts(at::kDouble));
    for (auto& b : buckets_) {
      const at::Tensor& g = kind_ == Kind::kZero2 ? b.shard_grad : b.grads;
      acc.add_(g.norm().to(at::kDouble).square());
    }
    const double local = acc.item<double>();
    if (kind_ != Kind::kZero2 || world_ == 1) return local;
    return all_reduce_sum(local);
  }

  void scale_grads(double f) override {
    for (auto& b : buckets_) (kind_ == Kind::kZero2 ? b.shard_grad : b.grads).mul_(f);
  }

  void optimizer_step(const optim::AdamWConfig& c, double lr) override {
    ++step_;
    std::vector<std::unique_ptr<comm::Work>> gathers;
    for (auto& b : buckets_) {
      if (!sharded()) {
        optim::adamw_update(b.params, b.grads, b.m, b.v, step_, lr, c, b.decay);
        continue;
      }
      const int64_t P = piece(b);
      at::Tensor p = b.params.narrow(0, rank_ * P, P);
      at::Tensor g = kind_ == Kind::kZero2 ? b.shard_grad : b.grads.narrow(0, rank_ * P, P);
      optim::adamw_update(p, g, b.m, b.v, step_, lr, c, optim::intersect(b.decay, rank_ * P, P));
      gathers.push_back(comm_->all_gather_async(p.data_ptr(), b.params.data_ptr(), P, comm::DataType::kFloat32));
    }
    for (auto& w : gathers) comm_->wait(w);
    refresh_compute();
    discard_grads();
  }

  void discard_grads() override {
    for (auto& b : buckets_) {
      if (b.grads.defined()) b.grads.zero_();
      if (b.shard_grad.defined()) b.shard_grad.zero_();
    }
  }

  FullState gather_state() override {
    FullState s;
    s.step = step_;
    std::vector<at::Tensor> m_full, v_full;
    for (auto& b : buckets_) {
      if (!sharded()) {
        m_full.push_back(b.m);
        v_full.push_back(b.v);
        continue;
      }
      at::Tensor mf = at::empty({b.padded}, opts(at::kFloat)), vf = at::empty({b.padded}, opts(at::kFloat));
      comm_->all_gather(b.m.data_ptr(), mf.data_ptr(), piece(b), comm::DataType::kFloat32);
      comm_->all_gather(b.v.data_ptr(), vf.data_ptr(), piece(b), comm::DataType::kFloat32);
      m_full.push_back(mf);
      v_full.push_back(vf);
    }
    for (size_t u = 0; u < m_.units.size(); ++u) {
      const int bi = unit_bucket_[u];
      if (bi < 0) {
        s.params.emplace_back();
        s.exp_avg.emplace_back();
        s.exp_avg_sq.emplace_back();
        continue;
      }
      const int64_t off = unit_offset_[u], n = m_.units[u].trainable_numel;
      s.params.push_back(buckets_[bi].params.narrow(0, off, n).clone());
      s.exp_avg.push_back(m_full[bi].narrow(0, off, n).clone());
      s.exp_avg_sq.push_back(v_full[bi].narrow(0, off, n).clone());
    }
    return s;
  }

  void load_state(const FullState& s) override {
    step_ = s.step;
    for (size_t u = 0; u < m_.units.size(); ++u) {
      const int bi = unit_bucket_[u];
      if (bi < 0) continue;
      Bucket& b = buckets_[bi];
      const int64_t off = unit_offset_[u], n = m_.units[u].trainable_numel;
      b.params.narrow(0, off, n).copy_(s.params[u]);
      if (!sharded()) {
        b.m.narrow(0, off, n).copy_(s.exp_avg[u]);
        b.v.narrow(0, off, n).copy_(s.exp_avg_sq[u]);
        continue;
      }
      // The part of [off, off + n) inside this rank's piece.
      const int64_t P = piece(b), lo = std::max(off, rank_ * P), hi = std::min(off + n, (rank_ + 1) * P);
      if (hi > lo) {
        b.m.narrow(0, lo - rank_ * P, hi - lo).copy_(s.exp_avg[u].narrow(0, lo - off, hi - lo));
        b.v.narrow(0, lo - rank_ * P, hi - lo).copy_(s.exp_avg_sq[u].narrow(0, lo - off, hi - lo));
      }
    }
    refresh_compute();
    discard_grads();
  }

  LocalState local_state() override {
    LocalState s;
    s.step = step_;
    s.replicated_params.resize(m_.units.size());
    for (size_t u = 0; u < m_.units.size(); ++u) {
      const int bi = unit_bucket_[u];
      if (bi < 0) continue;
      Bucket& b = buckets_[bi];
      const int64_t off = unit_offset_[u], n = m_.units[u].trainable_numel;
      s.replicated_params[u] = b.params.narrow(0, off, n);
      if (!sharded()) {
        s.owned.push_back({static_cast<int>(u), 0, b.params.narrow(0, off, n), b.m.narrow(0, off, n),
                           b.v.narrow(0, off, n)});
        continue;
      }
      // The part of [off, off + n) inside this rank's piece: the moments live only there, and the rank's
      // optimizer step updates those parameters (the rest of its copy is what the all-gather delivered).
      const int64_t P = piece(b), lo = std::max(off, rank_ * P), hi = std::min(off + n, (rank_ + 1) * P);
      if (hi <= lo) continue;
      s.owned.push_back({static_cast<int>(u), lo - off, b.params.narrow(0, lo, hi - lo),
                         b.m.narrow(0, lo - rank_ * P, hi - lo), b.v.narrow(0, lo - rank_ * P, hi - lo)});
    }
    return s;
  }

  MemoryPrediction predict_memory() const override { return predict_model_state(name(), m_, dtype_, world_); }

 private:
  struct Bucket {
    std::vector<int> units;  // backward order
    int64_t numel = 0;       // used elements
    int64_t padded = 0;      // rounded up to a multiple of the world size
    at::Tensor params, grads, scratch, shard_grad, recv, m, v;
    optim::Ranges decay;     // weight-decay ranges in bucket coordinates
    int remaining = 0;
    std::unique_ptr<comm::Work> work;
  };

  bool sharded() const { return kind_ == Kind::kZero1 || kind_ == Kind::kZero2; }
  int64_t piece(const Bucket& b) const { return b.padded / world_; }

  void build_buckets() {
    unit_bucket_.assign(m_.units.size(), -1);
    unit_offset_.assign(m_.units.size(), 0);
    const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(spec_.bucket_mb * 1024 * 1024 / 4));
    Bucket cur;
    auto close = [&]() {
      if (cur.units.empty()) return;
      cur.padded = (cur.numel + world_ - 1) / world_ * world_;
      buckets_.push_back(std::move(cur));
      cur = Bucket();
    };
    for (int u : backward_order(m_)) {
      const auto& unit = m_.units[u];
      if (unit.trainable_numel == 0) continue;
      if (!cur.units.empty() && cur.numel + unit.trainable_numel > cap) close();
      unit_bucket_[u] = static_cast<int>(buckets_.size());
      unit_offset_[u] = cur.numel;
      for (const auto& s : unit.trainable)
        if (s.decay) cur.decay.emplace_back(cur.numel + s.offset, s.numel);
      cur.units.push_back(u);
      cur.numel += unit.trainable_numel;
    }
    close();
  }

  at::Tensor trainable_view(int unit) const {
    const int bi = unit_bucket_[unit];
    if (bi < 0) return at::Tensor();
    return buckets_[bi].params.narrow(0, unit_offset_[unit], m_.units[unit].trainable_numel);
  }

  // bf16 full fine-tuning computes with a rounded copy of the fp32 masters.
  void refresh_compute() {
    if (!m_.full_finetune || dtype_ == at::kFloat) return;
    for (size_t u = 0; u < m_.units.size(); ++u) {
      at::Tensor t = trainable_view(static_cast<int>(u));
      if (t.defined()) compute_[u].copy_(t);
    }
  }

  Kind kind_;
  StrategySpec spec_;
  int world_ = 1, rank_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<int> unit_bucket_;
  std::vector<int64_t> unit_offset_;
  std::vector<at::Tensor> compute_;
  bool sync_now_ = false, use_scratch_ = false;
  int64_t step_ = 0;
};

}  // namespace

std::unique_ptr<TrainingStrategy> make_replicated(const std::string& name, const StrategySpec& spec,
                                                  const model::ModelLayout& m, at::ScalarType dtype,
                                                  comm::Communicator* comm, device::Device& dev) {
  Kind k = name == "single" ? Kind::kSingle : name == "ddp" ? Kind::kDdp : name == "zero1" ? Kind::kZero1 : Kind::kZero2;
  return std::make_unique<ReplicatedStrategy>(k, spec, m, dtype, comm, dev);
}

}  // namespace lorabench::strategy
