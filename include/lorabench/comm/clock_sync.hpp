// Offsets between the ranks' steady clocks, so that timestamps taken on different ranks (the collective
// timeline's arrivals, timeline.hpp) can be compared. Torch-free.
//
// Ranks on one host read the same CLOCK_MONOTONIC (sys::now_s): their offset is 0, exactly. A rank on
// another host than rank 0 is measured with a ping-pong against rank 0: rank 0 reads t0 and sends, the
// rank replies with its clock t_r, rank 0 reads t1 on receipt. Since t_r was read between t0 and t1 of
// real time, its offset theta (its clock minus rank 0's) lies in [t_r - t1, t_r - t0]: the estimate
// t_r - (t0 + t1)/2 is off by at most (t1 - t0)/2. The exchange with the shortest round trip of
// `rounds` is kept. Clock drift after the measurement is not corrected (docs/metrics.md).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace lorabench::comm {

struct ClockOffsets {
  std::vector<double> offset_s;  // per rank: its clock minus rank 0's, seconds
  std::vector<double> error_s;   // per rank: bound of |true offset - offset_s| (0 on rank 0's host)
  int measured = 0;              // ranks measured by ping-pong
  double max_error_s() const;
  // "shared clock (one host)" or "ping-pong with rank 0: 3 ranks on other hosts, error <= 12.3 us"
  std::string describe() const;
};

// Collective over `world`. hosts[r] is rank r's host (Topology::ranks); ranks on rank 0's host share
// its clock, unless `measure_all`, which measures every rank (for tests: on one host the true offsets
// are 0). Every rank returns the same result. REQUIRES: rounds >= 1.
ClockOffsets estimate_clock_offsets(MPI_Comm world, const std::vector<std::string>& hosts, int rounds = 16,
                                    bool measure_all = false);

}  // namespace lorabench::comm
