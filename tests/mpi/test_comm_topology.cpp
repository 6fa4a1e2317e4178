// Topology discovery on one host: the real layout, and the same ranks split into emulated nodes
// (node index, local rank, device assignment), and a clean error when the split does not divide.
#include <gtest/gtest.h>
#include <mpi.h>

#include "lorabench/comm/topology.hpp"
#include "lorabench/core/error.hpp"
#include "mpi_test_util.hpp"

using namespace lorabench::comm;
using lbtest::world_rank;
using lbtest::world_size;

namespace {


TEST(Topology, OneHostWithoutEmulation) {
  Topology t = discover_topology(MPI_COMM_WORLD, 0, 0);
  const int r = world_rank(), n = world_size();
  ASSERT_EQ(t.hosts, 1) << "these tests run every rank on one host";
  EXPECT_EQ(t.rank, r);
  EXPECT_EQ(t.world_size, n);
  EXPECT_FALSE(t.emulated);
  EXPECT_EQ(t.node_count, 1);
  EXPECT_EQ(t.node_index, 0);
  EXPECT_EQ(t.local_rank, r);
  EXPECT_EQ(t.local_size, n);
  EXPECT_EQ(t.host_local_rank, r);
  EXPECT_EQ(t.host_local_size, n);
  EXPECT_EQ(t.device, "cpu");
  ASSERT_EQ(t.ranks.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(t.ranks[i].rank, i);
    EXPECT_EQ(t.ranks[i].local_rank, i);
    EXPECT_EQ(t.ranks[i].node, 0);
    EXPECT_EQ(t.ranks[i].host, t.ranks[0].host);
    EXPECT_EQ(t.ranks[i].device, "cpu");
    EXPECT_GT(t.ranks[i].pid, 0);
  }
  EXPECT_NE(describe_rank(t).find("rank " + std::to_string(r) + "/" + std::to_string(n)), std::string::npos)
      << describe_rank(t);
}

TEST(Topology, TwoEmulatedNodes) {
  // 4 ranks as 2 emulated nodes: ranks 0,1 are node 0 (local 0,1), ranks 2,3 node 1 (local 0,1).
  // 2 ranks as 2 emulated nodes: one rank per node.
  const int r = world_rank(), n = world_size();
  const int per = n / 2;
  Topology t = discover_topology(MPI_COMM_WORLD, 2, 0);
  ASSERT_EQ(t.hosts, 1);
  EXPECT_TRUE(t.emulated);
  EXPECT_EQ(t.node_count, 2);
  EXPECT_EQ(t.node_index, r / per);
  EXPECT_EQ(t.local_rank, r % per);
  EXPECT_EQ(t.local_size, per);
  EXPECT_EQ(t.host_local_rank, r);
  EXPECT_EQ(t.host_local_size, n);
  EXPECT_EQ(t.device, "cpu");
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(t.ranks[i].node, i / per) << "rank " << i;
    EXPECT_EQ(t.ranks[i].local_rank, i % per) << "rank " << i;
    EXPECT_EQ(t.ranks[i].host_local_rank, i) << "rank " << i;
  }
  EXPECT_NE(describe_rank(t).find("node " + std::to_string(r / per) + "/2 (emulated)"), std::string::npos)
      << describe_rank(t);
}

TEST(Topology, EmulatedNodesShareTheHostsGpus) {
  const int r = world_rank(), n = world_size();
  // As many GPUs as ranks on the host: every rank gets its own, even across emulated nodes.
  Topology t = discover_topology(MPI_COMM_WORLD, 2, n);
  EXPECT_EQ(t.device, "cuda:" + std::to_string(r));
  for (int i = 0; i < n; ++i) EXPECT_EQ(t.ranks[i].device, "cuda:" + std::to_string(i));
  // Fewer GPUs than ranks: round robin over the host's ranks.
  Topology u = discover_topology(MPI_COMM_WORLD, 2, 2);
  EXPECT_EQ(u.device, "cuda:" + std::to_string(r % 2));
  // One GPU: everyone on cuda:0.
  Topology v = discover_topology(MPI_COMM_WORLD, 0, 1);
  EXPECT_EQ(v.device, "cuda:0");
}

TEST(Topology, SplitThatDoesNotDivideIsAConfigErrorOnEveryRank) {
  const int n = world_size();
  try {
    discover_topology(MPI_COMM_WORLD, n + 1, 0);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const lorabench::ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("parallel.emulate_nodes"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(n + 1)), std::string::npos) << m;
  }
  // Still usable afterwards (no rank left behind in a collective).
  EXPECT_NO_THROW(discover_topology(MPI_COMM_WORLD, 1, 0));
}

TEST(Topology, EveryRankIsItsOwnNode) {
  const int r = world_rank(), n = world_size();
  Topology t = discover_topology(MPI_COMM_WORLD, n, 0);
  EXPECT_EQ(t.node_count, n);
  EXPECT_EQ(t.node_index, r);
  EXPECT_EQ(t.local_rank, 0);
  EXPECT_EQ(t.local_size, 1);
}

}  // namespace
