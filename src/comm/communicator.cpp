#include "lorabench/comm/communicator.hpp"

#include <algorithm>
#include <cmath>

#include "lorabench/core/error.hpp"
#include "lorabench/core/sysinfo.hpp"

namespace lorabench::comm {

namespace {

// A collective recorded in the timeline: the backend's Work and the collective's timeline number.
class TimedWork final : public Work {
 public:
  TimedWork(std::unique_ptr<Work> inner, int64_t seq) : inner_(std::move(inner)), seq_(seq) {}
  void wait() override { inner_->wait(); }
  bool test() override { return inner_->test(); }
  bool wait_on_device() override { return inner_->wait_on_device(); }
  int64_t seq() const { return seq_; }

 private:
  std::unique_ptr<Work> inner_;
  int64_t seq_;
};

class HostSyncTimer final : public SyncTimer {
 public:
  int64_t mark() override {
    marks_.push_back(sys::now_s());
    return static_cast<int64_t>(marks_.size()) - 1;
  }
  std::vector<double> resolve() override {
    std::vector<double> out;
    out.swap(marks_);
    return out;
  }

 private:
  std::vector<double> marks_;
};

}  // namespace

std::unique_ptr<SyncTimer> make_host_sync_timer() { return std::make_unique<HostSyncTimer>(); }

std::vector<double> wait_for_peers(const std::vector<std::vector<CollectiveTiming>>& per_rank,
                                   const std::vector<double>& offset_s) {
  const size_t world = per_rank.size();
  LB_CHECK(offset_s.size() == world, "one clock offset per rank");
  std::vector<double> wait(world, 0.0);
  if (world == 0) return wait;
  const size_t n = per_rank[0].size();
  for (const auto& r : per_rank)
    if (r.size() != n) return {};
  for (size_t i = 0; i < n; ++i) {
    double last = -INFINITY;
    for (size_t r = 0; r < world; ++r) last = std::max(last, per_rank[r][i].ready_s - offset_s[r]);
    for (size_t r = 0; r < world; ++r) {
      const CollectiveTiming& c = per_rank[r][i];
      if (!(c.blocked_s > 0) || !std::isfinite(c.block_begin_s)) continue;
      const double before_last = last - (c.block_begin_s - offset_s[r]);
      wait[r] += std::min(c.blocked_s, std::max(0.0, before_last));
    }
  }
  return wait;
}

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kBFloat16: return 2;
    case DataType::kFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kFloat64: return 8;
  }
  return 0;
}

const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "fp32";
    case DataType::kBFloat16: return "bf16";
    case DataType::kFloat16: return "fp16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat64: return "fp64";
  }
  return "?";
}

DataType dtype_from_name(const std::string& n) {
  if (n == "fp32" || n == "float32" || n == "float") return DataType::kFloat32;
  if (n == "bf16" || n == "bfloat16") return DataType::kBFloat16;
  if (n == "fp16" || n == "float16" || n == "half") return DataType::kFloat16;
  if (n == "int32") return DataType::kInt32;
  if (n == "int64") return DataType::kInt64;
  if (n == "fp64" || n == "float64" || n == "double") return DataType::kFloat64;
  throw ConfigError("unknown data type \"" + n + "\" (expected fp32, bf16, fp16, int32, int64 or fp64)");
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "?";
}

void Communicator::account(CollectiveKind kind, size_t bytes) {
  for (Communicator* c : {this, root_}) {
    if (c == nullptr) continue;
    c->stats_.calls[static_cast<int>(kind)] += 1;
    c->stats_.bytes[static_cast<int>(kind)] += static_cast<int64_t>(bytes);
  }
}

std::unique_ptr<Work> Communicator::issue(CollectiveKind kind, size_t bytes,
                                          const std::function<std::unique_ptr<Work>()>& start) {
  Communicator& r = *root();
  if (r.before_issue_) r.before_issue_();
  const int64_t seq = r.timeline_on_ ? r.record_arrival(static_cast<int>(kind), static_cast<int64_t>(bytes)) : -1;
  auto w = start();
  account(kind, bytes);
  if (seq < 0) return w;
  return std::make_unique<TimedWork>(std::move(w), seq);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  LB_CHECK(color >= 0, "split: a negative color");
  std::unique_ptr<Communicator> c = do_split(color, key);
  LB_CHECK(c != nullptr, "split: the backend returned no communicator");
  c->root_ = root();
  return c;
}

std::unique_ptr<Communicator> Communicator::do_split(int, int) {
  throw Error("the " + backend_name() + " communicator cannot be split into sub-communicators");
}

std::unique_ptr<Work> Communicator::all_reduce_async(void* buf, size_t count, DataType t, ReduceOp op) {
  return issue(CollectiveKind::kAllReduce, count * dtype_size(t), [&] { return do_all_reduce(buf, count, t, op); });
}

std::unique_ptr<Work> Communicator::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                                         DataType t, ReduceOp op) {
  return issue(CollectiveKind::kReduceScatter, recv_count * size() * dtype_size(t),
               [&] { return do_reduce_scatter(send, recv, recv_count, t, op); });
}

std::unique_ptr<Work> Communicator::all_gather_async(const void* send, void* recv, size_t send_count, DataType t) {
  return issue(CollectiveKind::kAllGather, send_count * dtype_size(t),
               [&] { return do_all_gather(send, recv, send_count, t); });
}

