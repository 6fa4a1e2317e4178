#include "lorabench/comm/checked_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "lorabench/core/error.hpp"
#include "lorabench/core/mpi_session.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "forwarding_communicator.hpp"

namespace lorabench::comm {

namespace {

constexpr int kWire = 5;  // int64 words of a signature on the wire
constexpr size_t kMaxListed = 8;  // pairs listed in an all_to_allv mismatch message

bool mpi_finalized() {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}


class CheckedCommunicator final : public ForwardingCommunicator {
 public:
  CheckedCommunicator(std::unique_ptr<Communicator> inner, MPI_Comm comm, const CheckerOptions& opt)
      : ForwardingCommunicator(std::move(inner), "make_checked_communicator"), opt_(opt) {
    LB_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
    LB_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    int r = 0, n = 0;
    LB_MPI_CHECK(MPI_Comm_rank(comm_, &r));
    LB_MPI_CHECK(MPI_Comm_size(comm_, &n));
    if (r != inner_->rank() || n != inner_->size())
      throw CommError(strformat("checked communicator: the MPI communicator (rank %d of %d) does not match the "
                                "wrapped %s communicator (rank %d of %d)",
                                r, n, inner_->backend_name().c_str(), inner_->rank(), inner_->size()));
  }
  ~CheckedCommunicator() override {
    if (comm_ == MPI_COMM_NULL || mpi_finalized()) return;
    // Gathers abandoned after a timeout may still be pending: their buffers must outlive them, so a
    // pending one is leaked on purpose (the job is failing anyway).
    for (auto& a : abandoned_) {
      int done = 0;
      MPI_Test(&a->req, &done, MPI_STATUS_IGNORE);
      if (!done) a.release();
    }
    MPI_Comm_free(&comm_);
  }
  CheckedCommunicator(const CheckedCommunicator&) = delete;
  CheckedCommunicator& operator=(const CheckedCommunicator&) = delete;

 protected:
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    std::unique_ptr<Communicator> inner = inner_->split(color, key);
    MPI_Comm sub = MPI_COMM_NULL;
    LB_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
    auto c = std::make_unique<CheckedCommunicator>(std::move(inner), sub, opt_);  // duplicates it
    MPI_Comm_free(&sub);
    return c;
  }

