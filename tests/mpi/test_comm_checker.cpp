// The collective checker: silent when the ranks agree, a clear CommError on every rank naming the ranks
// and signatures when they do not, a timeout instead of a hang when a rank does not arrive.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <thread>

#include "lorabench/comm/checked_communicator.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/core/error.hpp"
#include "mpi_test_util.hpp"

using namespace lorabench::comm;
using lbtest::world_rank;
using lbtest::world_size;
using lorabench::CommError;

namespace {

std::string others() { return world_size() == 2 ? "rank 1" : "ranks 1-" + std::to_string(world_size() - 1); }

std::unique_ptr<Communicator> checked(double timeout_s = 60) {
  return make_checked_communicator(make_mpi_communicator(MPI_COMM_WORLD), MPI_COMM_WORLD, CheckerOptions{timeout_s});
}

// Runs `f` expecting a CommError; returns its message ("" and a failure when none is thrown).
template <class F>
std::string comm_error(F&& f) {
  try {
    f();
  } catch (const CommError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a CommError on rank " << world_rank();
  return "";
}

TEST(Checker, SilentWhenRanksAgree) {
  auto c = checked();
  std::vector<float> a(8, 1.f), g(8 * static_cast<size_t>(world_size()));
  EXPECT_NO_THROW(c->all_reduce(a.data(), 8, DataType::kFloat32, ReduceOp::kSum));
  EXPECT_NO_THROW(c->all_gather(a.data(), g.data(), 8, DataType::kFloat32));
  EXPECT_NO_THROW(c->broadcast(a.data(), 8, DataType::kFloat32, world_size() - 1));
  EXPECT_NO_THROW(c->barrier());
  EXPECT_EQ(a[0], float(world_size()));
}

TEST(Checker, CountMismatchNamesRanksAndSignatures) {
  auto c = checked();
  std::vector<float> a(16, 1.f);
  c->barrier();  // call #0
  const size_t count = world_rank() == 0 ? 8 : 9;
  std::string msg = comm_error([&] { c->all_reduce(a.data(), count, DataType::kFloat32, ReduceOp::kSum); });
  EXPECT_NE(msg.find("collective mismatch at call #1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0: all_reduce(count=8, dtype=fp32, op=sum)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(others() + ": all_reduce(count=9, dtype=fp32, op=sum)"), std::string::npos) << msg;
  // The inner collective never ran: the data is untouched.
  EXPECT_EQ(a[0], 1.f);
  // And the checker refuses further use.
  std::string again = comm_error([&] { c->barrier(); });
  EXPECT_NE(again.find("unusable"), std::string::npos) << again;
}

TEST(Checker, KindMismatch) {
  auto c = checked();
  std::vector<float> a(4, 1.f);
  std::string msg = comm_error([&] {
    if (world_rank() == 0) {
      c->broadcast(a.data(), 4, DataType::kFloat32, 0);
    } else {
      c->all_reduce(a.data(), 4, DataType::kFloat32, ReduceOp::kSum);
    }
  });
  EXPECT_NE(msg.find("rank 0: broadcast(count=4, dtype=fp32, root=0)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(others() + ": all_reduce(count=4, dtype=fp32, op=sum)"), std::string::npos) << msg;
}

TEST(Checker, DtypeOpAndRootMismatches) {
  {
    auto c = checked();
    std::vector<uint16_t> a(4);
    DataType t = world_rank() == 0 ? DataType::kBFloat16 : DataType::kFloat16;
    std::string msg = comm_error([&] { c->all_reduce(a.data(), 4, t, ReduceOp::kSum); });
    EXPECT_NE(msg.find("dtype=bf16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dtype=fp16"), std::string::npos) << msg;
  }
  {
    auto c = checked();
    std::vector<float> a(4 * static_cast<size_t>(world_size())), b(4);
    ReduceOp op = world_rank() == 0 ? ReduceOp::kMax : ReduceOp::kSum;
    std::string msg = comm_error([&] { c->reduce_scatter(a.data(), b.data(), 4, DataType::kFloat32, op); });
    EXPECT_NE(msg.find("rank 0: reduce_scatter(count=4, dtype=fp32, op=max)"), std::string::npos) << msg;
  }
  {
    auto c = checked();
    std::vector<float> a(4);
    int root = world_rank() % 2;  // even ranks say 0, odd ranks say 1
    std::string msg = comm_error([&] { c->broadcast(a.data(), 4, DataType::kFloat32, root); });
    std::string evens = world_size() == 2 ? "rank 0" : "ranks 0,2";
    std::string odds = world_size() == 2 ? "rank 1" : "ranks 1,3";
    EXPECT_NE(msg.find(evens + ": broadcast(count=4, dtype=fp32, root=0)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(odds + ": broadcast(count=4, dtype=fp32, root=1)"), std::string::npos) << msg;
  }
}

TEST(Checker, UnevenAllToAllPairsMustAgree) {
  const int n = world_size(), me = world_rank();
  {
    // Consistent uneven counts pass: rank i sends i+j+1 elements to rank j.
    auto c = checked();
    std::vector<size_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
    size_t st = 0, rt = 0;
    for (int j = 0; j < n; ++j) {
      st += sc[static_cast<size_t>(j)] = static_cast<size_t>(me + j + 1);
      rt += rc[static_cast<size_t>(j)] = static_cast<size_t>(j + me + 1);
    }
    std::vector<int32_t> s(st, me), r(rt, -1);
    EXPECT_NO_THROW(c->all_to_allv(s.data(), sc, r.data(), rc, DataType::kInt32));
    EXPECT_EQ(r.front(), 0);
    EXPECT_EQ(r.back(), n - 1);
  }
  {
    // Rank 1 expects one element more from rank 0 than rank 0 sends.
    auto c = checked();
    std::vector<size_t> sc(static_cast<size_t>(n), 2), rc(static_cast<size_t>(n), 2);
    if (me == 1) rc[0] = 3;
    std::vector<int32_t> s(64), r(64);
    std::string msg = comm_error([&] { c->all_to_allv(s.data(), sc, r.data(), rc, DataType::kInt32); });
    EXPECT_NE(msg.find("all_to_allv counts disagree"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0 sends 2 elements to rank 1, which expects 3"), std::string::npos) << msg;
  }
  {
    // Equal all_to_all on one rank against uneven on the others is a signature mismatch.
    auto c = checked();
    std::vector<size_t> counts(static_cast<size_t>(n), 1);
    std::vector<int32_t> s(64), r(64);
    std::string msg = comm_error([&] {
      if (me == 0) {
        c->all_to_all(s.data(), r.data(), 1, DataType::kInt32);
      } else {
        c->all_to_allv(s.data(), counts, r.data(), counts, DataType::kInt32);
      }
    });
    EXPECT_NE(msg.find("rank 0: all_to_all(count=1, dtype=int32)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(others() + ": all_to_allv(dtype=int32)"), std::string::npos) << msg;
  }
}

TEST(Checker, TimesOutInsteadOfHanging) {
  // Rank 0 arrives 2.5 s late; the others give up after 0.3 s with a clear message. Then rank 0's check
  // completes against their (abandoned) contributions and everyone meets in the inner barrier.
  auto inner = make_mpi_communicator(MPI_COMM_WORLD);
  Communicator* raw = inner.get();
  auto c = make_checked_communicator(std::move(inner), MPI_COMM_WORLD, CheckerOptions{0.3});
  if (world_rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    EXPECT_NO_THROW(c->barrier());
  } else {
    std::string msg = comm_error([&] { c->barrier(); });
    EXPECT_NE(msg.find("not every rank reached the collective within 0.3 s"), std::string::npos) << msg;
    EXPECT_NE(msg.find("call #0 barrier()"), std::string::npos) << msg;
    raw->barrier();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Checker, DescribeSignature) {
  CollectiveSignature s{3, static_cast<int>(CollectiveKind::kBroadcast), static_cast<int>(DataType::kInt64), 12, 2};
  EXPECT_EQ(describe_signature(s), "broadcast(count=12, dtype=int64, root=2)");
  s.kind = static_cast<int>(CollectiveKind::kBarrier);
  EXPECT_EQ(describe_signature(s), "barrier()");
}

}  // namespace
