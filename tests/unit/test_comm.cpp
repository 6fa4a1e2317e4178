// Communication layer pieces that need no MPI: dtype names, 16-bit conversions, the benchmark's
// bandwidth formulas, layouts, size sweeps, its option parsing, and what the build says about NCCL.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <cmath>
#include <cstring>
#include <thread>

#include "lorabench/comm/bench.hpp"
#include "lorabench/comm/checked_communicator.hpp"
#include "lorabench/comm/communicator.hpp"
#include "lorabench/comm/delayed_communicator.hpp"
#include "lorabench/comm/mesh.hpp"
#include "lorabench/comm/timeline.hpp"
#include "../mpi/comm_test_util.hpp"
#include "lorabench/comm/half.hpp"
#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/io/schema.hpp"

using namespace lorabench::comm;
using lorabench::ConfigError;

namespace {

float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(CommTypes, NamesAndSizes) {
  for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16, DataType::kInt32, DataType::kInt64,
                     DataType::kFloat64})
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  EXPECT_EQ(dtype_size(DataType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DataType::kInt64), 8u);
  EXPECT_THROW(dtype_from_name("fp8"), ConfigError);
  EXPECT_STREQ(collective_name(CollectiveKind::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(reduce_op_name(ReduceOp::kMin), "min");
}

TEST(Half, Bf16RoundTripsEveryNonNanPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
  }
}

TEST(Half, Fp16RoundTripsEveryNonNanPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);      // tie, 1.0 is even
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);      // tie, rounds up to the even neighbour
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256 + 1e-6f), 0x3f81);
  EXPECT_EQ(f32_to_f16(65504.f), 0x7bff);                 // largest fp16
  EXPECT_EQ(f32_to_f16(65519.f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.f), 0x7c00);                 // rounds to infinity
  EXPECT_EQ(f32_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.f, -24)), 0x0001);    // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.f, -25)), 0x0000);    // tie to even (zero)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -24)), 0x0002);   // tie between 1 and 2 subnormal units: even
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.f, -11)), 0x3c00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(bits_to_f32(0x7fc00001u)))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::ldexp(1.f, 127) * 1.9999999f))));
}

TEST(BenchFormulas, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kBroadcast, 16), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(BenchOp::kAllReduce, 1), 0.0);
}

TEST(BenchFormulas, LayoutsRoundToWholeBlocks) {
  BenchLayout ar = bench_layout(BenchOp::kAllReduce, 1030, DataType::kFloat32, 4);
  EXPECT_EQ(ar.bytes, 1028u);
  EXPECT_EQ(ar.count, 257u);
  EXPECT_EQ(ar.block, 257u);
  BenchLayout ag = bench_layout(BenchOp::kAllGather, 1030, DataType::kFloat32, 4);
  EXPECT_EQ(ag.block, 64u);  // 1030 / (4 * 4)
  EXPECT_EQ(ag.count, 256u);
  EXPECT_EQ(ag.bytes, 1024u);
  EXPECT_EQ(ag.send_count, 64u);
  EXPECT_EQ(ag.recv_count, 256u);
  BenchLayout rs = bench_layout(BenchOp::kReduceScatter, 1024, DataType::kBFloat16, 3);
  EXPECT_EQ(rs.block, 170u);
  EXPECT_EQ(rs.send_count, 510u);
  EXPECT_EQ(rs.recv_count, 170u);
  EXPECT_EQ(rs.bytes, 1020u);
  BenchLayout a2a = bench_layout(BenchOp::kAllToAll, 8, DataType::kInt64, 2);
  EXPECT_EQ(a2a.bytes, 0u);  // too small for one element per rank
  EXPECT_EQ(bench_layout(BenchOp::kBroadcast, 3, DataType::kInt32, 2).bytes, 0u);
}

TEST(BenchFormulas, SizeSweep) {
  EXPECT_EQ(size_sweep(1024, 16384, 4), (std::vector<size_t>{1024, 4096, 16384}));
  EXPECT_EQ(size_sweep(1000, 9000, 2), (std::vector<size_t>{1000, 2000, 4000, 8000}));
  EXPECT_EQ(size_sweep(64, 64, 2), (std::vector<size_t>{64}));
  EXPECT_EQ(size_sweep(10, 40, 1.5), (std::vector<size_t>{10, 15, 22, 33}));
}

