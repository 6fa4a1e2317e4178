// The device layer on CPU: parallel.device / parallel.backend resolution for every case a cluster presents,
// the shared-GPU detection, and the CPU device's memory statistics and timer.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "lorabench/core/error.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/device/torch_device.hpp"
#include "lorabench/metrics/memory.hpp"

using namespace lorabench;
using device::ChoiceInputs;
using device::Kind;

namespace {

ChoiceInputs gpus(int visible, int local_rank, int local_size, std::string requested = "auto",
                  std::string backend = "auto") {
  ChoiceInputs in;
  in.requested = std::move(requested);
  in.backend = std::move(backend);
  in.cuda_built = true;
  in.nccl_built = true;
  in.visible = visible;
  in.local_rank = local_rank;
  in.local_size = local_size;
  return in;
}

std::string error_of(const ChoiceInputs& in) {
  try {
    device::choose(in);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DeviceChoice, AutoIsTheLocalRanksGpuWithNccl) {
  for (int lr = 0; lr < 4; ++lr) {
    const device::Choice c = device::choose(gpus(4, lr, 4));
    EXPECT_EQ(c.kind, Kind::kCuda);
    EXPECT_EQ(c.index, lr);
    EXPECT_EQ(c.backend, "nccl");
  }
  // More GPUs than ranks: the first ones.
  EXPECT_EQ(device::choose(gpus(8, 1, 2)).index, 1);
}

TEST(DeviceChoice, PerTaskBindingSeesOneGpuAsDeviceZero) {
  // srun --gpus-per-task=1: every task sees exactly its own GPU.
  for (int lr = 0; lr < 4; ++lr) {
    const device::Choice c = device::choose(gpus(1, lr, 4));
    EXPECT_EQ(c.kind, Kind::kCuda);
    EXPECT_EQ(c.index, 0);
  }
}

TEST(DeviceChoice, MoreRanksThanGpusIsAnErrorThatSaysSo) {
  const std::string e = error_of(gpus(2, 3, 4));
  EXPECT_NE(e.find("parallel.device"), std::string::npos) << e;
  EXPECT_NE(e.find("4 ranks on this host"), std::string::npos) << e;
  EXPECT_NE(e.find("2 CUDA devices"), std::string::npos) << e;
}

TEST(DeviceChoice, AutoFallsBackToTheCpuAndSaysWhy) {
  device::Choice c = device::choose(gpus(0, 0, 2));
  EXPECT_EQ(c.kind, Kind::kCpu);
  EXPECT_EQ(c.index, -1);
  EXPECT_EQ(c.backend, "mpi");
  EXPECT_NE(c.reason.find("no CUDA device"), std::string::npos) << c.reason;
  ChoiceInputs cpu_build = gpus(2, 0, 2);
  cpu_build.cuda_built = false;
  c = device::choose(cpu_build);
  EXPECT_EQ(c.kind, Kind::kCpu);
  EXPECT_NE(c.reason.find("no CUDA path"), std::string::npos) << c.reason;
}

TEST(DeviceChoice, CpuIsHonouredOnAGpuNode) {
  const device::Choice c = device::choose(gpus(4, 0, 4, "cpu"));
  EXPECT_EQ(c.kind, Kind::kCpu);
  EXPECT_EQ(c.backend, "mpi");
}

TEST(DeviceChoice, CudaWithoutAGpuOrWithoutTheBuildIsAnError) {
  EXPECT_NE(error_of(gpus(0, 0, 1, "cuda")).find("sees no CUDA device"), std::string::npos);
  ChoiceInputs in = gpus(1, 0, 1, "cuda");
  in.cuda_built = false;
  EXPECT_NE(error_of(in).find("no CUDA path"), std::string::npos);
}

TEST(DeviceChoice, BackendRules) {
  // nccl on a CPU rank, nccl without the NCCL build, unknown values.
  EXPECT_NE(error_of(gpus(0, 0, 1, "auto", "nccl")).find("parallel.backend: nccl needs"), std::string::npos);
  ChoiceInputs no_nccl = gpus(1, 0, 1, "cuda", "nccl");
  no_nccl.nccl_built = false;
  EXPECT_NE(error_of(no_nccl).find("no NCCL backend"), std::string::npos);
  no_nccl.backend = "auto";
  EXPECT_EQ(device::choose(no_nccl).backend, "mpi");  // CUDA without NCCL: MPI, staged
  EXPECT_EQ(device::choose(gpus(1, 0, 1, "cuda", "mpi")).backend, "mpi");
  EXPECT_NE(error_of(gpus(1, 0, 1, "tpu")).find("unknown value 'tpu'"), std::string::npos);
  EXPECT_NE(error_of(gpus(1, 0, 1, "auto", "gloo")).find("unknown value 'gloo'"), std::string::npos);
}

TEST(DeviceChoice, SharedGpusAreFoundByUuid) {
  const std::vector<std::string> one_host(4, "n0");
  EXPECT_TRUE(device::shared_gpus({"GPU-a", "GPU-b", "GPU-c"}, one_host).empty());
  EXPECT_TRUE(device::shared_gpus({"", ""}, one_host).empty());  // CPU ranks share nothing
  // The same UUID on two hosts is two GPUs (UUIDs are unique; a copied value is not a shared device).
  EXPECT_TRUE(device::shared_gpus({"GPU-a", "GPU-a"}, {"n0", "n1"}).empty());
  const auto pairs = device::shared_gpus({"GPU-a", "GPU-b", "GPU-a", "GPU-a"}, one_host);
  ASSERT_EQ(pairs.size(), 3u);
  EXPECT_EQ(pairs[0], std::make_pair(0, 2));
  EXPECT_EQ(pairs[1], std::make_pair(0, 3));
  EXPECT_EQ(pairs[2], std::make_pair(2, 3));
}

TEST(DeviceChoice, GpusOnAHostCountTheHostsRanksDevices) {
  // srun --ntasks-per-node=4 --gpus-per-task=1 on two nodes: each rank sees one GPU, each node has four.
  const std::vector<std::string> hosts = {"n0", "n0", "n0", "n0", "n1", "n1", "n1", "n1"};
  const std::vector<std::string> uuids = {"GPU-a", "GPU-b", "GPU-c", "GPU-d", "GPU-e", "GPU-f", "GPU-g", "GPU-h"};
  EXPECT_EQ(device::gpus_on_host(uuids, hosts, "n0", 1), 4);
  EXPECT_EQ(device::gpus_on_host(uuids, hosts, "n1", 1), 4);
  // Two ranks sharing one GPU (the mpi backend): one GPU.
  EXPECT_EQ(device::gpus_on_host({"GPU-a", "GPU-a"}, {"n0", "n0"}, "n0", 1), 1);
  // One process that sees eight GPUs (lorabench plan alone), or every GPU visible to every rank.
  EXPECT_EQ(device::gpus_on_host({"GPU-a"}, {"n0"}, "n0", 8), 8);
  EXPECT_EQ(device::gpus_on_host({"GPU-a", "GPU-b"}, {"n0", "n0"}, "n0", 8), 8);
  EXPECT_EQ(device::gpus_on_host({"", ""}, {"n0", "n0"}, "n0", 0), 0);  // CPU ranks
}

TEST(CpuDevice, MemoryFollowsTheCountingAllocatorWithAWindowPeak) {
  metrics::install_memory_counter();
  device::Device& d = device::cpu_device();
  EXPECT_EQ(d.kind(), Kind::kCpu);
  EXPECT_EQ(d.str(), "cpu");
  EXPECT_TRUE(d.memory_tracked());
  d.reset_peak();
  const int64_t base = d.memory().current;
  {
    at::Tensor big = at::empty({1 << 20}, at::kFloat);  // 4 MiB
    EXPECT_GE(d.memory().current - base, int64_t(4) << 20);
  }
  EXPECT_LT(d.memory().current - base, int64_t(4) << 20);
  EXPECT_GE(d.memory().peak - base, int64_t(4) << 20);  // the step's peak saw it
  d.reset_window_peak();
  {
    at::Tensor small = at::empty({1 << 18}, at::kFloat);  // 1 MiB
    EXPECT_GE(d.window_peak() - base, int64_t(1) << 20);
  }
  EXPECT_LT(d.window_peak() - base, int64_t(4) << 20);  // the window started after the big one was freed
  EXPECT_GE(d.memory().peak - base, int64_t(4) << 20);  // and did not disturb the step's peak
  EXPECT_EQ(d.memory().reserved, d.memory().current);
}

// What the start-of-training check compares with on CPU: the node's available memory (docs/plan.md).
TEST(CpuDevice, MemoryAvailableIsTheNodesAvailableMemory) {
  const int64_t node = sys::memory_available_bytes();
  const int64_t seen = device::cpu_device().memory_available();
  ASSERT_GT(node, 0);
  EXPECT_NEAR(double(seen), double(node), 0.05 * double(node));  // both read now; other processes move it a little
}

TEST(CpuDevice, TimerMarksTheHostClockInOrder) {
  auto t = device::cpu_device().make_sync_timer();
  EXPECT_EQ(t->mark(), 0);
  EXPECT_EQ(t->mark(), 1);
  const auto v = t->resolve();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_LE(v[0], v[1]);
  EXPECT_TRUE(t->resolve().empty());
  EXPECT_EQ(t->mark(), 0);  // indices restart after resolve
}

TEST(CpuDevice, DescribesItselfAndMakeDeviceRefusesCpu) {
  const auto rows = device::cpu_device().describe();
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0].first, "device");
  EXPECT_EQ(rows[0].second, "cpu");
  device::Choice c;
  EXPECT_THROW(device::make_device(c), Error);
  // Without a GPU, a CUDA device cannot be made: a configuration error, whatever the build.
  if (device::cuda_visible_devices() == 0) {
    c.kind = Kind::kCuda;
    c.index = 0;
    EXPECT_THROW(device::make_device(c), ConfigError);
  }
}

TEST(CpuDevice, HostTensorForTheCpuIsOrdinaryMemoryAndStaysPut) {
  const c10::Device cpu(c10::DeviceType::CPU);
  at::Tensor h = device::host_tensor({3, 5}, at::kLong, cpu);
  EXPECT_EQ(h.sizes(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(h.scalar_type(), at::kLong);
  EXPECT_TRUE(h.device().is_cpu());
  EXPECT_FALSE(h.is_pinned());  // page-locked memory only for a GPU
  // Bound for the CPU, the "copy" is the tensor itself: no second copy of every batch.
  EXPECT_EQ(h.to(cpu, /*non_blocking=*/true).data_ptr(), h.data_ptr());
}
