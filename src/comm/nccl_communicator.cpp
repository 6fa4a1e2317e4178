// The NCCL backend. Compiled only when CMake resolves LORABENCH_HAVE_NCCL (nccl_unavailable.cpp otherwise).
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/comm/watchdog.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/log.hpp"
#include "lorabench/core/mpi_session.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"

static_assert(NCCL_UNIQUE_ID_BYTES == lorabench::comm::kNcclUniqueIdBytes, "NCCL unique id size changed");

namespace lorabench::comm {

namespace {

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
std::string nccl_last_error(ncclComm_t comm) {
  const char* s = ncclGetLastError(comm);
  return s != nullptr && *s != '\0' ? std::string(": ") + s : std::string();
}
#else
std::string nccl_last_error(ncclComm_t) { return ""; }
#endif

[[noreturn]] void throw_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  throw CommError(rank_tag() + " " + expr + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                  ") (" + detail::format_location(file, line) + ")");
}

[[noreturn]] void throw_nccl(ncclResult_t r, ncclComm_t comm, const char* expr, const char* file, int line) {
  throw CommError(rank_tag() + " " + expr + " failed: " + ncclGetErrorString(r) + nccl_last_error(comm) + " (" +
                  detail::format_location(file, line) + ")");
}

}  // namespace

