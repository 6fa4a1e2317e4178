// A debug decorator that verifies, before every collective, that all ranks are issuing the same one.
//
// Mismatched collectives (rank 0 all-reduces 1024 floats while rank 1 all-reduces 1000, or broadcasts)
// usually hang or silently corrupt data. The checker all-gathers each call's signature (sequence number,
// kind, count, dtype, reduction op or root) on its own duplicate of the MPI communicator and throws
// CommError on every rank, naming the differing ranks and signatures, before the inner collective runs.
// For an uneven all_to_all it checks that every pair of ranks agrees (send_counts[j] on rank i ==
// recv_counts[i] on rank j). Costs one small blocking MPI_Allgather per collective (a synchronisation
// point: overlap disappears), so it is for debugging, not benchmarking.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "lorabench/comm/communicator.hpp"

namespace lorabench::comm {

struct CheckerOptions {
  // Seconds to wait for every rank to reach the check. A rank that never arrives (stuck, dead, or issuing
  // fewer collectives) makes the others throw CommError after this long instead of hanging. 0 = no limit.
  // Default: 300.
  double timeout_s = 300;
};

// Collective over `comm`, which must contain the same ranks as `inner` in the same order. Takes ownership
// of `inner`; the result forwards every call to it (backend_name(), device_buffers() and the Work handles
// are inner's). After a mismatch or a timeout the checker is unusable (every later call throws).
std::unique_ptr<Communicator> make_checked_communicator(std::unique_ptr<Communicator> inner, MPI_Comm comm,
                                                        const CheckerOptions& options = {});

// A collective's signature as the checker compares it.
struct CollectiveSignature {
  int64_t seq = 0;       // 0-based index of the call on this communicator
  int kind = 0;          // CollectiveKind
  int dtype = 0;         // DataType
  int64_t count = 0;     // per-rank element count (see describe_signature); -1 = uneven all_to_all
  int extra = 0;         // reduction op (all_reduce, reduce_scatter) or root (broadcast); else 0
};
// "all_reduce(count=1024, dtype=fp32, op=sum)"
std::string describe_signature(const CollectiveSignature& s);

}  // namespace lorabench::comm