TEST(BenchOptions, ParseBytes) {
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("4K"), 4096u);
  EXPECT_EQ(parse_bytes("16M"), 16u << 20);
  EXPECT_EQ(parse_bytes("1G"), size_t(1) << 30);
  EXPECT_THROW(parse_bytes("1.5M"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("M"), std::invalid_argument);
  EXPECT_THROW(parse_bytes(""), std::invalid_argument);
}

TEST(BenchOptions, SetKeys) {
  BenchOptions o;
  set_bench_option(o, "ops", "all_gather, all_reduce");
  ASSERT_EQ(o.ops.size(), 2u);
  EXPECT_EQ(o.ops[0], BenchOp::kAllGather);
  set_bench_option(o, "dtype", "bf16");
  EXPECT_EQ(o.dtype, DataType::kBFloat16);
  set_bench_option(o, "check", "0");
  EXPECT_FALSE(o.check);
  EXPECT_THROW(set_bench_option(o, "ops", "all_reduce,bogus"), std::invalid_argument);
  EXPECT_THROW(set_bench_option(o, "ops", "all_reduce,all_reduce"), std::invalid_argument);
  EXPECT_THROW(set_bench_option(o, "iters", "0"), std::invalid_argument);
  EXPECT_THROW(set_bench_option(o, "factor", "1"), std::invalid_argument);
  EXPECT_THROW(set_bench_option(o, "backend", "gloo"), std::invalid_argument);
  EXPECT_THROW(set_bench_option(o, "name", "a/b"), std::invalid_argument);
  EXPECT_THROW(set_bench_option(o, "nope", "1"), std::invalid_argument);
  // Every key of the table is settable with its own default.
  BenchOptions d;
  for (const auto& k : bench_keys()) {
    if (std::string(k.key) == "output" || std::string(k.key) == "name") continue;
    EXPECT_NO_THROW(set_bench_option(d, k.key, k.default_value)) << k.key;
  }
  auto resolved = bench_resolved_values(BenchOptions{});
  ASSERT_EQ(resolved.size(), bench_keys().size());
  for (size_t i = 0; i < resolved.size(); ++i) EXPECT_EQ(resolved[i].first, bench_keys()[i].key);
  EXPECT_EQ(resolved[1].second, "1K");
  EXPECT_EQ(resolved[2].second, "16M");
}

TEST(BenchOptions, IniFile) {
  BenchOptions o;
  parse_bench_ini("c.ini", "# sweep\n[comm]\nops = all_reduce ; only this\nmin_bytes = 2K\nmax_bytes=1M\n", o);
  EXPECT_EQ(o.ops, std::vector<BenchOp>{BenchOp::kAllReduce});
  EXPECT_EQ(o.min_bytes, 2048u);
  EXPECT_EQ(o.max_bytes, 1u << 20);
  EXPECT_EQ(o.iters, 20);  // untouched keys keep their value
}

TEST(BenchOptions, IniErrorsNameFileLineAndKey) {
  BenchOptions o;
  try {
    parse_bench_ini("in/c.ini", "[comm]\nops = all_reduce\nbogus = 1\niters = x\nops = all_gather\n[train]\nlr = 1\n", o);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("in/c.ini:3: bogus: unknown key"), std::string::npos) << m;
    EXPECT_NE(m.find("in/c.ini:4: iters: \"x\" is not an integer"), std::string::npos) << m;
    EXPECT_NE(m.find("in/c.ini:5: ops: set more than once (first on line 2)"), std::string::npos) << m;
    EXPECT_NE(m.find("in/c.ini:6: [train]: lorabench comm reads only a [comm] section"), std::string::npos) << m;
  }
  try {
    parse_bench_ini("x.ini", "iters = 3\n", o);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("x.ini:1: iters: outside the [comm] section"), std::string::npos) << e.what();
  }
}

TEST(BenchOptions, Validation) {
  BenchOptions o;
  o.min_bytes = 1 << 20;
  o.max_bytes = 1024;
  EXPECT_THROW(validate_bench_options(o), ConfigError);
  EXPECT_NO_THROW(validate_bench_options(BenchOptions{}));
}

