// The collective timeline across real ranks: a rank that arrives late is waited for (wait for peers, not
// transfer), a slowed link is transfer (not waiting), and the clock offsets between ranks: exact (0) on
// one host, and a ping-pong estimate whose error bound holds (the true offset on one host is 0).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "lorabench/comm/clock_sync.hpp"
#include "lorabench/comm/delayed_communicator.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/comm/timeline.hpp"
#include "mpi_test_util.hpp"

using namespace lorabench::comm;
using lbtest::world_rank;
using lbtest::world_size;

namespace {

// Every rank's timeline (ready, begin, blocked of each collective), on every rank.
std::vector<std::vector<CollectiveTiming>> everyones(const std::vector<CollectiveTiming>& mine) {
  const int n = world_size();
  const int k = static_cast<int>(mine.size());
  std::vector<double> send;
  for (const auto& c : mine) send.insert(send.end(), {c.ready_s, c.block_begin_s, c.blocked_s});
  std::vector<double> all(static_cast<size_t>(3 * k * n));
  MPI_Allgather(send.data(), 3 * k, MPI_DOUBLE, all.data(), 3 * k, MPI_DOUBLE, MPI_COMM_WORLD);
  std::vector<std::vector<CollectiveTiming>> out(n, std::vector<CollectiveTiming>(k));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < k; ++i) {
      const double* p = &all[static_cast<size_t>(3 * (r * k + i))];
      out[r][i].ready_s = p[0];
      out[r][i].block_begin_s = p[1];
      out[r][i].blocked_s = p[2];
    }
  return out;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

TEST(Timeline, LateRankIsWaitedForNotTransfer) {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  comm->enable_timeline(true);
  const int last = world_size() - 1;
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == last) sleep_s(0.3);  // computes 300 ms longer
  double x = 1;
  comm->all_reduce(&x, 1, DataType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(x, world_size());
  const auto t = comm->take_timeline();
  ASSERT_EQ(t.size(), 1u);
  const auto all = everyones(t);
  const std::vector<double> wait = wait_for_peers(all, std::vector<double>(world_size(), 0.0));
  ASSERT_EQ(wait.size(), static_cast<size_t>(world_size()));
  for (int r = 0; r < world_size(); ++r) {
    EXPECT_LE(wait[r], all[r][0].blocked_s) << "rank " << r;
    if (r == last) {
      EXPECT_LT(wait[r], 0.05) << "the late rank waits for no one";
    } else {
      EXPECT_GT(wait[r], 0.2) << "rank " << r << " waited for the late rank";
      EXPECT_LT(all[r][0].blocked_s - wait[r], 0.25) << "rank " << r << ": little transfer after the last arrival";
    }
  }
}

TEST(Timeline, IssuedEarlyWaitedLateIsWaiting) {
  // Every rank issues the all-reduce at once (an FSDP prefetch), then the last rank computes 300 ms before
  // it waits. Open MPI moves the collective only inside MPI calls, so the others wait for it all that
  // time: waiting for a peer, although every rank had issued it.
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  ASSERT_FALSE(comm->async_progress());
  comm->enable_timeline(true);
  const int last = world_size() - 1;
  MPI_Barrier(MPI_COMM_WORLD);
  double x = 1;
  auto w = comm->all_reduce_async(&x, 1, DataType::kFloat64, ReduceOp::kSum);
  if (world_rank() == last) sleep_s(0.3);
  comm->wait(w);
  EXPECT_EQ(x, world_size());
  const auto mine = comm->take_timeline();
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].ready_s, mine[0].block_begin_s) << "MPI: ready when the rank starts waiting";
  const auto all = everyones(mine);
  const std::vector<double> wait = wait_for_peers(all, std::vector<double>(world_size(), 0.0));
  for (int r = 0; r < last; ++r) EXPECT_GT(wait[r], 0.2) << "rank " << r;
  EXPECT_LT(wait[last], 0.05);
}

TEST(Timeline, SlowLinkIsTransferNotWaiting) {
  auto comm = make_delayed_communicator(make_mpi_communicator(MPI_COMM_WORLD), 0.3);
  comm->enable_timeline(true);
  MPI_Barrier(MPI_COMM_WORLD);
  double x = 1;
  comm->all_reduce(&x, 1, DataType::kFloat64, ReduceOp::kSum);
  const auto all = everyones(comm->take_timeline());
  const std::vector<double> wait = wait_for_peers(all, std::vector<double>(world_size(), 0.0));
  const int r = world_rank();
  EXPECT_LT(wait[r], 0.15);
  EXPECT_GE(all[r][0].blocked_s - wait[r], 0.3) << "the delay is after every rank arrived";
}

TEST(ClockSync, OneHostSharesTheClockExactly) {
  const std::vector<std::string> hosts(world_size(), "node01");
  const ClockOffsets c = estimate_clock_offsets(MPI_COMM_WORLD, hosts);
  EXPECT_EQ(c.measured, 0);
  for (int r = 0; r < world_size(); ++r) {
    EXPECT_EQ(c.offset_s[r], 0.0);
    EXPECT_EQ(c.error_s[r], 0.0);
  }
  EXPECT_EQ(c.max_error_s(), 0.0);
  EXPECT_NE(c.describe().find("shared clock"), std::string::npos);
}

TEST(ClockSync, PingPongErrorBoundHolds) {
  // Every rank measured against rank 0, although they share one clock: the true offset is 0, so the
  // estimate must lie within its own error bound (half the best round trip).
  const std::vector<std::string> hosts(world_size(), "node01");
  const ClockOffsets c = estimate_clock_offsets(MPI_COMM_WORLD, hosts, 8, /*measure_all=*/true);
  EXPECT_EQ(c.measured, world_size() - 1);
  EXPECT_EQ(c.offset_s[0], 0.0);
  for (int r = 1; r < world_size(); ++r) {
    EXPECT_GT(c.error_s[r], 0.0) << r;
    EXPECT_LE(std::abs(c.offset_s[r]), c.error_s[r]) << "rank " << r;
  }
  EXPECT_NE(c.describe().find("ping-pong"), std::string::npos) << c.describe();
  if (world_rank() == 0) std::printf("clock offsets measured on one host: %s\n", c.describe().c_str());
  // Only ranks on another host than rank 0 are measured.
  std::vector<std::string> two(world_size(), "a");
  two.back() = "b";
  const ClockOffsets d = estimate_clock_offsets(MPI_COMM_WORLD, two, 4);
  EXPECT_EQ(d.measured, world_size() > 1 ? 1 : 0);
  EXPECT_EQ(d.error_s[0], 0.0);
  // The same result on every rank (rank 0 broadcast it).
  double mine = c.offset_s.back(), max = 0, min = 0;
  MPI_Allreduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &min, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  EXPECT_EQ(max, min);
}

}  // namespace
