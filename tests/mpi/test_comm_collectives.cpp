// The MPI backend, plain and behind the collective checker: every collective and dtype with
// rank-dependent data against closed forms, odd counts, uneven all_to_all, several non-blocking
// collectives outstanding at once, statistics.
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm_test_util.hpp"
#include "lorabench/comm/checked_communicator.hpp"
#include "lorabench/comm/mesh.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/core/error.hpp"

using namespace lorabench::comm;
using namespace lbtest;

namespace {

std::unique_ptr<Communicator> make(const std::string& kind) {
  auto c = make_mpi_communicator(MPI_COMM_WORLD);
  if (kind == "mpi+checked") c = make_checked_communicator(std::move(c), MPI_COMM_WORLD);
  return c;
}

class Collectives : public ::testing::TestWithParam<std::string> {};

TEST_P(Collectives, EveryCollectiveAndDtypeMatchesClosedForms) {
  auto c = make(GetParam());
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(c->rank(), rank);
  EXPECT_EQ(c->size(), size);
  EXPECT_EQ(c->backend_name(), "mpi");
  EXPECT_FALSE(c->device_buffers());
  check_everything(*c, -1);
}

TEST_P(Collectives, HalfPrecisionSumsOfExactValues) {
  // (r+1)/4 summed over ranks: n(n+1)/8, exact in bf16 and fp16 for these rank counts.
  auto c = make(GetParam());
  const int n = c->size();
  for (DataType t : {DataType::kBFloat16, DataType::kFloat16}) {
    std::vector<uint16_t> v(5);
    for (auto& x : v)
      x = t == DataType::kBFloat16 ? f32_to_bf16(0.25f * float(c->rank() + 1)) : f32_to_f16(0.25f * float(c->rank() + 1));
    c->all_reduce(v.data(), v.size(), t, ReduceOp::kSum);
    for (auto x : v) {
      float got = t == DataType::kBFloat16 ? bf16_to_f32(x) : f16_to_f32(x);
      EXPECT_EQ(got, 0.125f * float(n * (n + 1))) << dtype_name(t);
    }
    c->all_reduce(v.data(), v.size(), t, ReduceOp::kMax);  // all equal: max is the value itself
    for (auto x : v) EXPECT_EQ(t == DataType::kBFloat16 ? bf16_to_f32(x) : f16_to_f32(x), 0.125f * float(n * (n + 1)));
  }
}

TEST_P(Collectives, ZeroCountsAndBarrier) {
  auto c = make(GetParam());
  float dummy = 1.f;
  c->all_reduce(&dummy, 0, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(dummy, 1.f);
  std::vector<size_t> zeros(static_cast<size_t>(c->size()), 0);
  c->all_to_allv(&dummy, zeros, &dummy, zeros, DataType::kFloat32);
  c->barrier();
  auto w = c->barrier_async();
  c->wait(w);
  EXPECT_TRUE(w->test());
}

TEST_P(Collectives, StatsCountCallsAndPayloadBytes) {
  auto c = make(GetParam());
  const size_t n = static_cast<size_t>(c->size());
  std::vector<float> a(100), big(100 * n);
  c->reset_stats();
  c->all_reduce(a.data(), 100, DataType::kFloat32, ReduceOp::kSum);
  c->all_reduce(a.data(), 50, DataType::kFloat32, ReduceOp::kSum);
  c->all_gather(a.data(), big.data(), 100, DataType::kFloat32);
  c->reduce_scatter(big.data(), a.data(), 100, DataType::kFloat32, ReduceOp::kSum);
  c->broadcast(a.data(), 10, DataType::kBFloat16, 0);
  c->all_to_all(big.data(), big.data() + 0, 0, DataType::kFloat32);  // count 0: no payload
  c->barrier();
  const auto& s = c->stats();
  auto k = [](CollectiveKind x) { return static_cast<size_t>(x); };
  EXPECT_EQ(s.calls[k(CollectiveKind::kAllReduce)], 2);
  EXPECT_EQ(s.bytes[k(CollectiveKind::kAllReduce)], 600);
  EXPECT_EQ(s.bytes[k(CollectiveKind::kAllGather)], 400);
  EXPECT_EQ(s.bytes[k(CollectiveKind::kReduceScatter)], static_cast<int64_t>(400 * n));
  EXPECT_EQ(s.bytes[k(CollectiveKind::kBroadcast)], 20);
  EXPECT_EQ(s.calls[k(CollectiveKind::kAllToAll)], 1);
  EXPECT_EQ(s.calls[k(CollectiveKind::kBarrier)], 1);
  EXPECT_EQ(s.total_bytes(), static_cast<int64_t>(600 + 400 + 400 * n + 20));
  EXPECT_GE(s.wait_s, 0.0);
  c->reset_stats();
  EXPECT_EQ(c->stats().total_bytes(), 0);
}

TEST_P(Collectives, UnfinishedWorkWaitsWhenDestroyed) {
  auto c = make(GetParam());
  std::vector<int64_t> v(1 << 16, c->rank() + 1);
  { auto w = c->all_reduce_async(v.data(), v.size(), DataType::kInt64, ReduceOp::kSum); }
  const int64_t n = c->size();
  EXPECT_EQ(v.front(), n * (n + 1) / 2);
  EXPECT_EQ(v.back(), n * (n + 1) / 2);
}

// A split (a device mesh's dimension): even and odd ranks form two communicators ranked by descending world
// rank; each computes its own sums and the closed forms hold in it; its traffic counts in the parent's stats
// and its own; the collectives run through the decorators (the checker is split with it); a mesh of 2 x n/2
// is the split of comm/mesh.hpp.
TEST_P(Collectives, SplitFormsSubCommunicatorsThatReportToTheParent) {
  auto c = make(GetParam());
  const int rank = c->rank(), size = c->size();
  auto sub = c->split(rank % 2, -rank);
  int members = 0, below = 0;  // ranks of my color, and those of them with a larger world rank (ranked first)
  for (int r = 0; r < size; ++r)
    if (r % 2 == rank % 2) {
      ++members;
      below += r > rank;
    }
  EXPECT_EQ(sub->size(), members);
  EXPECT_EQ(sub->rank(), below);
  int64_t v = rank + 1, want = 0;
  for (int r = rank % 2; r < size; r += 2) want += r + 1;
  c->reset_stats();
  sub->all_reduce(&v, 1, DataType::kInt64, ReduceOp::kSum);
  EXPECT_EQ(v, want);
  check_everything(*sub, -1);
  EXPECT_GT(sub->stats().total_bytes(), 0);
  EXPECT_EQ(c->stats().total_bytes(), sub->stats().total_bytes()) << "the parent counts its split's traffic";
  EXPECT_EQ(c->stats().calls, sub->stats().calls);
  // Splitting the split: every rank alone.
  auto alone = sub->split(sub->rank(), 0);
  EXPECT_EQ(alone->size(), 1);
  double x = 2.5;
  alone->all_reduce(&x, 1, DataType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(x, 2.5);
  EXPECT_EQ(c->stats().calls[0], sub->stats().calls[0] + 1) << "a split of a split reports to the root";
}

TEST_P(Collectives, MeshSplitsIntoShardAndReplicaGroups) {
  auto c = make(GetParam());
  const int size = c->size();
  if (size % 2 != 0) GTEST_SKIP() << "needs an even number of ranks, the job has " << size;
  MeshComms m = split_mesh(*c, consecutive_mesh(size, 2));
  EXPECT_EQ(m.shard->size(), size / 2);
  EXPECT_EQ(m.replicate->size(), 2);
  EXPECT_EQ(m.me.replica, c->rank() / (size / 2));
  EXPECT_EQ(m.me.shard, c->rank() % (size / 2));
  // The shard group sums world ranks of one replica; the replicas sum the ranks holding one shard.
  int64_t in_group = c->rank(), across = c->rank();
  m.shard->all_reduce(&in_group, 1, DataType::kInt64, ReduceOp::kSum);
  m.replicate->all_reduce(&across, 1, DataType::kInt64, ReduceOp::kSum);
  const int64_t S = size / 2, first = m.me.replica * S;
  EXPECT_EQ(in_group, S * first + S * (S - 1) / 2);
  EXPECT_EQ(across, 2 * m.me.shard + S);
}
INSTANTIATE_TEST_SUITE_P(Mpi, Collectives, ::testing::Values("mpi", "mpi+checked"),
                         [](const auto& info) { return info.param == "mpi" ? std::string("plain") : std::string("checked"); });

TEST(MpiBackend, RawHandlesMatchTheBackend) {
  // The datatype/op handles lorabench comm uses for its raw MPI timings reduce like the backend.
  std::vector<uint16_t> v(3, f32_to_bf16(1.5f));
  MPI_Allreduce(MPI_IN_PLACE, v.data(), 3, mpi_datatype(DataType::kBFloat16),
                mpi_reduce_op(DataType::kBFloat16, ReduceOp::kSum), MPI_COMM_WORLD);
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  EXPECT_EQ(bf16_to_f32(v[0]), 1.5f * float(n));
  EXPECT_EQ(mpi_datatype(DataType::kFloat32), MPI_FLOAT);
  EXPECT_EQ(mpi_reduce_op(DataType::kInt64, ReduceOp::kMax), MPI_MAX);
}

}  // namespace