std::unique_ptr<Work> Communicator::broadcast_async(void* buf, size_t count, DataType t, int root) {
  LB_CHECK(root >= 0 && root < size(), "broadcast root out of range");
  return issue(CollectiveKind::kBroadcast, count * dtype_size(t), [&] { return do_broadcast(buf, count, t, root); });
}

std::unique_ptr<Work> Communicator::all_to_all_async(const void* send, void* recv, size_t count, DataType t) {
  return issue(CollectiveKind::kAllToAll, count * size() * dtype_size(t),
               [&] { return do_all_to_all(send, recv, count, t); });
}

std::unique_ptr<Work> Communicator::all_to_allv_async(const void* send, const std::vector<size_t>& send_counts,
                                                      void* recv, const std::vector<size_t>& recv_counts,
                                                      DataType t) {
  LB_CHECK(send_counts.size() == static_cast<size_t>(size()) && recv_counts.size() == static_cast<size_t>(size()),
           "all_to_allv needs one count per rank");
  size_t total = 0;
  for (auto c : send_counts) total += c;
  return issue(CollectiveKind::kAllToAll, total * dtype_size(t),
               [&] { return do_all_to_allv(send, send_counts, recv, recv_counts, t); });
}

std::unique_ptr<Work> Communicator::barrier_async() {
  return issue(CollectiveKind::kBarrier, 0, [&] { return do_barrier(); });
}

std::unique_ptr<Work> Communicator::do_all_to_all(const void* send, void* recv, size_t count, DataType t) {
  std::vector<size_t> counts(static_cast<size_t>(size()), count);
  return do_all_to_allv(send, counts, recv, counts, t);
}

int64_t Communicator::record_arrival(int kind, int64_t bytes) {
  if (!timer_) timer_ = make_host_sync_timer();
  PendingTiming p;
  p.kind = kind;
  p.bytes = bytes;
  p.arrive = timer_->mark();
  pending_.push_back(p);
  return first_seq_ + static_cast<int64_t>(pending_.size()) - 1;
}

void Communicator::wait(const std::unique_ptr<Work>& w) {
  LB_CHECK(w != nullptr, "wait on a null Work");
  if (root_ != nullptr) {  // the root keeps the timeline and the observers; both count the blocked time
    const double t0 = sys::now_s();
    root_->wait(w);
    stats_.wait_s += sys::now_s() - t0;
    return;
  }
  double t0 = sys::now_s();
  // The timeline entry of w, unless the timeline is off or the entry was taken already.
  int64_t entry = -1;
  if (timeline_on_) {
    if (const auto* tw = dynamic_cast<const TimedWork*>(w.get())) {
      entry = tw->seq() - first_seq_;
      if (entry < 0 || entry >= static_cast<int64_t>(pending_.size()) || pending_[entry].begin >= 0) entry = -1;
    }
  }
  if (entry >= 0) pending_[entry].begin = timer_->mark();
  if (wait_observer_) wait_observer_(true);
  if (!(device_waits_ && w->wait_on_device())) w->wait();
  if (wait_observer_) wait_observer_(false);
  if (entry >= 0) pending_[entry].end = timer_->mark();
  stats_.wait_s += sys::now_s() - t0;
}

void Communicator::timed_external(const std::function<void()>& call) {
  if (before_issue_) before_issue_();
  const double t0 = sys::now_s();
  int64_t entry = -1;
  if (timeline_on_) {
    entry = record_arrival(kControlCollective, 0) - first_seq_;
    pending_[entry].begin = pending_[entry].arrive;  // blocking: blocked from the moment it arrives
  }
  if (wait_observer_) wait_observer_(true);
  call();
  if (wait_observer_) wait_observer_(false);
  if (entry >= 0) pending_[entry].end = timer_->mark();
  stats_.wait_s += sys::now_s() - t0;
}

std::vector<CollectiveTiming> Communicator::take_timeline() {
  std::vector<CollectiveTiming> out;
  if (!timer_) return out;
  const std::vector<double> t = timer_->resolve();
  auto at = [&](int64_t i) { return i >= 0 && i < static_cast<int64_t>(t.size()) ? t[i] : NAN; };
  const bool async = async_progress();
  out.reserve(pending_.size());
  for (const auto& p : pending_) {
    CollectiveTiming c;
    c.kind = p.kind;
    c.bytes = p.bytes;
    c.arrive_s = at(p.arrive);
    const bool waited = p.begin >= 0 && p.end >= 0;
    c.block_begin_s = waited ? at(p.begin) : NAN;
    c.blocked_s = waited ? at(p.end) - at(p.begin) : 0.0;
    c.ready_s = waited && !async ? c.block_begin_s : c.arrive_s;
    out.push_back(c);
  }
  first_seq_ += static_cast<int64_t>(pending_.size());
  pending_.clear();
  return out;
}

void Communicator::set_sync_timer(std::unique_ptr<SyncTimer> timer) {
  LB_CHECK(timer != nullptr, "set_sync_timer(nullptr)");
  timer_ = std::move(timer);
  first_seq_ += static_cast<int64_t>(pending_.size());  // marks of the old timer cannot be resolved any more
  pending_.clear();
}

}  // namespace lorabench::comm
