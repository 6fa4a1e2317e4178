// The Communicator: the one interface every strategy talks to. Torch-free: buffers are raw pointers
// (host memory for the MPI backend, device memory for NCCL) with an element type and a count.
//
// Semantics follow c10d: every call is collective (all ranks of the communicator must make it), ranks
// issue their collectives in the same order, and the *_async forms return a Work handle that must be
// waited on before the buffers are read or reused. The blocking forms are async + wait. Several
// collectives may be outstanding at once; they complete in any order but are matched across ranks in
// issue order. A Communicator is used by one thread at a time.
//
// Backends (one .cpp each, behind a factory): make_mpi_communicator (mpi_communicator.hpp),
// make_nccl_communicator (nccl_communicator.hpp). Decorators: make_checked_communicator
// (checked_communicator.hpp) verifies that all ranks issue the same collective. docs/comm.md.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lorabench/comm/timeline.hpp"

namespace lorabench::comm {

// The values are stable: they are the dtype codes of run files (/comm/results).
enum class DataType { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2, kInt32 = 3, kInt64 = 4, kFloat64 = 5 };
enum class ReduceOp { kSum, kMax, kMin };

size_t dtype_size(DataType t);
const char* dtype_name(DataType t);       // "fp32", "bf16", "fp16", "int32", "int64"
DataType dtype_from_name(const std::string& name);  // throws ConfigError on an unknown name
const char* reduce_op_name(ReduceOp op);

// The collectives, for statistics and the debug checker.
enum class CollectiveKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAll, kBarrier };
constexpr int kNumCollectiveKinds = 6;
const char* collective_name(CollectiveKind k);  // "all_reduce", ...

// A pending collective. wait() blocks until the operation completed on this rank (its buffers may then be
// used); test() polls without blocking and also drives progress. Destroying an unfinished Work waits.
// wait() and test() throw CommError when the operation failed (NCCL: also on timeout).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
  // Instead of blocking the host: orders the device's compute stream after this collective (what is
  // queued there afterwards runs once it has completed), and returns true; the Work then counts as done
  // for the host. False where the backend cannot (the host must wait()): every backend but NCCL.
  virtual bool wait_on_device() { return false; }
};

// Bytes this rank handed to each collective (the payload: count x element size of the send side), and
// how many calls, since construction or the last reset. What the network moved depends on the algorithm;
// the bus-bandwidth factors of `lorabench comm` relate the two.
struct CommStats {
  std::array<int64_t, kNumCollectiveKinds> calls{};
  std::array<int64_t, kNumCollectiveKinds> bytes{};
  double wait_s = 0;  // seconds spent blocked in wait() (the exposed communication time)
  int64_t total_bytes() const {
    int64_t s = 0;
    for (auto b : bytes) s += b;
    return s;
  }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend_name() const = 0;  // "mpi", "nccl"
  virtual bool device_buffers() const = 0;       // true when buffers must be device memory (NCCL)
  // True when an issued collective moves without this rank calling into the communicator (NCCL's kernels
  // on their own stream); false when it moves only inside the communicator's calls (Open MPI's
  // non-blocking collectives on CPU: progress(), wait()). Decides the timeline's ready time.
  virtual bool async_progress() const { return false; }

  // Collective. In-place reduction of `count` elements of `buf` across all ranks.
  std::unique_ptr<Work> all_reduce_async(void* buf, size_t count, DataType t, ReduceOp op);
  // Collective. `send` holds size()*recv_count elements; rank r receives the reduction of block r.
  std::unique_ptr<Work> reduce_scatter_async(const void* send, void* recv, size_t recv_count, DataType t,
                                             ReduceOp op);
  // Collective. Every rank contributes send_count elements; `recv` gets size()*send_count, in rank order.
  // `send` may alias recv + rank()*send_count (in-place).
  std::unique_ptr<Work> all_gather_async(const void* send, void* recv, size_t send_count, DataType t);
  // Collective. `count` elements from `root` to every rank.
  std::unique_ptr<Work> broadcast_async(void* buf, size_t count, DataType t, int root);
  // Collective. Block r (count elements) of `send` goes to rank r; `recv` block r comes from rank r.
  std::unique_ptr<Work> all_to_all_async(const void* send, void* recv, size_t count, DataType t);
  // Collective. Uneven all-to-all: send_counts[r] elements to rank r (consecutive blocks of `send`),
  // recv_counts[r] elements from rank r (consecutive blocks of `recv`).
  std::unique_ptr<Work> all_to_allv_async(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                          const std::vector<size_t>& recv_counts, DataType t);
  // Collective.
  std::unique_ptr<Work> barrier_async();

