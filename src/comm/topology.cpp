#include "lorabench/comm/topology.hpp"

#include <unistd.h>

#include <cstring>
#include <set>

#include "lorabench/core/error.hpp"
#include "lorabench/core/mpi_session.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::comm {

namespace {
constexpr int kHostLen = 128;

struct Record {
  char host[kHostLen];
  int local_rank;
  int host_local_rank;
  int node;
  int pid;
  int device;  // -1 = cpu
};
}  // namespace

Topology discover_topology(MPI_Comm world, int emulate_nodes, int cuda_devices) {
  Topology t;
  LB_MPI_CHECK(MPI_Comm_rank(world, &t.rank));
  LB_MPI_CHECK(MPI_Comm_size(world, &t.world_size));

  MPI_Comm local = MPI_COMM_NULL;
  LB_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &local));
  int host_local_rank = 0, host_local_size = 1;
  MPI_Comm_rank(local, &host_local_rank);
  MPI_Comm_size(local, &host_local_size);

  // Host index: the leaders (local rank 0) number themselves; everyone learns its leader's number.
  MPI_Comm leaders = MPI_COMM_NULL;
  LB_MPI_CHECK(MPI_Comm_split(world, host_local_rank == 0 ? 0 : MPI_UNDEFINED, t.rank, &leaders));
  int host_index = 0, hosts = 1;
  if (leaders != MPI_COMM_NULL) {
    MPI_Comm_rank(leaders, &host_index);
    MPI_Comm_size(leaders, &hosts);
    MPI_Comm_free(&leaders);
  }
  LB_MPI_CHECK(MPI_Bcast(&host_index, 1, MPI_INT, 0, local));
  LB_MPI_CHECK(MPI_Bcast(&hosts, 1, MPI_INT, 0, local));

  // Emulated nodes: consecutive groups of a host's ranks. Every host must split evenly, decided
  // collectively so all ranks throw together.
  int k = emulate_nodes > 1 ? emulate_nodes : 1;
  int uneven = (host_local_size % k != 0) ? 1 : 0;
  LB_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &uneven, 1, MPI_INT, MPI_MAX, world));
  MPI_Comm_free(&local);
  if (uneven) {
    throw ConfigError("parallel.emulate_nodes: " + std::to_string(k) +
                      " does not divide the ranks of every host (" + std::to_string(host_local_size) +
                      " on this one)");
  }
  int per = host_local_size / k;
  t.emulated = k > 1;
  t.local_rank = host_local_rank % per;
  t.local_size = per;
  t.host_local_rank = host_local_rank;
  t.host_local_size = host_local_size;
  t.node_index = host_index * k + host_local_rank / per;
  t.node_count = hosts * k;
  t.hosts = hosts;
  int device = cuda_devices > 0 ? host_local_rank % cuda_devices : -1;
  t.device = device < 0 ? "cpu" : "cuda:" + std::to_string(device);

  Record mine{};
  char host[kHostLen] = {0};
  gethostname(host, kHostLen - 1);
  std::memcpy(mine.host, host, kHostLen);
  mine.local_rank = t.local_rank;
  mine.host_local_rank = host_local_rank;
  mine.node = t.node_index;
  mine.pid = static_cast<int>(getpid());
  mine.device = device;
  std::vector<Record> all(static_cast<size_t>(t.world_size));
  LB_MPI_CHECK(MPI_Allgather(&mine, sizeof(Record), MPI_BYTE, all.data(), sizeof(Record), MPI_BYTE, world));
  for (int r = 0; r < t.world_size; ++r) {
    const Record& x = all[static_cast<size_t>(r)];
    RankInfo ri;
    ri.rank = r;
    ri.host = std::string(x.host, strnlen(x.host, kHostLen));
    ri.local_rank = x.local_rank;
    ri.host_local_rank = x.host_local_rank;
    ri.node = x.node;
    ri.pid = x.pid;
    ri.device = x.device < 0 ? "cpu" : "cuda:" + std::to_string(x.device);
    t.ranks.push_back(ri);
  }
  return t;
}

std::string describe_rank(const Topology& t) {
  const RankInfo& me = t.ranks.at(static_cast<size_t>(t.rank));
  return strformat("rank %d/%d host %s node %d/%d%s local rank %d/%d device %s pid %d", t.rank, t.world_size,
                   me.host.c_str(), t.node_index, t.node_count, t.emulated ? " (emulated)" : "", t.local_rank,
                   t.local_size, t.device.c_str(), me.pid);
}

}  // namespace lorabench::comm
