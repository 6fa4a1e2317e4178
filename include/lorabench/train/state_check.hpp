// The run's check of the trainable state at the end of a trial (run.h5 /validation, docs/hdf5-schema.md;
// docs/strategies.md, "Checking the state at the end of a run"). Without a reference run it can only check
// what the ranks must agree on, so it compares what each rank holds itself, before any gather:
//
//   replicas_identical (single, ddp)   every rank's own full state (parameters, AdamW m and v, step) is
//                                      bitwise the same
//   shards_consistent (zero1, zero2, fsdp, hsdp)
//                                      on every rank its own shard (parameters and moments, read from its
//                                      storage) is bitwise its slice of the gathered state, which is the same
//                                      on every rank (so it is what checkpoints and the adapter are written
//                                      from); the shards add up to the whole state; the copies of the
//                                      replicated parameters (zero1, zero2) are bitwise the same on every
//                                      rank; every rank took the same number of optimizer steps. hsdp: each
//                                      replica group's shards add up to the state, and the groups' gathered
//                                      states are bitwise the same
//
// A defect every rank agrees on (the same wrong update everywhere) is invisible here; the strategy tests
// compare each rank's shard with a single-rank reference for that (tests/mpi/test_strategies.cpp).
#pragma once

#include <mpi.h>

#include <string>

namespace lorabench::strategy {
class TrainingStrategy;
struct FullState;
}  // namespace lorabench::strategy

namespace lorabench::train {

struct StateCheck {
  std::string name;  // replicas_identical | shards_consistent
  bool passed = false;
  std::string detail;
};

// Collective over `comm`. `gathered` is what s.gather_state() returned on this rank (any device). With tensor
// parallelism `comm` holds the ranks with the same part of the model (one per tensor-parallel group), and the
// check is of that part (TrainingStrategy::part_of), and of every rank's part against its slice of the gathered
// state, gathered over `all_ranks` (the job; MPI_COMM_NULL: this rank's only).
StateCheck check_trainable_state(strategy::TrainingStrategy& s, const strategy::FullState& gathered, MPI_Comm comm,
                                 MPI_Comm all_ranks = MPI_COMM_NULL);

// Fault injection (fault.drift_rank) and the tests' broken variants: moves the first element of this rank's
// first owned parameter slice one ulp towards +infinity, in the strategy's own storage: a write the last
// gather did not see. Returns where ("unit U element E"), or "" when the rank owns nothing.
std::string drift_own_shard(strategy::TrainingStrategy& s);

}  // namespace lorabench::train
