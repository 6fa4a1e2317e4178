#include "lorabench/comm/mesh.hpp"

#include <algorithm>
#include <map>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::comm {

std::string Mesh::describe() const {
  if (tp > 1)
    return strformat("dp_replicate %d x dp_shard %d x tp %d (tensor-parallel groups within a node)", dp_replicate,
                     dp_shard, tp);
  return strformat("dp_replicate %d x dp_shard %d (%s)", dp_replicate, dp_shard,
                   shard_within_node ? "shard groups within a node" : "shard groups span nodes");
}

std::string Mesh::describe_coords() const {
  std::string s;
  for (size_t r = 0; r < coords.size(); ++r) {
    s += strformat("%s%zu:%d.%d", r ? " " : "", r, coords[r].replica, coords[r].shard);
    if (tp > 1) s += strformat(".%d", coords[r].tp);
  }
  return s;
}

namespace {

// Each rank's position when the ranks are ordered by (node, local rank).
std::vector<int> node_order(const Topology& t) {
  std::vector<int> order(static_cast<size_t>(t.world_size));
  for (int r = 0; r < t.world_size; ++r) order[size_t(r)] = r;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const RankInfo &x = t.ranks[size_t(a)], &y = t.ranks[size_t(b)];
    return x.node != y.node ? x.node < y.node : x.local_rank < y.local_rank;
  });
  return order;
}

}  // namespace

Mesh place_tp_mesh(const Topology& t, int tp, const std::string& key) {
  LB_CHECK(static_cast<int>(t.ranks.size()) == t.world_size, "place_tp_mesh: one RankInfo per rank expected");
  std::map<int, int> per_node;
  for (const auto& r : t.ranks) ++per_node[r.node];
  for (const auto& [node, n] : per_node)
    if (n % tp != 0)
      throw ConfigError(strformat("%s = %d: node %d has %d ranks; a tensor-parallel group must lie within a node "
                                  "(its all-reduces run twice per layer and direction), so tp must divide the ranks "
                                  "of every node",
                                  key.c_str(), tp, node, n));
  Mesh m;
  m.tp = tp;
  m.dp_replicate = t.world_size / tp;
  m.dp_shard = 1;
  m.coords.resize(size_t(t.world_size));
  const std::vector<int> order = node_order(t);
  for (int p = 0; p < t.world_size; ++p) m.coords[size_t(order[size_t(p)])] = {p / tp, 0, p % tp};
  return m;
}

Mesh consecutive_mesh(int world, int dp_replicate) {
  LB_CHECK(dp_replicate > 0 && world % dp_replicate == 0, "consecutive_mesh: the replicas must divide the ranks");
  Mesh m;
  m.dp_replicate = dp_replicate;
  m.dp_shard = world / dp_replicate;
  for (int p = 0; p < world; ++p) m.coords.push_back({p / m.dp_shard, p % m.dp_shard});
  return m;
}

Mesh place_mesh(const Topology& t, int dp_replicate, const std::string& key) {
  const int world = t.world_size;
  LB_CHECK(static_cast<int>(t.ranks.size()) == world, "place_mesh: one RankInfo per rank expected");
  std::map<int, int> per_node;
  for (const auto& r : t.ranks) ++per_node[r.node];
  const int local = per_node.begin()->second;
  for (const auto& [node, n] : per_node)
    if (n != local)
      throw ConfigError(key + ": a device mesh needs the same number of ranks on every node, node " +
                        std::to_string(per_node.begin()->first) + " has " + std::to_string(local) + " and node " +
                        std::to_string(node) + " has " + std::to_string(n));
  const int replicas = dp_replicate > 0 ? dp_replicate : static_cast<int>(per_node.size());
  if (replicas > world || world % replicas != 0)
    throw ConfigError(key + ": " + std::to_string(replicas) + " replicas do not divide the " + std::to_string(world) +
                      " ranks");
  const Mesh by_position = consecutive_mesh(world, replicas);
  Mesh m = by_position;
  m.shard_within_node = local % m.dp_shard == 0;
  if (!m.shard_within_node && m.dp_shard % local != 0)
    throw ConfigError(strformat("%s: shard groups of %d ranks fit neither inside a node nor over whole nodes of %d "
                                "ranks (%d replicas of %d ranks): choose dp_replicate so that the shard group size "
                                "divides the ranks per node, or is a multiple of it",
                                key.c_str(), m.dp_shard, local, m.dp_replicate, world));
  const std::vector<int> order = node_order(t);
  for (int p = 0; p < world; ++p) m.coords[size_t(order[size_t(p)])] = by_position.coords[size_t(p)];
  return m;
}

MeshComms split_mesh(Communicator& world, const Mesh& mesh) {
  LB_CHECK(static_cast<int>(mesh.coords.size()) == world.size(), "split_mesh: the mesh is of another world");
  MeshComms c;
  c.mesh = mesh;
  c.me = mesh.coords[size_t(world.rank())];
  const int tp = mesh.tp;
  c.shard = world.split(c.me.replica * tp + c.me.tp, c.me.shard);
  c.replicate = world.split(c.me.shard * tp + c.me.tp, c.me.replica);
  LB_CHECK(c.shard->size() == mesh.dp_shard && c.replicate->size() == mesh.dp_replicate &&
               c.shard->rank() == c.me.shard && c.replicate->rank() == c.me.replica,
           "split_mesh: the sub-communicators do not match the mesh");
  if (tp > 1) {
    c.tp = world.split(c.me.replica * mesh.dp_shard + c.me.shard, c.me.tp);
    LB_CHECK(c.tp->size() == tp && c.tp->rank() == c.me.tp, "split_mesh: the tensor-parallel group does not match");
  }
  return c;
}

}  // namespace lorabench::comm
