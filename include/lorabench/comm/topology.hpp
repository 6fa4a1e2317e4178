// Where each rank runs: world, node and local rank, and its device. Discovered with MPI
// (MPI_Comm_split_type SHARED groups the ranks of one host); `emulate_nodes` splits each host's ranks
// into that many emulated nodes so multi-node logic can be exercised on one machine.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace lorabench::comm {

struct RankInfo {
  int rank = 0;
  std::string host;
  int local_rank = 0;       // within its (possibly emulated) node
  int host_local_rank = 0;  // within its host
  int node = 0;
  std::string device;  // "cpu" or "cuda:N"
  int pid = 0;
};

struct Topology {
  int world_size = 1;
  int rank = 0;
  int local_rank = 0;   // rank within its (possibly emulated) node
  int local_size = 1;   // ranks on this (possibly emulated) node
  int host_local_rank = 0;  // rank within its host (equals local_rank unless nodes are emulated)
  int host_local_size = 1;  // ranks on this host
  int node_index = 0;
  int node_count = 1;
  int hosts = 1;        // distinct hosts (real nodes)
  bool emulated = false;
  std::string device;   // this rank's device
  std::vector<RankInfo> ranks;  // every rank, in rank order (same on all ranks)
};

// Collective over `world`. `cuda_devices` = visible CUDA devices (0 on CPU machines); a rank uses
// cuda:(host_local_rank % cuda_devices) when there are any: GPUs belong to the host, so emulated nodes
// on one host share its devices without two ranks landing on one GPU while another idles (NCCL refuses
// two ranks of one communicator on one GPU). Ranks are grouped into emulated nodes in host-local order:
// emulated node j of a host holds its host-local ranks j*per .. (j+1)*per-1. Throws ConfigError on every
// rank when emulate_nodes does not divide the ranks of every host.
Topology discover_topology(MPI_Comm world, int emulate_nodes, int cuda_devices);

// "rank 1/4 host node07 node 0/2 local rank 1/2 device cpu"
std::string describe_rank(const Topology& t);

}  // namespace lorabench::comm
