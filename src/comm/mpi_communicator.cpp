#include "lorabench/comm/mpi_communicator.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "lorabench/comm/half.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/mpi_session.hpp"

namespace lorabench::comm {

namespace {

// ---- 16-bit floating point reductions ------------------------------------------------------------

template <float (*Load)(uint16_t), uint16_t (*Store)(float), ReduceOp Op>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = Load(a[i]), y = Load(b[i]);
    float r = Op == ReduceOp::kSum ? x + y : Op == ReduceOp::kMax ? (x > y ? x : y) : (x < y ? x : y);
    b[i] = Store(r);
  }
}

// MPI handles for the 16-bit types, created on first use (after MPI_Init) and kept for the process.
struct HalfTypes {
  MPI_Datatype bf16 = MPI_DATATYPE_NULL, fp16 = MPI_DATATYPE_NULL;
  MPI_Op bf16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // indexed by ReduceOp
  MPI_Op fp16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  HalfTypes() {
    LB_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &bf16));
    LB_MPI_CHECK(MPI_Type_commit(&bf16));
    LB_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &fp16));
    LB_MPI_CHECK(MPI_Type_commit(&fp16));
    static_assert(static_cast<int>(ReduceOp::kSum) == 0 && static_cast<int>(ReduceOp::kMax) == 1 &&
                      static_cast<int>(ReduceOp::kMin) == 2,
                  "the op tables are indexed by ReduceOp");
    LB_MPI_CHECK(MPI_Op_create(&reduce16<bf16_to_f32, f32_to_bf16, ReduceOp::kSum>, 1, &bf16_ops[0]));
    LB_MPI_CHECK(MPI_Op_create(&reduce16<bf16_to_f32, f32_to_bf16, ReduceOp::kMax>, 1, &bf16_ops[1]));
    LB_MPI_CHECK(MPI_Op_create(&reduce16<bf16_to_f32, f32_to_bf16, ReduceOp::kMin>, 1, &bf16_ops[2]));
    LB_MPI_CHECK(MPI_Op_create(&reduce16<f16_to_f32, f32_to_f16, ReduceOp::kSum>, 1, &fp16_ops[0]));
    LB_MPI_CHECK(MPI_Op_create(&reduce16<f16_to_f32, f32_to_f16, ReduceOp::kMax>, 1, &fp16_ops[1]));
    LB_MPI_CHECK(MPI_Op_create(&reduce16<f16_to_f32, f32_to_f16, ReduceOp::kMin>, 1, &fp16_ops[2]));
  }
};

const HalfTypes& half_types() {
  static HalfTypes h;
  return h;
}

int as_int_count(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX))
    throw CommError(std::string(what) + ": " + std::to_string(n) + " elements exceed MPI's int count");
  return static_cast<int>(n);
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// One MPI request and the arguments MPI reads until it completes. Shared between the Work (which the
// caller owns) and the communicator's list of outstanding requests (which progress() tests).
struct RequestSlot {
  MPI_Request req = MPI_REQUEST_NULL;
  std::vector<int> int_args;  // all_to_allv: counts and displacements
};

