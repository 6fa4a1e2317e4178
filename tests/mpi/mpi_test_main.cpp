// main() for MPI GoogleTest binaries: every rank runs every test; rank 0 prints the usual summary, the
// other ranks print only their failures; the exit code is non-zero on every rank when any test failed
// on any rank (results combined with an allreduce).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "lorabench/core/mpi_session.hpp"

namespace {
class FailuresOnly : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "%s %s:%d: failure\n%s\n", lorabench::rank_tag().c_str(),
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }
};
}  // namespace

int main(int argc, char** argv) {
  lorabench::MpiSession mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailuresOnly);
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
