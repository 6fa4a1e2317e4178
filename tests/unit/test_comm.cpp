// Communication layer pieces that need no MPI: dtype names, 16-bit conversions, the benchmark's
// bandwidth formulas, layouts, size sweeps, its option parsing, and what the build says about NCCL.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "lorabench/comm/bench.hpp"
#include "lorabench/comm/checked_communicator.hpp"
#include "lorabench/comm/communicator.hpp"
#include "lorabench/comm/half.hpp"
#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
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
  EXPECT_GE(n, 0);
  if (!nccl_built()) {
    EXPECT_EQ(n, 0);
  }
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