TEST(BenchValues, ReductionsOfTestValuesAreExact) {
  // Any partial sum over up to 128 ranks stays an exactly representable small integer in bf16.
  for (size_t i = 0; i < 64; ++i) {
    double s = 0;
    for (int r = 0; r < 128; ++r) {
      double v = bench_value(DataType::kBFloat16, r, i);
      EXPECT_EQ(bf16_to_f32(f32_to_bf16(static_cast<float>(v))), v);
      s += v;
      EXPECT_EQ(bf16_to_f32(f32_to_bf16(static_cast<float>(s))), s);
    }
  }
  // The values depend on the rank.
  EXPECT_NE(bench_value(DataType::kFloat32, 0, 5), bench_value(DataType::kFloat32, 1, 5));
  EXPECT_NE(bench_value(DataType::kInt64, 0, 5), bench_value(DataType::kInt64, 1, 5));
}

TEST(Nccl, BuildFlagMatchesCMake) {
  EXPECT_EQ(nccl_built(), LORABENCH_EXPECT_NCCL != 0);
  EXPECT_EQ(nccl_version().empty(), !nccl_built());
  int n = -1;
  EXPECT_NO_THROW(n = cuda_device_count());
  // Against the driver's device nodes, counted without CUDA (a build without NCCL reports 0 whatever the
  // machine has).
  const int nodes = nccl_built() ? lbtest::nvidia_device_nodes() : 0;
  EXPECT_TRUE(lbtest::device_count_plausible(n, nodes, std::getenv("CUDA_VISIBLE_DEVICES")))
      << n << " CUDA devices with " << nodes << " NVIDIA device nodes";
}

TEST(Nccl, TheDeviceCountCheckCatchesWrongCounts) {
  // What a broken cuda_device_count() would return: a device where the driver has none, too few or too many.
  EXPECT_FALSE(lbtest::device_count_plausible(1, 0, nullptr));
  EXPECT_FALSE(lbtest::device_count_plausible(0, 2, nullptr));
  EXPECT_FALSE(lbtest::device_count_plausible(3, 2, "0,1"));
  EXPECT_FALSE(lbtest::device_count_plausible(-1, 2, "0"));
  EXPECT_TRUE(lbtest::device_count_plausible(0, 0, nullptr));
  EXPECT_TRUE(lbtest::device_count_plausible(2, 2, nullptr));
  EXPECT_TRUE(lbtest::device_count_plausible(1, 2, "1"));
}

}  // namespace

namespace {

// docs/hdf5-schema-comm.md documents every name the comm run file uses (schema.hpp).
TEST(CommSchema, DocumentedInHdf5SchemaComm) {
  const std::string doc = lorabench::read_file(std::string(LORABENCH_SOURCE_DIR) + "/docs/hdf5-schema-comm.md");
  for (const auto& c : lorabench::schema::comm_result_columns())
    EXPECT_NE(doc.find(std::string("| `") + c.name + "` |"), std::string::npos) << c.name;
  for (const char* name : {lorabench::schema::kCommResults, lorabench::schema::kCommOpNames,
                           lorabench::schema::kCommDtypeNames, lorabench::schema::kCommCheckDetails})
    EXPECT_NE(doc.find(std::string("/") + name), std::string::npos) << name;
  // The op and dtype codes in the doc's table are the enums' values.
  for (int i = 0; i < kNumBenchOps; ++i)
    EXPECT_NE(doc.find(std::string("| ") + std::to_string(i) + " | `" + bench_op_name(static_cast<BenchOp>(i)) + "`"),
              std::string::npos)
        << bench_op_name(static_cast<BenchOp>(i));
  EXPECT_EQ(lorabench::schema::comm_result_columns().size(), lorabench::schema::comm_result_table_columns().size());
}

}  // namespace