#define LB_CUDA_CHECK(call)                                                   \
  do {                                                                        \
    cudaError_t lb_cuda_rc_ = (call);                                         \
    if (lb_cuda_rc_ != cudaSuccess) throw_cuda(lb_cuda_rc_, #call, __FILE__, __LINE__); \
  } while (0)

// `comm` names the communicator whose last error is appended (nullptr before it exists).
#define LB_NCCL_CHECK(call, comm)                                                  \
  do {                                                                             \
    ncclResult_t lb_nccl_rc_ = (call);                                             \
    if (lb_nccl_rc_ != ncclSuccess) throw_nccl(lb_nccl_rc_, (comm), #call, __FILE__, __LINE__); \
  } while (0)

namespace {

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat64: return ncclFloat64;
  }
  throw CommError("nccl: unknown data type");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  throw CommError("nccl: unknown reduction");
}

// Everything that must outlive both the communicator and its pending Work handles: the NCCL
// communicator, the stream, the events and a scratch word for barriers. Freed by the last owner.
struct NcclState {
  int device = -1;
  int rank = 0;
  double timeout_s = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t inputs_ready = nullptr;  // recorded on the legacy default stream before each collective
  void* scratch = nullptr;             // one int32 on the device (barrier)
  std::atomic<bool> aborted{false};
  std::string abort_reason;            // written before `aborted` is set
  std::mutex abort_mu;

  // The watchdog (comm/watchdog.hpp): collectives the compute stream waits for without the host
  // (Work::wait_on_device) are watched by a thread, which aborts the communicator when one fails or
  // outlives timeout_s (the host may be blocked in a CUDA synchronisation behind it; the abort lets the
  // stream drain and the next collective throw). Its thread starts with the first device wait.
  std::once_flag watchdog_once;
  std::unique_ptr<Watchdog> watchdog;

  // Takes ownership of `done` (destroyed when the watchdog releases it).
  void watch(cudaEvent_t done, const std::string& what) {
    std::call_once(watchdog_once, [this] {
      watchdog = std::make_unique<Watchdog>(
          timeout_s, [dev = device] { cudaSetDevice(dev); },
          [this](const std::string& op, const std::string& reason) {
            const std::string why = rank_tag() + " " + op + ": " + reason + "; the NCCL communicator was aborted";
            log::error(why);
            abort(why);
          });
    });
    watchdog->watch(
        what,
        [this, done]() -> Watchdog::Poll {
          const cudaError_t e = cudaEventQuery(done);
          if (e == cudaSuccess) return {Watchdog::State::kDone, {}};
          if (e != cudaErrorNotReady) return {Watchdog::State::kFailed, std::string("CUDA error ") + cudaGetErrorName(e)};
          std::lock_guard<std::mutex> lock(abort_mu);
          ncclResult_t async = ncclSuccess;
          if (comm != nullptr && ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess &&
              async != ncclInProgress)
            return {Watchdog::State::kFailed, std::string("NCCL error ") + ncclGetErrorString(async)};
          return {Watchdog::State::kPending, {}};
        },
        [done] { cudaEventDestroy(done); });
  }

  ~NcclState() {
    cudaSetDevice(device);
    watchdog.reset();  // joins its thread and destroys the events it still held
    if (comm != nullptr && !aborted) {
      cudaStreamSynchronize(stream);
      ncclCommDestroy(comm);
    }
    if (scratch != nullptr) cudaFree(scratch);
    if (inputs_ready != nullptr) cudaEventDestroy(inputs_ready);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Aborts the NCCL communicator once (kernels in flight are cancelled); later calls throw `why`. The
  // host thread and the watchdog may both call it.
  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(abort_mu);
    if (aborted) return;
    abort_reason = why;
    aborted = true;
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> st, std::string what) : st_(std::move(st)), what_(std::move(what)) {
    LB_CUDA_CHECK(cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming));
  }
  ~NcclWork() override {
    if (!done_) {
      try {
        wait();
      } catch (const std::exception& e) {
        log::error(std::string("destroying an unfinished NCCL collective: ") + e.what());
      }
    }
    if (done_event_ != nullptr) cudaEventDestroy(done_event_);
  }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  cudaEvent_t event() const { return done_event_; }

  bool test() override { return done_ || poll(); }

  // The legacy default stream (libtorch's compute stream) waits for the collective's event; the event goes
  // to the watchdog, which owns it from here.
  bool wait_on_device() override {
    if (done_) return true;
    if (st_->aborted) throw CommError("NCCL communicator was aborted: " + st_->abort_reason);
    LB_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, done_event_, 0));
    st_->watch(done_event_, what_);
    done_event_ = nullptr;
    done_ = true;
    return true;
  }

  void wait() override {
    const double start = sys::now_s();
    while (!test()) {
      double waited = sys::now_s() - start;
      if (st_->timeout_s > 0 && waited > st_->timeout_s) {
        std::string why = strformat("%s: %s did not complete within %.1f s (a rank is stuck or has failed); the "
                                    "NCCL communicator was aborted",
                                    rank_tag().c_str(), what_.c_str(), st_->timeout_s);
        st_->abort(why);
        throw CommError(why);
      }
      if (waited > 50e-6) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

 private:
  bool poll() {
    if (st_->aborted) throw CommError("NCCL communicator was aborted: " + st_->abort_reason);
    cudaError_t e = cudaEventQuery(done_event_);
    if (e == cudaSuccess) {
      done_ = true;
      return true;
    }
    if (e != cudaErrorNotReady) {
      std::string why = rank_tag() + " " + what_ + ": CUDA error " + cudaGetErrorName(e) + " (" +
                        cudaGetErrorString(e) + "); the NCCL communicator was aborted";
      st_->abort(why);
      throw CommError(why);
    }
    ncclResult_t async = ncclSuccess, r = ncclSuccess;
    std::string last;
    {
      // The watchdog may abort (and free) the communicator from its thread: not while this reads it.
      std::lock_guard<std::mutex> lock(st_->abort_mu);
      if (st_->aborted) throw CommError("NCCL communicator was aborted: " + st_->abort_reason);
      r = ncclCommGetAsyncError(st_->comm, &async);
      if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) last = nccl_last_error(st_->comm);
    }
    if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
      ncclResult_t bad = r != ncclSuccess ? r : async;
      std::string why = rank_tag() + " " + what_ + ": NCCL error " + ncclGetErrorString(bad) + last +
                        "; the NCCL communicator was aborted";
      st_->abort(why);
      throw CommError(why);
    }
    return false;
  }

  std::shared_ptr<NcclState> st_;
  std::string what_;
  cudaEvent_t done_event_ = nullptr;
  bool done_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm mpi_comm, int cuda_device, const NcclOptions& opt) : st_(std::make_shared<NcclState>()) {
    LB_MPI_CHECK(MPI_Comm_rank(mpi_comm, &rank_));
    LB_MPI_CHECK(MPI_Comm_size(mpi_comm, &size_));
    st_->device = cuda_device;
    st_->rank = rank_;
    st_->timeout_s = opt.timeout_s;
    NcclUniqueIdBytes id = nccl_unique_id_broadcast(mpi_comm, 0);

    // Set up CUDA on every rank first and agree that all succeeded: a rank that fails here must not
    // leave the others waiting forever inside ncclCommInitRank.
    std::string local_error;
    try {
      int visible = cuda_device_count();
      if (cuda_device < 0 || cuda_device >= visible)
        throw CommError(strformat("%s nccl: CUDA device %d requested but this process sees %d CUDA device(s)",
                                  rank_tag().c_str(), cuda_device, visible));
      LB_CUDA_CHECK(cudaSetDevice(cuda_device));
      LB_CUDA_CHECK(cudaStreamCreateWithFlags(&st_->stream, cudaStreamNonBlocking));
      LB_CUDA_CHECK(cudaEventCreateWithFlags(&st_->inputs_ready, cudaEventDisableTiming));
      LB_CUDA_CHECK(cudaMalloc(&st_->scratch, sizeof(int32_t)));
      LB_CUDA_CHECK(cudaMemset(st_->scratch, 0, sizeof(int32_t)));
    } catch (const std::exception& e) {
      local_error = e.what();
    }
    int ok = local_error.empty() ? 1 : 0, all_ok = 0;
    LB_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, mpi_comm));
    if (!ok) throw CommError(local_error);
    if (!all_ok) throw CommError(rank_tag() + " nccl: another rank failed to set up its CUDA device (see its message)");

    ncclUniqueId uid;
    std::memcpy(uid.internal, id.data(), kNcclUniqueIdBytes);
    LB_NCCL_CHECK(ncclCommInitRank(&st_->comm, size_, uid, rank_), nullptr);
  }

  // The ranks of `parent` that pass `color` (ncclCommSplit, NCCL >= 2.18: collective over the parent), on
  // the parent's device with a stream of its own.
  NcclCommunicator(const NcclState& parent, int color, int key) : st_(std::make_shared<NcclState>()) {
    st_->device = parent.device;
    st_->timeout_s = parent.timeout_s;
    LB_CUDA_CHECK(cudaSetDevice(st_->device));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    LB_NCCL_CHECK(ncclCommSplit(parent.comm, color, key, &st_->comm, &config), parent.comm);
#else
    (void)color;
    (void)key;
    throw CommError(rank_tag() + " nccl: splitting a communicator (a device mesh) needs NCCL 2.18 or newer, this "
                    "build has " + nccl_version());
#endif
    LB_NCCL_CHECK(ncclCommUserRank(st_->comm, &rank_), st_->comm);
    LB_NCCL_CHECK(ncclCommCount(st_->comm, &size_), st_->comm);
    st_->rank = rank_;
    LB_CUDA_CHECK(cudaStreamCreateWithFlags(&st_->stream, cudaStreamNonBlocking));
    LB_CUDA_CHECK(cudaEventCreateWithFlags(&st_->inputs_ready, cudaEventDisableTiming));
    LB_CUDA_CHECK(cudaMalloc(&st_->scratch, sizeof(int32_t)));
    LB_CUDA_CHECK(cudaMemset(st_->scratch, 0, sizeof(int32_t)));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }
  bool device_buffers() const override { return true; }
  bool async_progress() const override { return true; }

 protected:
  std::unique_ptr<Work> do_all_reduce(void* buf, size_t count, DataType t, ReduceOp op) override {
    return enqueue("all_reduce", [&] {
      LB_NCCL_CHECK(ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), st_->comm, st_->stream), st_->comm);
    });
  }
  std::unique_ptr<Work> do_reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t,
                                          ReduceOp op) override {
    return enqueue("reduce_scatter", [&] {
      LB_NCCL_CHECK(
          ncclReduceScatter(send, recv, recv_count, nccl_type(t), nccl_op(op), st_->comm, st_->stream), st_->comm);
    });
  }
  std::unique_ptr<Work> do_all_gather(const void* send, void* recv, size_t send_count, DataType t) override {
    // In place (send == recv + rank*send_count) is native to NCCL.
    return enqueue("all_gather", [&] {
      LB_NCCL_CHECK(ncclAllGather(send, recv, send_count, nccl_type(t), st_->comm, st_->stream), st_->comm);
    });
  }
  std::unique_ptr<Work> do_broadcast(void* buf, size_t count, DataType t, int root) override {
    return enqueue("broadcast", [&] {
      LB_NCCL_CHECK(ncclBroadcast(buf, buf, count, nccl_type(t), root, st_->comm, st_->stream), st_->comm);
    });
  }
  std::unique_ptr<Work> do_all_to_allv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                       const std::vector<size_t>& recv_counts, DataType t) override {
    return enqueue("all_to_all", [&] {
      const size_t esize = dtype_size(t);
      size_t soff = 0, roff = 0;
      LB_NCCL_CHECK(ncclGroupStart(), st_->comm);
      ncclResult_t first_error = ncclSuccess;
      for (int r = 0; r < size_ && first_error == ncclSuccess; ++r) {
        const size_t sc = send_counts[static_cast<size_t>(r)], rc = recv_counts[static_cast<size_t>(r)];
        if (sc > 0)
          first_error = ncclSend(static_cast<const char*>(send) + soff * esize, sc, nccl_type(t), r, st_->comm,
                                 st_->stream);
        if (first_error == ncclSuccess && rc > 0)
          first_error =
              ncclRecv(static_cast<char*>(recv) + roff * esize, rc, nccl_type(t), r, st_->comm, st_->stream);
        soff += sc;
        roff += rc;
      }
      ncclResult_t end = ncclGroupEnd();  // always close the group, even after an error
      LB_NCCL_CHECK(first_error, st_->comm);
      LB_NCCL_CHECK(end, st_->comm);
    });
  }
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    if (st_->aborted) throw CommError("NCCL communicator was aborted: " + st_->abort_reason);
    return std::make_unique<NcclCommunicator>(*st_, color, key);
  }
  std::unique_ptr<Work> do_barrier() override {
    // NCCL has no barrier: a one-word all-reduce that every rank must join; wait() gives the barrier.
    return enqueue("barrier", [&] {
      LB_NCCL_CHECK(ncclAllReduce(st_->scratch, st_->scratch, 1, ncclInt32, ncclSum, st_->comm, st_->stream),
                    st_->comm);
    });
  }

 private:
  template <class Issue>
  std::unique_ptr<Work> enqueue(const char* what, Issue&& issue) {
    if (st_->aborted) throw CommError("NCCL communicator was aborted: " + st_->abort_reason);
    LB_CUDA_CHECK(cudaSetDevice(st_->device));
    // Inputs written on the legacy default stream (libtorch's default) are complete before NCCL reads them.
    LB_CUDA_CHECK(cudaEventRecord(st_->inputs_ready, cudaStreamLegacy));
    LB_CUDA_CHECK(cudaStreamWaitEvent(st_->stream, st_->inputs_ready, 0));
    auto w = std::make_unique<NcclWork>(st_, strformat("nccl %s #%lld", what, static_cast<long long>(++issued_)));
    {
      // Issuing reads the communicator, which the watchdog's thread may abort and free: one at a time. (The
      // watchdog aborts collectives already issued and stuck on the device; an issue returns at once.)
      std::lock_guard<std::mutex> lock(st_->abort_mu);
      if (st_->aborted) throw CommError("NCCL communicator was aborted: " + st_->abort_reason);
      issue();
    }
    LB_CUDA_CHECK(cudaEventRecord(w->event(), st_->stream));
    return w;
  }

  std::shared_ptr<NcclState> st_;
  int rank_ = 0;
  int size_ = 1;
  int64_t issued_ = 0;
};

}  // namespace

