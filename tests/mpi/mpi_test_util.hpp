// Small helpers shared by the MPI tests.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cmath>

namespace lbtest {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// |a - b| / |b|, guarded against b = 0.
inline double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

}  // namespace lbtest
