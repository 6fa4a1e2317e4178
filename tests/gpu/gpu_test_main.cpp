// main() for the gpu-labelled GoogleTest binaries, under mpirun: when any rank sees no CUDA device (or the
// build has no CUDA path) every rank prints why and exits 77, which ctest reports as Skipped (never as
// Passed); otherwise as tests/mpi/mpi_test_main.cpp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "lorabench/core/mpi_session.hpp"
#include "lorabench/device/device.hpp"

int main(int argc, char** argv) {
  lorabench::MpiSession mpi(&argc, &argv);
  const int visible = lorabench::device::cuda_visible_devices();
  int ok = lorabench::device::cuda_built() && visible > 0 ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ok) {
    if (mpi.rank() == 0)
      std::printf("SKIPPED: needs a CUDA device on every rank (%s; rank 0 sees %d)\n",
                  lorabench::device::cuda_built() ? "CUDA build" : "this build has no CUDA path", visible);
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