  void all_reduce(void* buf, size_t count, DataType t, ReduceOp op) { wait(all_reduce_async(buf, count, t, op)); }
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t, ReduceOp op) {
    wait(reduce_scatter_async(send, recv, recv_count, t, op));
  }
  void all_gather(const void* send, void* recv, size_t send_count, DataType t) {
    wait(all_gather_async(send, recv, send_count, t));
  }
  void broadcast(void* buf, size_t count, DataType t, int root) { wait(broadcast_async(buf, count, t, root)); }
  void all_to_all(const void* send, void* recv, size_t count, DataType t) {
    wait(all_to_all_async(send, recv, count, t));
  }
  void all_to_allv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                   const std::vector<size_t>& recv_counts, DataType t) {
    wait(all_to_allv_async(send, send_counts, recv, recv_counts, t));
  }
  void barrier() { wait(barrier_async()); }

  // Waits on `w` and adds the blocked time to stats().wait_s (and, with the timeline on, marks the blocked
  // span of w's collective). With device waits on (set_device_waits), a Work that can makes the compute
  // stream wait instead of the host (Work::wait_on_device): the host goes on queueing work, and the
  // blocked span marked on a device timer is the time the compute stream stood still.
  void wait(const std::unique_ptr<Work>& w);
  void set_device_waits(bool on) { device_waits_ = on; }
  bool device_waits() const { return device_waits_; }

  // Collective over this communicator, with MPI_Comm_split's meaning: the ranks that pass the same `color`
  // (>= 0) form a new communicator of the same backend and decorators, ranked by `key`. A device mesh's
  // dimensions (comm/mesh.hpp) are such splits. The new communicator reports to this one, which must
  // outlive it: its collectives count in this communicator's stats() as well as in its own, they are
  // recorded in this communicator's timeline and run its before-issue hook, wait observer and device
  // waits (so the trainer's per-step accounting sees every dimension's traffic). Throws Error where the
  // backend cannot split.
  std::unique_ptr<Communicator> split(int color, int key);

  // Drives progress of outstanding non-blocking operations (MPI needs calls into the library to move
  // data). Cheap; the trainer calls it between layers in backward.
  virtual void progress() {}

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }

  // ---- the collective timeline (timeline.hpp; docs/metrics.md, "Waiting for peers and transfer") ----
  // Off by default. While on, every collective issued through this communicator, and every external one
  // run through timed_external(), is recorded: its arrival when issued, its blocked span in wait().
  void enable_timeline(bool on) { timeline_on_ = on; }
  // The collectives recorded since the last call, in issue order, with their timestamps resolved
  // (SyncTimer::resolve, so call it outside timed regions); forgets them. A Work issued before the call
  // and waited for after it keeps no blocked span.
  std::vector<CollectiveTiming> take_timeline();
  // Where the timeline's timestamps come from. Default: the host clock (make_host_sync_timer). Not while
  // a recorded collective is outstanding.
  void set_sync_timer(std::unique_ptr<SyncTimer> timer);
  // Runs `call`, a blocking collective made outside this communicator (the control plane's host MPI
  // calls), and accounts it like one of its own: the before-issue hook, its arrival and blocked span in
  // the timeline (kind kControlCollective), its duration in stats().wait_s. Collective: every rank makes
  // it at the same place in its sequence of collectives.
  void timed_external(const std::function<void()>& call);
  // Called on this rank just before each collective is issued (also by timed_external), before its
  // arrival is marked. The trainer's fault.slow_rank stretches the compute that precedes each
  // collective here. Empty (the default) = nothing.
  void set_before_issue(std::function<void()> hook) { before_issue_ = std::move(hook); }
  // Called with true just before this rank blocks in wait() or timed_external(), and with false just after
  // (the trainer's phase clock marks the blocked spans on the device's timer). Empty (the default) = nothing.
  void set_wait_observer(std::function<void(bool blocked)> observer) { wait_observer_ = std::move(observer); }

 protected:
  virtual std::unique_ptr<Work> do_all_reduce(void* buf, size_t count, DataType t, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> do_reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t,
                                                  ReduceOp op) = 0;
  virtual std::unique_ptr<Work> do_all_gather(const void* send, void* recv, size_t send_count, DataType t) = 0;
  virtual std::unique_ptr<Work> do_broadcast(void* buf, size_t count, DataType t, int root) = 0;
  virtual std::unique_ptr<Work> do_all_to_allv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                               const std::vector<size_t>& recv_counts, DataType t) = 0;
  virtual std::unique_ptr<Work> do_all_to_all(const void* send, void* recv, size_t count, DataType t);
  virtual std::unique_ptr<Work> do_barrier() = 0;
  // The backend's split (the base class links the result to this communicator). Default: throws Error.
  virtual std::unique_ptr<Communicator> do_split(int color, int key);

 private:
  // A collective of the timeline whose timestamps are not resolved yet: indices of SyncTimer marks.
  struct PendingTiming {
    int kind = 0;
    int64_t bytes = 0;
    int64_t arrive = -1, begin = -1, end = -1;
  };
  // The before-issue hook, the arrival mark, start(), the byte accounting; wraps the Work so that wait()
  // finds its timeline entry.
  std::unique_ptr<Work> issue(CollectiveKind kind, size_t bytes, const std::function<std::unique_ptr<Work>()>& start);
  void account(CollectiveKind kind, size_t bytes);
  int64_t record_arrival(int kind, int64_t bytes);

  // The communicator this one was split from, transitively (nullptr: this is the root): where the
  // timeline, the hooks and the aggregate stats live.
  Communicator* root() { return root_ ? root_ : this; }
  Communicator* root_ = nullptr;
  CommStats stats_;
  bool timeline_on_ = false;
  std::unique_ptr<SyncTimer> timer_;
  std::vector<PendingTiming> pending_;
  int64_t first_seq_ = 0;  // timeline sequence number of pending_[0]
  std::function<void()> before_issue_;
  std::function<void(bool)> wait_observer_;
  bool device_waits_ = false;
};

// A Work that is already complete (a collective on one rank, or one finished synchronously).
class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

}  // namespace lorabench::comm