class MpiWork final : public Work {
 public:
  explicit MpiWork(std::shared_ptr<RequestSlot> slot) : slot_(std::move(slot)) {}
  ~MpiWork() override {
    // A Work destroyed unfinished waits (the buffers must outlive the operation); after MPI_Finalize
    // there is nothing left to wait for.
    if (slot_->req != MPI_REQUEST_NULL && !mpi_finalized()) MPI_Wait(&slot_->req, MPI_STATUS_IGNORE);
  }
  void wait() override {
    if (slot_->req != MPI_REQUEST_NULL) LB_MPI_CHECK(MPI_Wait(&slot_->req, MPI_STATUS_IGNORE));
  }
  bool test() override {
    if (slot_->req == MPI_REQUEST_NULL) return true;
    int done = 0;
    LB_MPI_CHECK(MPI_Test(&slot_->req, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }

 private:
  std::shared_ptr<RequestSlot> slot_;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm parent) {
    LB_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
    LB_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    LB_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    LB_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    (void)half_types();
  }
  ~MpiCommunicator() override {
    // MPI_Comm_free is collective in spirit but local in effect: outstanding operations complete first.
    if (comm_ != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "mpi"; }
  bool device_buffers() const override { return false; }

  // Open MPI moves a non-blocking collective forward only inside MPI calls: test each outstanding
  // request of this communicator once.
  void progress() override {
    for (auto& weak : outstanding_) {
      auto slot = weak.lock();
      if (!slot || slot->req == MPI_REQUEST_NULL) continue;
      int done = 0;
      LB_MPI_CHECK(MPI_Test(&slot->req, &done, MPI_STATUS_IGNORE));
    }
    prune();
  }

 protected:
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    LB_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
    auto c = std::make_unique<MpiCommunicator>(sub);  // duplicates it
    MPI_Comm_free(&sub);
    return c;
  }

  std::unique_ptr<Work> do_all_reduce(void* buf, size_t count, DataType t, ReduceOp op) override {
    auto slot = std::make_shared<RequestSlot>();
    LB_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, as_int_count(count, "all_reduce"), mpi_datatype(t),
                                mpi_reduce_op(t, op), comm_, &slot->req));
    return track(std::move(slot));
  }

  std::unique_ptr<Work> do_reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t,
                                          ReduceOp op) override {
    auto slot = std::make_shared<RequestSlot>();
    LB_MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, as_int_count(recv_count, "reduce_scatter"), mpi_datatype(t),
                                           mpi_reduce_op(t, op), comm_, &slot->req));
    return track(std::move(slot));
  }

  std::unique_ptr<Work> do_all_gather(const void* send, void* recv, size_t send_count, DataType t) override {
    auto slot = std::make_shared<RequestSlot>();
    int n = as_int_count(send_count, "all_gather");
    const char* mine = static_cast<const char*>(recv) + send_count * dtype_size(t) * static_cast<size_t>(rank_);
    const void* src = (send == mine) ? MPI_IN_PLACE : send;
    LB_MPI_CHECK(MPI_Iallgather(src, n, mpi_datatype(t), recv, n, mpi_datatype(t), comm_, &slot->req));
    return track(std::move(slot));
  }

  std::unique_ptr<Work> do_broadcast(void* buf, size_t count, DataType t, int root) override {
    auto slot = std::make_shared<RequestSlot>();
    LB_MPI_CHECK(
        MPI_Ibcast(buf, as_int_count(count, "broadcast"), mpi_datatype(t), root, comm_, &slot->req));
    return track(std::move(slot));
  }

  std::unique_ptr<Work> do_all_to_all(const void* send, void* recv, size_t count, DataType t) override {
    auto slot = std::make_shared<RequestSlot>();
    int n = as_int_count(count, "all_to_all");
    LB_MPI_CHECK(MPI_Ialltoall(send, n, mpi_datatype(t), recv, n, mpi_datatype(t), comm_, &slot->req));
    return track(std::move(slot));
  }

  std::unique_ptr<Work> do_all_to_allv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                       const std::vector<size_t>& recv_counts, DataType t) override {
    auto slot = std::make_shared<RequestSlot>();
    // MPI_Ialltoallv reads its count arrays until completion, so they live in the slot:
    // [send counts | recv counts | send displacements | recv displacements].
    std::vector<int>& a = slot->int_args;
    a.assign(4 * static_cast<size_t>(size_), 0);
    size_t soff = 0, roff = 0;
    for (int r = 0; r < size_; ++r) {
      a[r] = as_int_count(send_counts[r], "all_to_allv");
      a[size_ + r] = as_int_count(recv_counts[r], "all_to_allv");
      a[2 * size_ + r] = as_int_count(soff, "all_to_allv displacement");
      a[3 * size_ + r] = as_int_count(roff, "all_to_allv displacement");
      soff += send_counts[r];
      roff += recv_counts[r];
    }
    LB_MPI_CHECK(MPI_Ialltoallv(send, &a[0], &a[2 * size_], mpi_datatype(t), recv, &a[size_], &a[3 * size_],
                                mpi_datatype(t), comm_, &slot->req));
    return track(std::move(slot));
  }

  std::unique_ptr<Work> do_barrier() override {
    auto slot = std::make_shared<RequestSlot>();
    LB_MPI_CHECK(MPI_Ibarrier(comm_, &slot->req));
    return track(std::move(slot));
  }

 private:
  std::unique_ptr<Work> track(std::shared_ptr<RequestSlot> slot) {
    prune();
    outstanding_.push_back(slot);
    return std::make_unique<MpiWork>(std::move(slot));
  }
  void prune() {
    outstanding_.erase(std::remove_if(outstanding_.begin(), outstanding_.end(),
                                      [](const std::weak_ptr<RequestSlot>& w) {
                                        auto s = w.lock();
                                        return !s || s->req == MPI_REQUEST_NULL;
                                      }),
                       outstanding_.end());
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::weak_ptr<RequestSlot>> outstanding_;
};

}  // namespace

MPI_Datatype mpi_datatype(DataType t) {
  switch (t) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kBFloat16: return half_types().bf16;
    case DataType::kFloat16: return half_types().fp16;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat64: return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_reduce_op(DataType t, ReduceOp op) {
  int i = static_cast<int>(op);
  if (t == DataType::kBFloat16) return half_types().bf16_ops[i];
  if (t == DataType::kFloat16) return half_types().fp16_ops[i];
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) { return std::make_unique<MpiCommunicator>(comm); }

}  // namespace lorabench::comm
