#include "lorabench/comm/clock_sync.hpp"

#include <algorithm>
#include <cmath>

#include "lorabench/core/error.hpp"
#include "lorabench/core/mpi_session.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"

namespace lorabench::comm {

namespace {
constexpr int kTag = 7301;
}  // namespace

double ClockOffsets::max_error_s() const {
  double m = 0;
  for (double e : error_s) m = std::max(m, e);
  return m;
}

std::string ClockOffsets::describe() const {
  if (measured == 0) return "shared clock (one host: CLOCK_MONOTONIC)";
  return strformat("ping-pong with rank 0: %d rank(s) measured, offset error <= %.3g us", measured,
                   1e6 * max_error_s());
}

ClockOffsets estimate_clock_offsets(MPI_Comm world, const std::vector<std::string>& hosts, int rounds,
                                    bool measure_all) {
  LB_CHECK(rounds >= 1, "clock offsets need at least one round");
  int rank = 0, size = 1;
  LB_MPI_CHECK(MPI_Comm_rank(world, &rank));
  LB_MPI_CHECK(MPI_Comm_size(world, &size));
  LB_CHECK(hosts.size() == static_cast<size_t>(size), "one host per rank");
  ClockOffsets out;
  out.offset_s.assign(size, 0.0);
  out.error_s.assign(size, 0.0);
  for (int r = 1; r < size; ++r) {
    if (!measure_all && hosts[r] == hosts[0]) continue;
    ++out.measured;
    if (rank == 0) {
      double best_rtt = INFINITY;
      for (int k = 0; k < rounds; ++k) {
        const double t0 = sys::now_s();
        LB_MPI_CHECK(MPI_Send(&t0, 1, MPI_DOUBLE, r, kTag, world));
        double tr = 0;
        LB_MPI_CHECK(MPI_Recv(&tr, 1, MPI_DOUBLE, r, kTag, world, MPI_STATUS_IGNORE));
        const double t1 = sys::now_s();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          out.offset_s[r] = tr - 0.5 * (t0 + t1);
          out.error_s[r] = 0.5 * (t1 - t0);
        }
      }
    } else if (rank == r) {
      for (int k = 0; k < rounds; ++k) {
        double t0 = 0;
        LB_MPI_CHECK(MPI_Recv(&t0, 1, MPI_DOUBLE, 0, kTag, world, MPI_STATUS_IGNORE));
        const double tr = sys::now_s();
        LB_MPI_CHECK(MPI_Send(&tr, 1, MPI_DOUBLE, 0, kTag, world));
      }
    }
  }
  LB_MPI_CHECK(MPI_Bcast(out.offset_s.data(), size, MPI_DOUBLE, 0, world));
  LB_MPI_CHECK(MPI_Bcast(out.error_s.data(), size, MPI_DOUBLE, 0, world));
  return out;
}

}  // namespace lorabench::comm