  std::unique_ptr<Work> do_all_reduce(void* buf, size_t count, DataType t, ReduceOp op) override {
    check(sig(CollectiveKind::kAllReduce, t, static_cast<int64_t>(count), static_cast<int>(op)));
    return inner_->all_reduce_async(buf, count, t, op);
  }
  std::unique_ptr<Work> do_reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t,
                                          ReduceOp op) override {
    check(sig(CollectiveKind::kReduceScatter, t, static_cast<int64_t>(recv_count), static_cast<int>(op)));
    return inner_->reduce_scatter_async(send, recv, recv_count, t, op);
  }
  std::unique_ptr<Work> do_all_gather(const void* send, void* recv, size_t send_count, DataType t) override {
    check(sig(CollectiveKind::kAllGather, t, static_cast<int64_t>(send_count), 0));
    return inner_->all_gather_async(send, recv, send_count, t);
  }
  std::unique_ptr<Work> do_broadcast(void* buf, size_t count, DataType t, int root) override {
    check(sig(CollectiveKind::kBroadcast, t, static_cast<int64_t>(count), root));
    return inner_->broadcast_async(buf, count, t, root);
  }
  std::unique_ptr<Work> do_all_to_all(const void* send, void* recv, size_t count, DataType t) override {
    check(sig(CollectiveKind::kAllToAll, t, static_cast<int64_t>(count), 0));
    return inner_->all_to_all_async(send, recv, count, t);
  }
  std::unique_ptr<Work> do_all_to_allv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                       const std::vector<size_t>& recv_counts, DataType t) override {
    check(sig(CollectiveKind::kAllToAll, t, -1, 0));
    check_pairs(send_counts, recv_counts);
    return inner_->all_to_allv_async(send, send_counts, recv, recv_counts, t);
  }
  std::unique_ptr<Work> do_barrier() override {
    check(sig(CollectiveKind::kBarrier, DataType::kFloat32, 0, 0));
    return inner_->barrier_async();
  }

 private:
  struct Pending {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<int64_t> send, recv;
  };

  CollectiveSignature sig(CollectiveKind k, DataType t, int64_t count, int extra) {
    CollectiveSignature s;
    s.seq = seq_++;
    s.kind = static_cast<int>(k);
    s.dtype = k == CollectiveKind::kBarrier ? 0 : static_cast<int>(t);
    s.count = count;
    s.extra = extra;
    return s;
  }

  [[noreturn]] void fail(const std::string& message) {
    broken_ = message;
    throw CommError(message);
  }

  // MPI_Allgather of `send` (k words per rank) that gives up after opt_.timeout_s.
  std::vector<int64_t> gather(std::vector<int64_t> send, const CollectiveSignature& mine) {
    auto p = std::make_unique<Pending>();
    const int k = static_cast<int>(send.size());
    p->send = std::move(send);
    p->recv.assign(static_cast<size_t>(k) * static_cast<size_t>(size()), 0);
    LB_MPI_CHECK(MPI_Iallgather(p->send.data(), k, MPI_INT64_T, p->recv.data(), k, MPI_INT64_T, comm_, &p->req));
    const double start = sys::now_s();
    for (;;) {
      int done = 0;
      LB_MPI_CHECK(MPI_Test(&p->req, &done, MPI_STATUS_IGNORE));
      if (done) break;
      double waited = sys::now_s() - start;
      if (opt_.timeout_s > 0 && waited > opt_.timeout_s) {
        abandoned_.push_back(std::move(p));
        fail(strformat("collective checker: call #%lld %s on rank %d: not every rank reached the collective "
                       "within %.1f s (a rank is stuck or has failed, or the ranks issue different numbers of "
                       "collectives)",
                       static_cast<long long>(mine.seq), describe_signature(mine).c_str(), rank(),
                       opt_.timeout_s));
      }
      if (waited > 1e-3) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return std::move(p->recv);
  }

  void check(const CollectiveSignature& s) {
    if (!broken_.empty()) throw CommError("collective checker is unusable after an earlier failure: " + broken_);
    std::vector<int64_t> all = gather({s.seq, s.kind, s.dtype, s.count, s.extra}, s);
    // Group the ranks by signature, in order of first appearance.
    std::vector<std::pair<CollectiveSignature, std::vector<int>>> groups;
    for (int r = 0; r < size(); ++r) {
      const int64_t* w = &all[static_cast<size_t>(r) * kWire];
      CollectiveSignature o{w[0], static_cast<int>(w[1]), static_cast<int>(w[2]), w[3], static_cast<int>(w[4])};
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
        const auto& x = g.first;
        return x.seq == o.seq && x.kind == o.kind && x.dtype == o.dtype && x.count == o.count && x.extra == o.extra;
      });
      if (it == groups.end()) {
        groups.push_back({o, {r}});
      } else {
        it->second.push_back(r);
      }
    }
    if (groups.size() == 1) return;
    std::string msg = strformat("collective mismatch at call #%lld: the ranks issue different collectives:",
                                static_cast<long long>(s.seq));
    for (const auto& [g, ranks] : groups) {
      msg += strformat("\n  rank%s %s: %s", ranks.size() > 1 ? "s" : "", format_rank_list(ranks).c_str(),
                       describe_signature(g).c_str());
    }
    fail(msg);
  }

  // Every rank's send counts and receive counts; rank i's send_counts[j] must equal rank j's recv_counts[i].
  void check_pairs(const std::vector<size_t>& send_counts, const std::vector<size_t>& recv_counts) {
    const int n = size();
    std::vector<int64_t> mine;
    mine.reserve(2 * static_cast<size_t>(n));
    for (auto c : send_counts) mine.push_back(static_cast<int64_t>(c));
    for (auto c : recv_counts) mine.push_back(static_cast<int64_t>(c));
    CollectiveSignature s{seq_ - 1, static_cast<int>(CollectiveKind::kAllToAll), 0, -1, 0};
    std::vector<int64_t> all = gather(std::move(mine), s);
    auto sends = [&](int i, int j) { return all[static_cast<size_t>(i) * 2 * n + j]; };
    auto recvs = [&](int i, int j) { return all[static_cast<size_t>(i) * 2 * n + n + j]; };
    std::vector<std::string> bad;
    size_t total_bad = 0;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        if (sends(i, j) != recvs(j, i)) {
          ++total_bad;
          if (bad.size() < kMaxListed)
            bad.push_back(strformat("rank %d sends %lld elements to rank %d, which expects %lld", i,
                                    static_cast<long long>(sends(i, j)), j, static_cast<long long>(recvs(j, i))));
        }
      }
    }
    if (bad.empty()) return;
    std::string msg = strformat("collective mismatch at call #%lld: all_to_allv counts disagree between ranks "
                                "(%zu pairs):",
                                static_cast<long long>(seq_ - 1), total_bad);
    for (const auto& b : bad) msg += "\n  " + b;
    if (total_bad > bad.size()) msg += strformat("\n  ... and %zu more", total_bad - bad.size());
    fail(msg);
  }

  CheckerOptions opt_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int64_t seq_ = 0;
  std::string broken_;
  std::vector<std::unique_ptr<Pending>> abandoned_;
};

}  // namespace

std::string describe_signature(const CollectiveSignature& s) {
  auto kind = static_cast<CollectiveKind>(s.kind);
  const char* dt = dtype_name(static_cast<DataType>(s.dtype));
  switch (kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter:
      return strformat("%s(count=%lld, dtype=%s, op=%s)", collective_name(kind), static_cast<long long>(s.count), dt,
                       reduce_op_name(static_cast<ReduceOp>(s.extra)));
    case CollectiveKind::kBroadcast:
      return strformat("broadcast(count=%lld, dtype=%s, root=%d)", static_cast<long long>(s.count), dt, s.extra);
    case CollectiveKind::kAllGather:
      return strformat("all_gather(count=%lld, dtype=%s)", static_cast<long long>(s.count), dt);
    case CollectiveKind::kAllToAll:
      if (s.count < 0) return strformat("all_to_allv(dtype=%s)", dt);
      return strformat("all_to_all(count=%lld, dtype=%s)", static_cast<long long>(s.count), dt);
    case CollectiveKind::kBarrier: return "barrier()";
  }
  return strformat("unknown collective %d", s.kind);
}

std::unique_ptr<Communicator> make_checked_communicator(std::unique_ptr<Communicator> inner, MPI_Comm comm,
                                                        const CheckerOptions& options) {
  return std::make_unique<CheckedCommunicator>(std::move(inner), comm, options);
}

}  // namespace lorabench::comm
