// The NCCL bootstrap on CPU ranks: ncclGetUniqueId needs no GPU, so the MPI broadcast of the 128-byte id
// is tested here. In a build without NCCL the same entry points must refuse clearly.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>

#include "comm_test_util.hpp"
#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/core/error.hpp"

using namespace lorabench::comm;

namespace {

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// All ranks' ids, rank-major.
std::vector<unsigned char> gather_ids(const NcclUniqueIdBytes& id) {
  std::vector<unsigned char> all(kNcclUniqueIdBytes * static_cast<size_t>(world_size()));
  MPI_Allgather(id.data(), kNcclUniqueIdBytes, MPI_BYTE, all.data(), kNcclUniqueIdBytes, MPI_BYTE, MPI_COMM_WORLD);
  return all;
}

TEST(NcclBootstrap, EveryRankReceivesTheSame128Bytes) {
  if (!nccl_built()) {
    EXPECT_THROW(nccl_unique_id_broadcast(MPI_COMM_WORLD, 0), lorabench::CommError);
    return;
  }
  for (int root : {0, world_size() - 1}) {
    NcclUniqueIdBytes id = nccl_unique_id_broadcast(MPI_COMM_WORLD, root);
    EXPECT_TRUE(std::any_of(id.begin(), id.end(), [](unsigned char b) { return b != 0; })) << "an all-zero id";
    auto all = gather_ids(id);
    for (int r = 1; r < world_size(); ++r)
      EXPECT_TRUE(std::equal(all.begin(), all.begin() + kNcclUniqueIdBytes, all.begin() + r * kNcclUniqueIdBytes))
          << "rank " << r << " received a different id from root " << root;
  }
  // A second bootstrap makes a new id (a new communicator must not reuse the old rendezvous).
  auto a = nccl_unique_id_broadcast(MPI_COMM_WORLD, 0);
  auto b = nccl_unique_id_broadcast(MPI_COMM_WORLD, 0);
  EXPECT_NE(a, b);
}

TEST(NcclBootstrap, RootOutOfRangeIsAnError) {
  EXPECT_THROW(nccl_unique_id_broadcast(MPI_COMM_WORLD, world_size()), lorabench::CommError);
}

TEST(NcclCommunicator, AMissingDeviceFailsOnEveryRankWithAClearMessage) {
  // Device index == the number of visible devices never exists (0 here: no GPU).
  const int devices = cuda_device_count();
  EXPECT_TRUE(lbtest::device_count_plausible(devices, lbtest::nvidia_device_nodes(), std::getenv("CUDA_VISIBLE_DEVICES")))
      << devices << " CUDA devices with " << lbtest::nvidia_device_nodes() << " NVIDIA device nodes";
  try {
    make_nccl_communicator(MPI_COMM_WORLD, devices);
    ADD_FAILURE() << "expected a CommError";
  } catch (const lorabench::CommError& e) {
    std::string m = e.what();
    if (nccl_built()) {
      EXPECT_NE(m.find("CUDA device " + std::to_string(devices) + " requested but this process sees " +
                       std::to_string(devices)),
                std::string::npos)
          << m;
    } else {
      EXPECT_NE(m.find("no NCCL backend"), std::string::npos) << m;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every rank got here: nobody is stuck in ncclCommInitRank
}

TEST(NcclCommunicator, VersionIsReportedWhenBuilt) {
  EXPECT_EQ(nccl_version().empty(), !nccl_built());
}

}  // namespace