namespace {

// ---- the collective timeline: the split arithmetic, and what a communicator records -------------

// A collective issued and ready at `ready` (a backend that moves collectives by itself, or a blocking call).
CollectiveTiming timing(double ready, double begin, double blocked) {
  CollectiveTiming c;
  c.arrive_s = c.ready_s = ready;
  c.block_begin_s = begin;
  c.blocked_s = blocked;
  return c;
}

TEST(Timeline, WaitIsTheBlockedTimeBeforeTheLastRankIsReady) {
  // Blocking collective: rank 0 arrives at 1.0 and is blocked 0.5 s; rank 1 arrives at 1.4, blocked 0.1 s.
  // Rank 0 waited 0.4 s for rank 1, then both moved bytes for 0.1 s.
  auto w = wait_for_peers({{timing(1.0, 1.0, 0.5)}, {timing(1.4, 1.4, 0.1)}}, {0, 0});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_DOUBLE_EQ(w[0], 0.4);
  EXPECT_DOUBLE_EQ(w[1], 0.0);
  // Non-blocking: rank 0 issued at 1.0 but computed until 2.0 before waiting 0.3 s; rank 1 issued at 2.2.
  // Only the 0.2 s before 2.2 are waiting; the wait before its blocked span is no wait at all.
  w = wait_for_peers({{timing(1.0, 2.0, 0.3)}, {timing(2.2, 2.2, 0.1)}}, {0, 0});
  EXPECT_NEAR(w[0], 0.2, 1e-12);
  // The wait never exceeds the blocked time (rank 0 blocked 0.05 s only: the transfer overlapped).
  w = wait_for_peers({{timing(1.0, 1.0, 0.05)}, {timing(1.4, 1.4, 0.1)}}, {0, 0});
  EXPECT_DOUBLE_EQ(w[0], 0.05);
  // Several collectives add up; a collective never waited for contributes its ready time only.
  w = wait_for_peers({{timing(1.0, 1.0, 0.2), timing(2.0, NAN, 0.0), timing(3.0, 3.0, 0.5)},
                      {timing(1.1, 1.1, 0.1), timing(2.5, 2.5, 0.0), timing(3.3, 3.3, 0.2)}},
                     {0, 0});
  EXPECT_NEAR(w[0], 0.1 + 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(w[1], 0.0);
}

TEST(Timeline, ClockOffsetsAndMismatches) {
  // Rank 1's clock reads 10 s more than rank 0's: with its offset the split is as on one clock.
  auto w = wait_for_peers({{timing(1.0, 1.0, 0.5)}, {timing(11.4, 11.4, 0.1)}}, {0, 10});
  EXPECT_NEAR(w[0], 0.4, 1e-9);
  EXPECT_DOUBLE_EQ(w[1], 0.0);
  // Without it rank 0 would seem to wait for the whole blocked span.
  EXPECT_DOUBLE_EQ(wait_for_peers({{timing(1.0, 1.0, 0.5)}, {timing(11.4, 11.4, 0.1)}}, {0, 0})[0], 0.5);
  // Different numbers of collectives: not the same collectives, no split.
  EXPECT_TRUE(wait_for_peers({{timing(1, 1, 0)}, {}}, {0, 0}).empty());
  EXPECT_THROW(wait_for_peers({{timing(1, 1, 0)}}, {0, 0}), lorabench::Error);
}

// A one-rank communicator whose collectives complete after `work_s` seconds (a fake backend), moving by
// themselves or not (async_progress).
class FakeCommunicator final : public Communicator {
 public:
  explicit FakeCommunicator(double work_s, bool async = false) : work_s_(work_s), async_(async) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "fake"; }
  bool device_buffers() const override { return false; }
  bool async_progress() const override { return async_; }

 protected:
  std::unique_ptr<Work> do_all_reduce(void*, size_t, DataType, ReduceOp) override { return work(); }
  std::unique_ptr<Work> do_reduce_scatter(const void*, void*, size_t, DataType, ReduceOp) override { return work(); }
  std::unique_ptr<Work> do_all_gather(const void*, void*, size_t, DataType) override { return work(); }
  std::unique_ptr<Work> do_broadcast(void*, size_t, DataType, int) override { return work(); }
  std::unique_ptr<Work> do_all_to_allv(const void*, const std::vector<size_t>&, void*, const std::vector<size_t>&,
                                       DataType) override {
    return work();
  }
  std::unique_ptr<Work> do_barrier() override { return work(); }

 private:
  class SlowWork final : public Work {
   public:
    explicit SlowWork(double until) : until_(until) {}
    void wait() override {
      while (lorabench::sys::now_s() < until_) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    bool test() override { return lorabench::sys::now_s() >= until_; }

   private:
    double until_;
  };
  std::unique_ptr<Work> work() { return std::make_unique<SlowWork>(lorabench::sys::now_s() + work_s_); }
  double work_s_;
  bool async_;
};

TEST(Timeline, CommunicatorRecordsArrivalsAndBlockedSpans) {
  FakeCommunicator c(0.03);
  float buf[4] = {};
  c.all_reduce(buf, 4, DataType::kFloat32, ReduceOp::kSum);  // timeline off: not recorded
  EXPECT_TRUE(c.take_timeline().empty());

  c.enable_timeline(true);
  int hook_calls = 0;
  double hook_at = 0;
  c.set_before_issue([&] {
    ++hook_calls;
    hook_at = lorabench::sys::now_s();
  });
  auto w = c.all_gather_async(buf, buf, 2, DataType::kFloat32);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // "compute" while it progresses
  c.wait(w);
  bool ran = false;
  c.timed_external([&] {
    ran = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  EXPECT_TRUE(ran);
  auto never = c.broadcast_async(buf, 1, DataType::kFloat32, 0);  // taken before it is waited for
  const std::vector<CollectiveTiming> t = c.take_timeline();
  c.wait(never);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(hook_calls, 3);
  EXPECT_EQ(t[0].kind, static_cast<int>(CollectiveKind::kAllGather));
  EXPECT_EQ(t[0].bytes, 8);
  EXPECT_GE(t[0].block_begin_s - t[0].arrive_s, 0.0099);    // waited after 10 ms of "compute"
  EXPECT_GE(t[0].block_begin_s + t[0].blocked_s - t[0].arrive_s, 0.0299);  // until the 30 ms collective ended
  EXPECT_EQ(t[0].ready_s, t[0].block_begin_s);  // moves only inside the communicator: ready when waited for
  EXPECT_EQ(t[1].kind, kControlCollective);
  EXPECT_EQ(t[1].block_begin_s, t[1].arrive_s);              // blocking: blocked from its arrival
  EXPECT_GE(t[1].blocked_s, 0.019);
  EXPECT_EQ(t[2].kind, static_cast<int>(CollectiveKind::kBroadcast));
  EXPECT_TRUE(std::isnan(t[2].block_begin_s));
  EXPECT_EQ(t[2].blocked_s, 0.0);
  EXPECT_GE(t[2].arrive_s, hook_at);  // the hook ran before the arrival was marked
  EXPECT_EQ(t[2].ready_s, t[2].arrive_s);  // never waited for: ready when issued
  EXPECT_TRUE(c.take_timeline().empty()) << "a Work waited after the take leaves no entry";
  // stats().wait_s has every blocked second, the external call's included.
  EXPECT_GE(c.stats().wait_s, t[0].blocked_s + t[1].blocked_s);
}

TEST(Timeline, AsyncBackendIsReadyWhenIssued) {
  // A backend that moves collectives by itself (NCCL): the rank's part is in flight from the issue on.
  FakeCommunicator c(0.0, /*async=*/true);
  c.enable_timeline(true);
  float buf[2] = {};
  auto w = c.all_reduce_async(buf, 2, DataType::kFloat32, ReduceOp::kSum);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  c.wait(w);
  const auto t = c.take_timeline();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].ready_s, t[0].arrive_s);
  EXPECT_GE(t[0].block_begin_s - t[0].ready_s, 0.004);
  // Decorators report their backend's kind.
  EXPECT_TRUE(make_delayed_communicator(std::make_unique<FakeCommunicator>(0.0, true), 0.0)->async_progress());
}

TEST(Timeline, DelayedCommunicatorAddsTransferTime) {
  auto c = make_delayed_communicator(std::make_unique<FakeCommunicator>(0.0), 0.04);
  EXPECT_EQ(c->backend_name(), "fake");
  c->enable_timeline(true);
  float buf[2] = {};
  const double t0 = lorabench::sys::now_s();
  c->all_reduce(buf, 2, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_GE(lorabench::sys::now_s() - t0, 0.04);
  const auto t = c->take_timeline();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_GE(t[0].blocked_s, 0.04);  // after its arrival: transfer in the split, not waiting for peers
  EXPECT_EQ(c->stats().bytes[static_cast<int>(CollectiveKind::kAllReduce)], 8);
}

}  // namespace

// ---- the data-parallel mesh's placement (comm/mesh.hpp) ----

namespace mesh_test {

// `node_of[r]`: rank r's node; local ranks numbered in rank order within each node.
lorabench::comm::Topology topology(const std::vector<int>& node_of) {
  lorabench::comm::Topology t;
  t.world_size = int(node_of.size());
  std::map<int, int> next;
  for (int r = 0; r < t.world_size; ++r) {
    lorabench::comm::RankInfo i;
    i.rank = r;
    i.node = node_of[size_t(r)];
    i.local_rank = next[i.node]++;
    t.ranks.push_back(i);
  }
  return t;
}

std::string coords(const lorabench::comm::Mesh& m) { return m.describe_coords(); }

}  // namespace mesh_test

TEST(Mesh, ShardGroupsStayInsideNodesAndReplicasCrossThem) {
  using namespace lorabench::comm;
  // Block placement (srun's default): ranks 0, 1 on node 0 and 2, 3 on node 1; one replica per node.
  Mesh m = place_mesh(mesh_test::topology({0, 0, 1, 1}), 0);
  EXPECT_EQ(m.dp_replicate, 2);
  EXPECT_EQ(m.dp_shard, 2);
  EXPECT_TRUE(m.shard_within_node);
  EXPECT_EQ(mesh_test::coords(m), "0:0.0 1:0.1 2:1.0 3:1.1");
  // Cyclic placement (srun -m cyclic): ranks alternate between the nodes, the shard groups still do not.
  m = place_mesh(mesh_test::topology({0, 1, 0, 1}), 0);
  EXPECT_EQ(mesh_test::coords(m), "0:0.0 1:1.0 2:0.1 3:1.1");
  EXPECT_TRUE(m.shard_within_node);
  // Two replicas on each node of 4 ranks: groups of 2 inside a node, 4 replicas.
  m = place_mesh(mesh_test::topology({0, 0, 0, 0, 1, 1, 1, 1}), 4);
  EXPECT_EQ(m.dp_shard, 2);
  EXPECT_TRUE(m.shard_within_node);
  EXPECT_EQ(mesh_test::coords(m), "0:0.0 1:0.1 2:1.0 3:1.1 4:2.0 5:2.1 6:3.0 7:3.1");
  EXPECT_EQ(m.describe(), "dp_replicate 4 x dp_shard 2 (shard groups within a node)");
  // One replica over two nodes: the shard group spans them, and says so.
  m = place_mesh(mesh_test::topology({0, 0, 1, 1}), 1);
  EXPECT_EQ(m.dp_shard, 4);
  EXPECT_FALSE(m.shard_within_node);
  // One node, no emulation: consecutive ranks, as consecutive_mesh.
  m = place_mesh(mesh_test::topology({0, 0, 0, 0}), 2);
  EXPECT_EQ(mesh_test::coords(m), mesh_test::coords(consecutive_mesh(4, 2)));
}

TEST(Mesh, PlacementsThatCannotWorkAreRefusedNamingTheKey) {
  using namespace lorabench::comm;
  auto refused = [](const std::vector<int>& nodes, int replicas) {
    try {
      place_mesh(mesh_test::topology(nodes), replicas);
    } catch (const lorabench::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused({0, 0, 0, 0}, 3).find("parallel.dp_replicate: 3 replicas do not divide the 4 ranks"),
            std::string::npos);
  EXPECT_NE(refused({0, 0, 0, 1, 1, 1}, 3).find("shard groups of 2 ranks fit neither inside a node nor over whole "
                                               "nodes of 3 ranks"),
            std::string::npos);
  EXPECT_NE(refused({0, 0, 0, 1}, 2).find("the same number of ranks on every node"), std::string::npos);
  EXPECT_EQ(refused({0, 0, 1, 1}, 2), "");
}

