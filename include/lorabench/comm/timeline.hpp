// The collective timeline: when this rank arrived at each collective and how long it was blocked on it,
// so blocked time can be split into waiting for the last rank and moving bytes (docs/metrics.md,
// "Waiting for peers and transfer"). Torch-free.
//
// Where the timestamps come from is a SyncTimer. The host implementation reads the steady clock
// (CLOCK_MONOTONIC, shared by every rank of one host) at each mark. A device implementation records an
// event on the compute stream at each mark instead (the arrival is when the kernels producing the
// buffer are done, not when the host enqueued them; a blocked span is the compute stream's wait on the
// collective's event) and reads them in resolve(), once per step, outside the timed regions.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace lorabench::comm {

// REQUIRES: one thread at a time.
class SyncTimer {
 public:
  virtual ~SyncTimer() = default;
  // Records a timestamp now, in the order of this rank's work; returns its index among the marks since
  // the last resolve() (0, 1, 2, ...).
  virtual int64_t mark() = 0;
  // The seconds of every mark since the last resolve(), in order, on this rank's steady clock
  // (sys::now_s(); a device timer translates its events onto that clock); forgets them.
  virtual std::vector<double> resolve() = 0;
};

// Marks read sys::now_s() immediately.
std::unique_ptr<SyncTimer> make_host_sync_timer();

// One collective as one rank saw it. Times in seconds on the rank's clock (see SyncTimer).
struct CollectiveTiming {
  int kind = 0;              // CollectiveKind; kControlCollective for the control plane's host MPI calls
  int64_t bytes = 0;         // payload bytes this rank passed in (0 for control-plane calls)
  double arrive_s = 0;       // when the rank issued it
  // When this rank's part could move: the issue time on a backend that moves collectives by itself
  // (Communicator::async_progress); on one that moves them only inside its calls (MPI on CPU), the moment
  // the rank started waiting for it (the issue time when it never waited).
  double ready_s = 0;
  double block_begin_s = 0;  // when it started waiting for it; NaN when it never waited through the communicator
  double blocked_s = 0;      // seconds blocked waiting for it (0 when never waited)
};
// CollectiveTiming::kind of a control-plane collective (the trainer's small host MPI all-reduces).
inline constexpr int kControlCollective = 100;

// How one step's blocked time splits on each rank. `per_rank[r]` is rank r's timeline of the step (the
// i-th entry of every rank is the same collective: every rank issues collectives in the same order);
// `offset_s[r]` is what to subtract from rank r's times to put them on a common clock (0 on one host).
// For collective i, last_i = max over ranks of the corrected ready times (the last rank's arrival);
// rank r waited for its peers
//   wait_ri = min(blocked_ri, max(0, last_i - begin_ri))
// (begin_ri its corrected block begin): the part of its blocked span before the last rank was ready. The
// rest of the blocked span is transfer. Returns sum_i wait_ri per rank, or an empty vector when the
// ranks' timelines have different lengths (they did not record the same collectives).
std::vector<double> wait_for_peers(const std::vector<std::vector<CollectiveTiming>>& per_rank,
                                   const std::vector<double>& offset_s);

}  // namespace lorabench::comm
