#include "lorabench/train/state_check.hpp"

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "lorabench/core/error.hpp"
#include "lorabench/core/hash.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/strategy/strategy.hpp"

namespace lorabench::train {

namespace {

// FNV-1a (core/hash.hpp) over tensors' bytes and lengths; an undefined tensor is a marker word. Compared
// between the ranks of one run, never stored.
struct Digest {
  Fnv1a f;
  void add(const at::Tensor& t) {
    if (!t.defined()) {
      const uint64_t undefined = ~0ull;
      f.add(&undefined, sizeof undefined);
      return;
    }
    at::Tensor c = t.to(at::kCPU).contiguous();
    const uint64_t n = static_cast<uint64_t>(c.numel()) * c.element_size();
    f.add(c.data_ptr(), n);
    f.add(&n, sizeof n);
  }
  int64_t value() const { return static_cast<int64_t>(f.h); }
};

// The first element where a and b (same dtype and length) differ bitwise, or -1.
int64_t first_difference(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor x = a.to(at::kCPU).contiguous(), y = b.to(at::kCPU).contiguous();
  LB_CHECK(x.numel() == y.numel() && x.scalar_type() == y.scalar_type(), "compared slices differ in shape or dtype");
  const size_t es = x.element_size(), n = static_cast<size_t>(x.numel()) * es;
  const auto* p = static_cast<const unsigned char*>(x.data_ptr());
  const auto* q = static_cast<const unsigned char*>(y.data_ptr());
  if (n == 0 || std::memcmp(p, q, n) == 0) return -1;
  for (size_t i = 0; i < n; ++i)
    if (p[i] != q[i]) return static_cast<int64_t>(i / es);
  return -1;
}

// What each rank contributes, gathered to every rank.
enum Field { kBadUnit, kBadElement, kBadWhat, kOwned, kStep, kOwnDigest, kGatheredDigest, kReplicaDigest, kFields };

const char* what_name(int64_t w) { return w == 0 ? "parameters" : w == 1 ? "AdamW m" : "AdamW v"; }

// "differs from rank 0's on rank 2" / "... on ranks 1, 3": the ranks whose field f is not rank 0's.
std::string differing(const std::vector<std::array<int64_t, kFields>>& all, Field f) {
  std::vector<int> r;
  for (size_t i = 1; i < all.size(); ++i)
    if (all[i][f] != all[0][f]) r.push_back(int(i));
  std::string out = r.size() == 1 ? "differs from rank 0's on rank " : "differs from rank 0's on ranks ";
  for (size_t i = 0; i < r.size(); ++i) out += (i ? ", " : "") + std::to_string(r[i]);
  return out;
}

}  // namespace

StateCheck check_trainable_state(strategy::TrainingStrategy& s, const strategy::FullState& full, MPI_Comm comm,
                                 MPI_Comm all_ranks) {
  int world = 1;
  MPI_Comm_size(comm, &world);
  const bool tp = s.tensor_parallel() != nullptr;
  // With tensor parallelism: this rank's part, among the ranks that hold the same part (`comm`).
  const model::ModelLayout& L = s.compute_layout();
  const strategy::FullState gathered = s.part_of(full);
  const std::string strat = s.name();
  const bool replicated = strat == "single" || strat == "ddp";
  const strategy::LocalState local = s.local_state();
  LB_CHECK(gathered.params.size() == L.units.size() && local.replicated_params.size() == L.units.size(),
           "state check: one tensor per unit expected");

  std::array<int64_t, kFields> mine{};
  mine[kBadUnit] = mine[kBadElement] = mine[kBadWhat] = -1;
  mine[kStep] = local.step;
  Digest own, gath, rep;
  for (const auto& o : local.owned) {
    const at::Tensor* mineT[3] = {&o.params, &o.exp_avg, &o.exp_avg_sq};
    const std::vector<at::Tensor>* full[3] = {&gathered.params, &gathered.exp_avg, &gathered.exp_avg_sq};
    const int64_t n = o.params.numel();
    LB_CHECK(o.unit >= 0 && size_t(o.unit) < L.units.size() && o.offset >= 0 &&
                 o.offset + n <= L.units[o.unit].trainable_numel,
             "state check: an owned slice outside its unit");
    mine[kOwned] += n;
    for (int w = 0; w < 3; ++w) {
      if (replicated) {
        own.add(*mineT[w]);
        if (!tp) continue;  // tensor parallelism: the part is also compared with its slice of the gathered state
      }
      LB_CHECK((*full[w])[o.unit].defined(), "state check: the gathered state lacks an owned unit");
      if (mine[kBadUnit] >= 0) continue;
      const int64_t e = first_difference(*mineT[w], (*full[w])[o.unit].narrow(0, o.offset, n));
      if (e >= 0) {
        mine[kBadUnit] = o.unit;
        mine[kBadElement] = o.offset + e;
        mine[kBadWhat] = w;
      }
    }
  }
  mine[kOwnDigest] = own.value();
  if (!replicated) {
    for (const auto* v : {&gathered.params, &gathered.exp_avg, &gathered.exp_avg_sq})
      for (const auto& t : *v) gath.add(t);
    for (const auto& t : local.replicated_params) rep.add(t);
  }
  mine[kGatheredDigest] = gath.value();
  mine[kReplicaDigest] = rep.value();

  std::vector<std::array<int64_t, kFields>> all(static_cast<size_t>(world));
  MPI_Allgather(mine.data(), kFields, MPI_INT64_T, all.data(), kFields, MPI_INT64_T, comm);
  auto same = [&](Field f) {
    for (const auto& r : all)
      if (r[f] != all[0][f]) return false;
    return true;
  };

  StateCheck c;
  std::vector<std::string> bad;
  if (!same(kStep)) bad.push_back("the optimizer step count " + differing(all, kStep));
  if (replicated) {
    c.name = "replicas_identical";
    if (!same(kOwnDigest))
      bad.push_back("the trainable state " + differing(all, kOwnDigest));
    if (tp) {  // every rank of the job: its part against its slice of the gathered (full) state
      int64_t flag[3] = {mine[kBadUnit], mine[kBadElement], mine[kBadWhat]};
      int everyone = 1, me = 0;
      if (all_ranks != MPI_COMM_NULL) {
        MPI_Comm_size(all_ranks, &everyone);
        MPI_Comm_rank(all_ranks, &me);
      }
      std::vector<int64_t> flags(size_t(3 * everyone));
      if (all_ranks != MPI_COMM_NULL) MPI_Allgather(flag, 3, MPI_INT64_T, flags.data(), 3, MPI_INT64_T, all_ranks);
      else std::copy(flag, flag + 3, flags.begin());
      for (int r = 0; r < everyone; ++r)
        if (flags[size_t(3 * r)] >= 0)
          bad.push_back(strformat("rank %d's part of the model is not its slice of the gathered state (%s, element "
                                  "%lld of the unit's %s)",
                                  all_ranks != MPI_COMM_NULL ? r : me, L.units[size_t(flags[size_t(3 * r)])].name.c_str(),
                                  (long long)flags[size_t(3 * r + 1)], what_name(flags[size_t(3 * r + 2)])));
    }
    c.passed = bad.empty();
    c.detail = c.passed ? std::string("the trainable state is bitwise identical on every rank") +
                              (tp ? " holding the same part of the model, and every rank's part is bitwise its slice "
                                    "of the gathered state"
                                  : "")
                        : "ranks ended with different trainable state: ";
  } else {
    c.name = "shards_consistent";
    int64_t total = 0, owned = 0;
    for (const auto& u : L.units) total += u.trainable_numel;
    for (int r = 0; r < world; ++r) {
      owned += all[size_t(r)][kOwned];
      const auto& x = all[size_t(r)];
      if (x[kBadUnit] >= 0)
        bad.push_back(strformat("rank %d's own shard is not its slice of the gathered state (%s, element %lld of "
                                "the unit's %s)",
                                r, L.units[size_t(x[kBadUnit])].name.c_str(), (long long)x[kBadElement],
                                what_name(x[kBadWhat])));
    }
    // hsdp: every replica group's shards add up to the state.
    if (owned != total * local.replicas)
      bad.push_back(strformat("the ranks' own shards hold %lld elements, the trainable state has %lld%s",
                              (long long)owned, (long long)total,
                              local.replicas > 1 ? strformat(" in each of %d replica groups", local.replicas).c_str()
                                                 : ""));
    if (!same(kGatheredDigest))
      bad.push_back("the gathered state " + differing(all, kGatheredDigest));
    if (!same(kReplicaDigest))
      bad.push_back("the copy of the replicated parameters " + differing(all, kReplicaDigest));
    c.passed = bad.empty();
    const bool has_replicas = strat != "fsdp" && strat != "hsdp";
    c.detail = c.passed ? std::string("every rank's own shard (parameters and AdamW moments, read before any "
                                      "gather) is bitwise its slice of the gathered state, which is the same on "
                                      "every rank; the shards add up to the state") +
                              (has_replicas ? "; every copy of the replicated parameters is bitwise the same" : "")
                        : "";
  }
  for (size_t i = 0; i < bad.size(); ++i) c.detail += (i ? "; " : "") + bad[i];
  return c;
}

std::string drift_own_shard(strategy::TrainingStrategy& s) {
  strategy::LocalState local = s.local_state();
  for (auto& o : local.owned) {
    if (o.params.numel() == 0) continue;
    LB_CHECK(o.params.scalar_type() == at::kFloat, "trainable parameters are fp32");
    at::Tensor e = o.params.narrow(0, 0, 1);
    const float x = e.item<float>();
    e.fill_(std::nextafter(x, std::numeric_limits<float>::infinity()));
    return strformat("%s element %lld", s.layout().units[size_t(o.unit)].name.c_str(), (long long)o.offset);
  }
  return "";
}

}  // namespace lorabench::train
