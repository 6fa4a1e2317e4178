// The NCCL backend on real GPUs (one per rank): the same collective checks as the MPI backend, on device
// memory, plain and behind the checker, and on its splits. Label "gpu". Exits 77 (ctest: Skipped, never Passed) on every
// rank when some rank has no GPU of its own, e.g. on CPU-only machines.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "comm_test_util.hpp"
#include "lorabench/comm/checked_communicator.hpp"
#include "lorabench/comm/topology.hpp"
#include "lorabench/core/mpi_session.hpp"

using namespace lorabench::comm;

namespace {

int g_device = -1;

class NcclCollectives : public ::testing::TestWithParam<bool> {};

TEST_P(NcclCollectives, EveryCollectiveAndDtypeMatchesClosedForms) {
  std::unique_ptr<Communicator> c = make_nccl_communicator(MPI_COMM_WORLD, g_device, NcclOptions{120});
  if (GetParam()) c = make_checked_communicator(std::move(c), MPI_COMM_WORLD);
  EXPECT_EQ(c->backend_name(), "nccl");
  EXPECT_TRUE(c->device_buffers());
  lbtest::check_everything(*c, g_device);
  c->barrier();
}

// A split (ncclCommSplit; a device mesh's dimension): every rank alone, and the whole world again, each
// with the closed forms; the split's traffic counts in the parent's stats.
TEST_P(NcclCollectives, SplitsAreNcclCommunicatorsOfTheirOwn) {
  std::unique_ptr<Communicator> c = make_nccl_communicator(MPI_COMM_WORLD, g_device, NcclOptions{120});
  if (GetParam()) c = make_checked_communicator(std::move(c), MPI_COMM_WORLD);
  auto alone = c->split(c->rank(), 0);
  EXPECT_EQ(alone->size(), 1);
  EXPECT_EQ(alone->backend_name(), "nccl");
  lbtest::check_everything(*alone, g_device);
  auto all = c->split(0, -c->rank());  // ranked backwards
  EXPECT_EQ(all->size(), c->size());
  EXPECT_EQ(all->rank(), c->size() - 1 - c->rank());
  c->reset_stats();
  lbtest::check_everything(*all, g_device);
  EXPECT_EQ(c->stats().total_bytes(), all->stats().total_bytes()) << "the parent counts its split's traffic";
  all->barrier();
}

INSTANTIATE_TEST_SUITE_P(Nccl, NcclCollectives, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? std::string("checked") : std::string("plain"); });

}  // namespace

int main(int argc, char** argv) {
  lorabench::MpiSession mpi(&argc, &argv);
  const int devices = cuda_device_count();
  Topology topo = discover_topology(MPI_COMM_WORLD, 0, devices);
  // One GPU per rank: the host's ranks must not outnumber its devices.
  int ok = devices > 0 && topo.host_local_size <= devices ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ok) {
    if (mpi.rank() == 0)
      std::printf("SKIPPED: needs one CUDA device per rank (this rank sees %d for %d ranks on its host)\n", devices,
                  topo.host_local_size);
    return 77;
  }
  g_device = topo.host_local_rank % devices;
  ::testing::InitGoogleTest(&argc, argv);
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
