// The data-parallel device mesh: dp_replicate x dp_shard ranks. A rank's coordinates say which replica
// group it is in and which shard it holds; the shard dimension is placed inside a node where the ranks of
// a node allow it, so that what crosses nodes is the replicas' gradient reduction only (HSDP,
// docs/strategies.md). Torch-free.
//
// Placement: the ranks are ordered by (node, local rank); position p holds shard p % dp_shard of replica
// p / dp_shard. With dp_shard dividing the ranks per node every shard group is on one node; with the ranks
// per node dividing dp_shard a shard group spans whole consecutive nodes (shard_within_node is false and
// the run says so); anything else is refused.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lorabench/comm/communicator.hpp"
#include "lorabench/comm/topology.hpp"

namespace lorabench::comm {

struct MeshCoord {
  int replica = 0;  // index along dp_replicate
  int shard = 0;    // index along dp_shard
  int tp = 0;       // index along tp
};

struct Mesh {
  int dp_replicate = 1, dp_shard = 1, tp = 1;  // dp_replicate * dp_shard * tp = world size
  bool shard_within_node = true;       // every shard group (every tensor-parallel group) on one node
  std::vector<MeshCoord> coords;       // every rank's, in rank order
  // "dp_replicate 2 x dp_shard 2 (shard groups within a node)", "dp_replicate 2 x tp 2 (tensor-parallel groups
  // within a node)"
  std::string describe() const;
  // "0:0.0 1:0.1 2:1.0 3:1.1" (rank:replica.shard), with tensor parallelism rank:replica.shard.tp
  std::string describe_coords() const;
};

// The tensor-parallel mesh of `t`'s ranks: groups of `tp` ranks of one node (consecutive local ranks), the groups
// data-parallel replicas of each other (dp_replicate = world / tp, dp_shard 1). Throws ConfigError naming `key`
// when tp does not divide the ranks of every node (a group across nodes would all-reduce activations over the
// network twice per layer and direction).
Mesh place_tp_mesh(const Topology& t, int tp, const std::string& key = "parallel.tp");

// The mesh of `t`'s ranks with `dp_replicate` replicas (0: one per node). Throws ConfigError naming
// `key` when dp_replicate does not divide the ranks, the nodes hold different numbers of ranks, or the shard
// groups can be placed neither inside nodes nor over whole nodes.
Mesh place_mesh(const Topology& t, int dp_replicate, const std::string& key = "parallel.dp_replicate");

// The mesh of `world` ranks in rank order: rank r holds shard r % dp_shard of replica r / dp_shard (what
// place_mesh gives on one node). REQUIRES: dp_replicate divides world.
Mesh consecutive_mesh(int world, int dp_replicate);

// A mesh's communicators on this rank, split from the world's data plane (Communicator::split), which must
// outlive them: `shard` holds this rank's shard group (ranks of one replica, ranked by shard index),
// `replicate` the ranks that hold the same shard in every replica (ranked by replica index); with tensor
// parallelism `tp` the rank's tensor-parallel group (ranked by tp index), and shard and replicate are those of the
// ranks with the same tp index. `tp_kv` (set by the caller, who knows the model): the ranks of the tp group that
// hold the same key/value heads, where they are replicated.
struct MeshComms {
  Mesh mesh;
  MeshCoord me;
  std::unique_ptr<Communicator> shard, replicate, tp, tp_kv;
};

// Collective over `world` (world.rank() is the rank of mesh.coords).
MeshComms split_mesh(Communicator& world, const Mesh& mesh);

}  // namespace lorabench::comm
