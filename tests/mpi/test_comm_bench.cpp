// The collective benchmark engine on tiny sizes: every op and dtype passes its closed-form check, rows
// are identical on every rank, bandwidths follow nccl-tests' formulas, and a communicator that corrupts
// one element makes the check fail (so the check can fail).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>

#include "lorabench/comm/bench.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/core/error.hpp"

using namespace lorabench::comm;

namespace {

BenchOptions tiny(DataType t) {
  BenchOptions o;
  o.dtype = t;
  o.min_bytes = 64;
  o.max_bytes = 4096;
  o.factor = 8;
  o.warmup = 1;
  o.iters = 2;
  return o;
}

TEST(Bench, EveryOpAndDtypePassesItsCheck) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const int n = comm->size();
  for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16, DataType::kInt32,
                     DataType::kInt64, DataType::kFloat64}) {
    BenchOptions o = tiny(t);
    BenchRunner runner(*comm, MPI_COMM_WORLD, o);
    for (BenchOp op : o.ops) {
      for (size_t bytes : size_sweep(o.min_bytes, o.max_bytes, o.factor)) {
        BenchLayout l = bench_layout(op, bytes, t, n);
        if (l.bytes == 0) continue;
        BenchRow row = runner.run(op, l);
        SCOPED_TRACE(std::string(bench_op_name(op)) + " " + dtype_name(t) + " " + std::to_string(l.bytes));
        EXPECT_EQ(row.check_passed, 1) << row.check_detail;
        EXPECT_EQ(row.wrong, 0);
        EXPECT_EQ(row.bytes, l.bytes);
        EXPECT_GT(row.time_avg_s, 0);
        EXPECT_LE(row.time_min_s, row.time_avg_s);
        EXPECT_GE(row.time_max_s, row.time_avg_s);
        EXPECT_NEAR(row.algbw_GBps, double(l.bytes) / 1e9 / row.time_avg_s, 1e-9 * row.algbw_GBps + 1e-12);
        EXPECT_NEAR(row.busbw_GBps, row.algbw_GBps * bus_factor(op, n), 1e-9 * row.busbw_GBps + 1e-12);
        EXPECT_GT(row.raw_mpi_time_s, 0);
        EXPECT_GT(row.memcpy_time_s, 0);
        EXPECT_EQ(row.root, op == BenchOp::kBroadcast ? 0 : -1);
        // Identical on every rank.
        double mine[3] = {row.time_avg_s, row.raw_mpi_time_s, row.memcpy_time_s}, lo[3], hi[3];
        MPI_Allreduce(mine, lo, 3, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(mine, hi, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        for (int i = 0; i < 3; ++i) EXPECT_EQ(lo[i], hi[i]);
      }
    }
  }
}

// A fake backend: the MPI backend, except that rank 1's all_reduce result has element 3 off by one.
class CorruptingCommunicator final : public Communicator {
 public:
  CorruptingCommunicator() : inner_(make_mpi_communicator(MPI_COMM_WORLD)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend_name() const override { return "corrupting"; }
  bool device_buffers() const override { return false; }

 protected:
  std::unique_ptr<Work> do_all_reduce(void* buf, size_t count, DataType t, ReduceOp op) override {
    inner_->all_reduce(buf, count, t, op);
    if (rank() == 1 && count > 3 && t == DataType::kFloat32) static_cast<float*>(buf)[3] += 1.0f;
    return std::make_unique<CompletedWork>();
  }
  std::unique_ptr<Work> do_reduce_scatter(const void* s, void* r, size_t c, DataType t, ReduceOp op) override {
    return inner_->reduce_scatter_async(s, r, c, t, op);
  }
  std::unique_ptr<Work> do_all_gather(const void* s, void* r, size_t c, DataType t) override {
    return inner_->all_gather_async(s, r, c, t);
  }
  std::unique_ptr<Work> do_broadcast(void* b, size_t c, DataType t, int root) override {
    return inner_->broadcast_async(b, c, t, root);
  }
  std::unique_ptr<Work> do_all_to_allv(const void* s, const std::vector<size_t>& sc, void* r,
                                       const std::vector<size_t>& rc, DataType t) override {
    return inner_->all_to_allv_async(s, sc, r, rc, t);
  }
  std::unique_ptr<Work> do_barrier() override { return inner_->barrier_async(); }

 private:
  std::unique_ptr<Communicator> inner_;
};

TEST(Bench, CheckDetectsAWrongResult) {
  CorruptingCommunicator comm;
  BenchOptions o = tiny(DataType::kFloat32);
  BenchRunner runner(comm, MPI_COMM_WORLD, o);
  BenchRow row = runner.run(BenchOp::kAllReduce, bench_layout(BenchOp::kAllReduce, 1024, DataType::kFloat32, comm.size()));
  EXPECT_EQ(row.check_passed, 0);
  EXPECT_EQ(row.wrong, 1);
  EXPECT_NE(row.check_detail.find("rank 1 element 3"), std::string::npos) << row.check_detail;
  // The other collectives still pass through the same runner.
  BenchRow ok = runner.run(BenchOp::kAllGather, bench_layout(BenchOp::kAllGather, 1024, DataType::kFloat32, comm.size()));
  EXPECT_EQ(ok.check_passed, 1) << ok.check_detail;
}

TEST(Bench, UncheckedRowsSayNotChecked) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  BenchOptions o = tiny(DataType::kInt32);
  o.check = false;
  BenchRunner runner(*comm, MPI_COMM_WORLD, o);
  BenchRow row = runner.run(BenchOp::kBroadcast, bench_layout(BenchOp::kBroadcast, 256, DataType::kInt32, comm->size()));
  EXPECT_EQ(row.check_passed, -1);
}

}  // namespace