bool nccl_built() { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  if (v >= 10000) return strformat("%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
  return strformat("%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}

int cuda_device_count() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later CUDA calls start clean
    return 0;
  }
  return n;
}

NcclUniqueIdBytes nccl_unique_id_broadcast(MPI_Comm comm, int root) {
  int rank = 0, size = 1;
  LB_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  LB_MPI_CHECK(MPI_Comm_size(comm, &size));
  if (root < 0 || root >= size) throw CommError(strformat("nccl unique id: root %d out of range", root));
  // [ok flag | 128 id bytes]: a failure on the root reaches every rank instead of a garbage id.
  unsigned char buf[1 + kNcclUniqueIdBytes] = {0};
  std::string root_error;
  if (rank == root) {
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r == ncclSuccess) {
      buf[0] = 1;
      std::memcpy(buf + 1, id.internal, kNcclUniqueIdBytes);
    } else {
      root_error = std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r) + nccl_last_error(nullptr);
    }
  }
  LB_MPI_CHECK(MPI_Bcast(buf, static_cast<int>(sizeof(buf)), MPI_BYTE, root, comm));
  if (buf[0] != 1) {
    throw CommError(rank_tag() + " " +
                    (rank == root ? root_error : strformat("rank %d could not create the NCCL unique id", root)));
  }
  NcclUniqueIdBytes out;
  std::memcpy(out.data(), buf + 1, kNcclUniqueIdBytes);
  return out;
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int cuda_device, const NcclOptions& options) {
  return std::make_unique<NcclCommunicator>(comm, cuda_device, options);
}

void* cuda_malloc(int cuda_device, size_t bytes) {
  LB_CUDA_CHECK(cudaSetDevice(cuda_device));
  void* p = nullptr;
  LB_CUDA_CHECK(cudaMalloc(&p, bytes > 0 ? bytes : 1));
  return p;
}

void cuda_free(void* ptr) {
  if (ptr != nullptr) (void)cudaFree(ptr);
}

void cuda_copy_to_device(void* dst, const void* src, size_t bytes) {
  LB_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void cuda_copy_to_host(void* dst, const void* src, size_t bytes) {
  LB_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void cuda_copy_device_to_device(void* dst, const void* src, size_t bytes) {
  LB_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
  LB_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace lorabench::comm
