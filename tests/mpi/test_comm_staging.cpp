// The staging decorator (MPI with device buffers, comm/staging_communicator.hpp) on CPU: a copier that
// treats buffers as device memory runs every collective check of the MPI backend through pinned-style
// staging (copies in, the collective on host copies, copies back on completion), and the copies are
// counted. The CUDA copier (device/cuda_device.cpp) is the same decorator with cudaMemcpy; it runs in the
// gpu label (tests/gpu).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>

#include "comm_test_util.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/comm/staging_communicator.hpp"

using namespace lorabench::comm;

namespace {

struct Counts {
  int64_t to_host = 0, to_device = 0, allocs = 0, frees = 0;
};

// Every pointer is "device memory" when `all_device`; copies are memcpy, counted.
DeviceCopier counting_copier(Counts* n, bool all_device, bool copy_back = true) {
  DeviceCopier c;
  c.is_device = [all_device](const void*) { return all_device; };
  c.to_host = [n](void* h, const void* d, size_t b) {
    std::memcpy(h, d, b);
    n->to_host += int64_t(b);
  };
  c.to_device = [n, copy_back](void* d, const void* h, size_t b) {
    if (copy_back) std::memcpy(d, h, b);  // copy_back = false: a broken copier, for the test that must fail
    n->to_device += int64_t(b);
  };
  c.alloc_host = [n](size_t b) {
    ++n->allocs;
    return std::malloc(b);
  };
  c.free_host = [n](void* p) {
    ++n->frees;
    std::free(p);
  };
  return c;
}

}  // namespace

TEST(Staging, EveryCollectiveAndDtypeMatchesClosedFormsThroughHostCopies) {
  Counts n;
  {
    auto c = make_staging_communicator(make_mpi_communicator(MPI_COMM_WORLD), counting_copier(&n, true));
    EXPECT_TRUE(c->device_buffers());
    EXPECT_EQ(c->backend_name(), "mpi");
    lbtest::check_everything(*c, -1);
    c->barrier();
  }
  EXPECT_GT(n.to_host, 0);
  EXPECT_GT(n.to_device, 0);
  // Staging buffers are pooled: far fewer pinned allocations than collectives, and all freed.
  EXPECT_GT(n.allocs, 0);
  EXPECT_LT(n.allocs, 200);
  EXPECT_EQ(n.allocs, n.frees);
}

TEST(Staging, HostPointersPassThroughWithoutCopies) {
  Counts n;
  auto c = make_staging_communicator(make_mpi_communicator(MPI_COMM_WORLD), counting_copier(&n, false));
  std::vector<float> v(1000, float(c->rank() + 1));
  c->all_reduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
  const int W = c->size();
  EXPECT_EQ(v[999], float(W * (W + 1) / 2));
  EXPECT_EQ(n.to_host + n.to_device + n.allocs, 0);
}

TEST(Staging, ResultsReachTheBufferOnlyWhenTheCollectiveCompletes) {
  Counts n;
  auto c = make_staging_communicator(make_mpi_communicator(MPI_COMM_WORLD), counting_copier(&n, true));
  std::vector<double> v(4096, double(c->rank() + 1));
  auto w = c->all_reduce_async(v.data(), v.size(), DataType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(v[0], double(c->rank() + 1));  // still the input: the collective works on the staged copy
  c->wait(w);
  const int W = c->size();
  EXPECT_EQ(v[0], double(W * (W + 1) / 2));
  EXPECT_EQ(v[4095], double(W * (W + 1) / 2));
}

TEST(Staging, ABrokenCopyBackIsCaught) {
  // The same check as above with a copier that never writes results back: the all-reduce must then be
  // seen to have changed nothing (this is what the closed-form checks would trip on).
  Counts n;
  auto c = make_staging_communicator(make_mpi_communicator(MPI_COMM_WORLD), counting_copier(&n, true, false));
  std::vector<double> v(16, double(c->rank() + 1));
  c->all_reduce(v.data(), v.size(), DataType::kFloat64, ReduceOp::kSum);
  if (c->size() > 1) {
    EXPECT_EQ(v[0], double(c->rank() + 1));
  }
  EXPECT_GT(n.to_device, 0);
}
