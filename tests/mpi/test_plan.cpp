// The planner: where a rank's memory is (the node's on CPU, its GPU's on a GPU), how ranks sharing a GPU
// split its memory and time, what NCCL's one-rank-per-GPU rule refuses, the table's GPU columns (rows from
// a given probe: every rank computes them alone); the probe through the device layer on the CPU device; and
// the bandwidth measured on buffers of the device layer on all ranks (docs/plan.md).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include <mpi.h>

#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/config/options.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/metrics/memory.hpp"
#include "lorabench/train/plan.hpp"

using namespace lorabench;

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

// inputs/tiny.ini, the tests' workload: tiny preset, fp32, LoRA r4, micro-batch 2 x 32 tokens.
RunConfig tiny_config() {
  const std::string path = std::string(LORABENCH_SOURCE_DIR) + "/inputs/tiny.ini";
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  return parse_run_config(path, text.str(), {});
}

// A probe as the GPU would return it (numbers chosen, not measured).
train::ProbeResult gpu_probe() {
  train::ProbeResult p;
  p.device = "cuda:0";
  p.tokens = 64;
  p.activation_bytes = 3 * kMiB;
  p.persistent_bytes = 8 * kMiB;
  p.slack_bytes = 2 * kMiB;
  p.micro_s = 0.010;
  p.optimizer_s = 0.004;
  return p;
}

train::CommBandwidth bandwidth(double gbps) {
  train::CommBandwidth bw;
  bw.all_reduce = bw.all_gather = bw.reduce_scatter = gbps;
  bw.source = "test";
  return bw;
}

const train::PlanRow& row(const std::vector<train::PlanRow>& rows, const std::string& strategy, int world) {
  for (const auto& r : rows)
    if (r.strategy == strategy && r.world == world) return r;
  throw std::runtime_error("no row " + strategy + " on " + std::to_string(world));
}

train::PlanOptions gpu_options(int gpus, bool share, int64_t available) {
  train::PlanOptions o;
  o.worlds = {1, 2, 4};
  o.gpu = true;
  o.gpu_name = "cuda:0 (test GPU)";
  o.gpus_per_node = gpus;
  o.share_gpus = share;
  o.gpu_available = available;
  return o;
}

}  // namespace

TEST(Plan, GpuRankMemoryIsItsGpusWithTheAllocatorsSlack) {
  const RunConfig c = tiny_config();
  const train::ProbeResult p = gpu_probe();
  const auto rows = train::make_plan(c, gpu_options(2, false, 1024 * kMiB), &p, bandwidth(100));
  const train::PlanRow& s = row(rows, "single", 1);
  EXPECT_EQ(s.tensor_peak, s.model_state + p.activation_bytes + s.strategy_extra + p.persistent_bytes);
  EXPECT_EQ(s.reserved, s.tensor_peak + p.slack_bytes);
  EXPECT_EQ(s.rss, -1) << "a GPU rank's tensors are not in host memory";
  EXPECT_EQ(s.available, 1024 * kMiB);
  EXPECT_EQ(s.ranks_per_gpu, 1);
  EXPECT_TRUE(s.fits);
  EXPECT_NEAR(s.compute_s, p.micro_s + p.optimizer_s, 1e-12) << "no CPU oversubscription on a GPU";
  // 4 ranks with NCCL on nodes of 2 GPUs: two per node, each on its own GPU.
  const train::PlanRow& f4 = row(rows, "fsdp", 4);
  EXPECT_EQ(f4.ranks_per_node, 2);
  EXPECT_EQ(f4.ranks_per_gpu, 1);
  EXPECT_EQ(f4.available, 1024 * kMiB);
  EXPECT_NEAR(f4.compute_s, p.micro_s + p.optimizer_s / 4, 1e-12);
  EXPECT_GT(f4.comm_s, 0);
  EXPECT_TRUE(f4.fits);
}

// hsdp on 4 ranks of 2 GPUs per node: one replica group per node, each rank's memory and optimizer share
// those of fsdp on 2 ranks, and its communication fsdp's on 2 ranks plus the all-reduce of half the gradients
// across the 2 replicas.
TEST(Plan, HsdpIsFsdpWithinAShardGroupPlusTheReplicasAllReduce) {
  RunConfig c = tiny_config();
  const train::ProbeResult p = gpu_probe();
  train::PlanOptions o = gpu_options(2, false, 1024 * kMiB);
  o.strategies = {"fsdp", "hsdp"};
  const auto rows = train::make_plan(c, o, &p, bandwidth(100));
  const train::PlanRow& h = row(rows, "hsdp", 4);
  const train::PlanRow& f2 = row(rows, "fsdp", 2);
  const train::PlanRow& f4 = row(rows, "fsdp", 4);
  EXPECT_EQ(h.dp_replicate, 2);
  EXPECT_EQ(h.model_state, f2.model_state);
  EXPECT_EQ(h.strategy_extra, f2.strategy_extra);
  EXPECT_GT(h.model_state, f4.model_state);
  EXPECT_NEAR(h.compute_s, f2.compute_s, 1e-12);
  // The replicas' all-reduce of the 2-rank shard of the fp32 LoRA gradients: 2 (R-1)/R x bytes / bandwidth.
  EXPECT_GT(h.comm_s, f2.comm_s);
  EXPECT_LT(h.comm_s, f2.comm_s * 1.5);
  EXPECT_EQ(row(rows, "hsdp", 2).dp_replicate, 1) << "2 ranks on one node: one replica";
  // parallel.dp_replicate set: 4 replicas of 1 rank (ddp-like), and a count that does not divide is refused.
  c.parallel.dp_replicate = 4;
  EXPECT_EQ(row(train::make_plan(c, o, &p, bandwidth(100)), "hsdp", 4).dp_replicate, 4);
  c.parallel.dp_replicate = 3;
  const auto refused = train::make_plan(c, o, &p, bandwidth(100));
  const train::PlanRow& bad = row(refused, "hsdp", 4);
  EXPECT_FALSE(bad.fits);
  EXPECT_NE(bad.note.find("3 replicas do not divide 4 ranks"), std::string::npos) << bad.note;
}

TEST(Plan, RanksOnSeveralNodesAreAlsoPlannedAsHsdp) {
  const RunConfig c = tiny_config();
  const train::ProbeResult p = gpu_probe();
  train::PlanOptions o = gpu_options(2, false, 1024 * kMiB);
  o.ranks_per_node = 2;
  const auto rows = train::make_plan(c, o, &p, bandwidth(100));
  EXPECT_EQ(row(rows, "hsdp", 4).dp_replicate, 2);
  for (const auto& r : rows) EXPECT_FALSE(r.strategy == "hsdp" && r.world < 4) << "2 ranks fit on one node";
  o.ranks_per_node = 0;  // one node: no hsdp row
  for (const auto& r : train::make_plan(c, o, &p, bandwidth(100))) EXPECT_NE(r.strategy, "hsdp");
}

// Tensor parallelism (tpT+S rows): a rank holds its 1/T part of the model (tiny: mostly the embedding, split by
// vocabulary rows), computes its part's FLOPs, and adds the group's activation all-reduces; tokens/s counts the
// data-parallel groups. The default rows include every tp that splits the model inside a node, and the table ranks
// the fitting rows of each world size. What a run would refuse, the planner refuses with the reason.
TEST(Plan, TensorParallelRowsHoldTheirPartOfTheModel) {
  const RunConfig c = tiny_config();  // 4 heads, 2 key/value heads, MLP 176
  const train::ProbeResult p = gpu_probe();
  train::PlanOptions o = gpu_options(4, false, 1024 * kMiB);
  const auto rows = train::make_plan(c, o, &p, bandwidth(100));
  const train::PlanRow& d = row(rows, "ddp", 4);
  const train::PlanRow& t2 = row(rows, "tp2+ddp", 4);
  const train::PlanRow& t4 = row(rows, "tp4+single", 4);
  EXPECT_EQ(row(rows, "tp2+single", 2).tp, 2);
  EXPECT_EQ(t2.tp, 2);
  EXPECT_EQ(t2.dp_replicate, 2);
  EXPECT_NEAR(double(t2.model_state) / double(d.model_state), 0.5, 0.05);
  EXPECT_LT(t4.model_state, t2.model_state);
  EXPECT_LT(t2.activations, d.activations);
  EXPECT_LT(t2.compute_s, d.compute_s);
  EXPECT_GT(t2.comm_s, 0);
  EXPECT_TRUE(std::isfinite(t2.step_s));
  EXPECT_NEAR(t2.tokens_per_s, 2.0 * 64 / t2.step_s, 1e-9 * t2.tokens_per_s) << "two groups of 2 x 32 tokens";
  const std::string md = train::plan_markdown(c, rows, &p, bandwidth(100), o);
  EXPECT_NE(md.find("| tp2+ddp (dp 2 x tp 2) |"), std::string::npos) << md;
  EXPECT_NE(md.find("- Ranked on 4 ranks (predicted step, fitting rows): 1. "), std::string::npos) << md;
  // Refused: 8 ranks cannot split 4 heads; a group wider than a node; a sharded strategy across the groups.
  o.worlds = {8};
  o.gpus_per_node = 8;
  o.strategies = {"tp8+single"};
  const train::PlanRow heads = row(train::make_plan(c, o, &p, bandwidth(100)), "tp8+single", 8);
  EXPECT_FALSE(heads.fits);
  EXPECT_NE(heads.note.find("attention heads"), std::string::npos) << heads.note;
  o.gpus_per_node = 2;
  o.strategies = {"tp4+ddp"};
  const train::PlanRow wide = row(train::make_plan(c, o, &p, bandwidth(100)), "tp4+ddp", 8);
  EXPECT_FALSE(wide.fits);
  EXPECT_NE(wide.note.find("within a node"), std::string::npos) << wide.note;
  o.gpus_per_node = 8;
  o.strategies = {"tp2+fsdp"};
  const train::PlanRow fsdp = row(train::make_plan(c, o, &p, bandwidth(100)), "tp2+fsdp", 8);
  EXPECT_FALSE(fsdp.fits);
  EXPECT_THROW(train::split_tp_strategy("tpx+ddp"), ConfigError);
}

// With the bandwidth between nodes given (--comm-inter), the collectives of rows on several nodes that cross them
// run at it: every one of fsdp's, hsdp's replica all-reduce only (its shard groups are inside the nodes), the
// tensor-parallel row's ddp across the groups only; rows on one node do not use it.
TEST(Plan, CollectivesAcrossNodesRunAtTheBandwidthBetweenThem) {
  const RunConfig c = tiny_config();
  const train::ProbeResult p = gpu_probe();
  train::PlanOptions o = gpu_options(2, false, 1024 * kMiB);  // nodes of 2 GPUs: 4 ranks on 2 nodes
  o.worlds = {2, 4};
  o.strategies = {"fsdp", "hsdp", "tp2+ddp"};
  const auto one = train::make_plan(c, o, &p, bandwidth(100));
  o.inter_node = bandwidth(1);
  const auto two = train::make_plan(c, o, &p, bandwidth(100));
  EXPECT_DOUBLE_EQ(row(two, "fsdp", 2).comm_s, row(one, "fsdp", 2).comm_s) << "2 ranks on one node";
  EXPECT_NEAR(row(two, "fsdp", 4).comm_s, 100 * row(one, "fsdp", 4).comm_s, 1e-9 * row(two, "fsdp", 4).comm_s);
  const train::PlanRow &h1 = row(one, "hsdp", 4), &h2 = row(two, "hsdp", 4), &f2 = row(one, "fsdp", 2);
  // hsdp = fsdp on its 2-rank shard group (inside a node) + the replicas' all-reduce (between the nodes).
  const double replicate = h1.comm_s - f2.comm_s;
  EXPECT_GT(replicate, 0);
  EXPECT_NEAR(h2.comm_s, f2.comm_s + 100 * replicate, 1e-9 * h2.comm_s);
  const train::PlanRow &t1 = row(one, "tp2+ddp", 4), &t2 = row(two, "tp2+ddp", 4);
  EXPECT_GT(t2.comm_s, t1.comm_s);
  EXPECT_LT(t2.comm_s, 100 * t1.comm_s) << "the group's all-reduces stay inside the node";
  const std::string md = train::plan_markdown(c, two, &p, bandwidth(100), o);
  EXPECT_NE(md.find("- Between nodes (GB/s): all_reduce 1.00"), std::string::npos) << md;
  o.inter_node = train::CommBandwidth{};
  EXPECT_NE(train::plan_markdown(c, one, &p, bandwidth(100), o).find("- Between nodes: not given (--comm-inter"),
            std::string::npos);
}

TEST(Plan, GpuTooSmallForTheRankDoesNotFitAndSaysSo) {
  const RunConfig c = tiny_config();
  const train::ProbeResult p = gpu_probe();
  const auto rows = train::make_plan(c, gpu_options(1, false, 4 * kMiB), &p, bandwidth(100));
  const train::PlanRow& s = row(rows, "single", 1);
  EXPECT_FALSE(s.fits);
  EXPECT_NE(s.note.find("available on its GPU"), std::string::npos) << s.note;
}

TEST(Plan, NcclNeedsOneGpuPerRank) {
  const RunConfig c = tiny_config();
  const train::ProbeResult p = gpu_probe();
  train::PlanOptions o = gpu_options(1, false, 1024 * kMiB);
  o.ranks_per_node = 4;
  const auto rows = train::make_plan(c, o, &p, bandwidth(100));
  const train::PlanRow& d = row(rows, "ddp", 4);
  EXPECT_FALSE(d.fits);
  EXPECT_NE(d.note.find("needs 4 GPUs per node"), std::string::npos) << d.note;
  EXPECT_TRUE(row(rows, "single", 1).fits);
}

TEST(Plan, RanksSharingAGpuSplitItsMemoryAndItsTime) {
  const RunConfig c = tiny_config();
  const train::ProbeResult p = gpu_probe();
  const auto rows = train::make_plan(c, gpu_options(1, true, 1024 * kMiB), &p, bandwidth(100));
  const train::PlanRow& z = row(rows, "zero2", 4);
  EXPECT_EQ(z.ranks_per_node, 4);
  EXPECT_EQ(z.ranks_per_gpu, 4);
  EXPECT_EQ(z.available, 256 * kMiB);
  EXPECT_NEAR(z.compute_s, (p.micro_s + p.optimizer_s / 4) * 4, 1e-12);
  // Two GPUs for 4 ranks: two per GPU.
  const auto rows2 = train::make_plan(c, gpu_options(2, true, 1024 * kMiB), &p, bandwidth(100));
  EXPECT_EQ(row(rows2, "zero2", 4).ranks_per_gpu, 2);
  EXPECT_EQ(row(rows2, "zero2", 4).available, 512 * kMiB);
}

TEST(Plan, UnknownBandwidthLeavesTheCollectivesUnpredicted) {
  const RunConfig c = tiny_config();
  const train::ProbeResult p = gpu_probe();
  train::CommBandwidth none;
  none.source = "not known: test";
  const auto rows = train::make_plan(c, gpu_options(2, false, 1024 * kMiB), &p, none);
  EXPECT_TRUE(std::isfinite(row(rows, "single", 1).step_s));
  EXPECT_TRUE(std::isnan(row(rows, "ddp", 2).comm_s));
  const std::string md = train::plan_markdown(c, rows, &p, none, gpu_options(2, false, 1024 * kMiB));
  EXPECT_NE(md.find("| reserved / rank | GPU memory / rank |"), std::string::npos) << md;
  EXPECT_NE(md.find("one GPU per rank"), std::string::npos) << md;
  EXPECT_NE(md.find("- Bus bandwidth: not known: test."), std::string::npos) << md;
  EXPECT_NE(md.find("| ? | ? |"), std::string::npos) << "an unknown step time prints as ?\n" << md;
  EXPECT_NE(md.find("cuda:0 (test GPU)"), std::string::npos) << md;
}

TEST(Plan, CpuRankMemoryIsTheNodesRss) {
  const RunConfig c = tiny_config();
  train::ProbeResult p = gpu_probe();
  p.device = "cpu";
  p.persistent_bytes = p.slack_bytes = 0;
  train::PlanOptions o;
  o.worlds = {2};
  o.node_cpus = 2;
  const auto rows = train::make_plan(c, o, &p, bandwidth(10));
  const train::PlanRow& d = row(rows, "ddp", 2);
  EXPECT_EQ(d.ranks_per_gpu, 0);
  EXPECT_EQ(d.reserved, d.tensor_peak);
  EXPECT_GT(d.rss, d.tensor_peak);
  const std::string md = train::plan_markdown(c, rows, &p, bandwidth(10), o);
  EXPECT_NE(md.find("| RSS / rank | available / rank |"), std::string::npos) << md;
}

// The probe through the device layer on the CPU device: what it holds between steps is the strategy's
// model state exactly (nothing persistent beyond it), and the CPU has no allocator slack.
TEST(Plan, ProbeOnTheCpuDevice) {
  metrics::install_memory_counter();
  const RunConfig c = tiny_config();
  const train::ProbeResult p = train::probe_model(c, device::cpu_device());
  EXPECT_EQ(p.device, "cpu");
  EXPECT_GT(p.activation_bytes, 0);
  EXPECT_EQ(p.persistent_bytes, 0);
  EXPECT_EQ(p.slack_bytes, 0);
  EXPECT_GT(p.micro_s, 0);
  EXPECT_NE(p.note.find("1- and 2-layer models, micro-batch 2 x 32 tokens"), std::string::npos) << p.note;
}

// Issue 49, item 2: the probe is bounded by the memory the fit checks see. Its micro-batch shrinks (sequences,
// then tokens per sequence, down to 128 tokens) until its 2-layer model's state plus the activations' lower
// bound is within half of it; below that the probe does not run and says why.
TEST(Plan, TheProbeIsBoundedByHalfTheAvailableMemory) {
  RunConfig c = tiny_config();
  c.train.micro_batch = 8;
  c.data.seq_len = 512;
  int64_t bytes = 0;
  auto mb = train::probe_micro_batch(c, 8192, INT64_MAX, &bytes);
  EXPECT_EQ(mb, (std::pair<int, int64_t>{8, 512}));  // 4096 tokens: under the cap, no bound
  const int64_t full = bytes;
  mb = train::probe_micro_batch(c, 1024, INT64_MAX, &bytes);
  EXPECT_EQ(mb, (std::pair<int, int64_t>{8, 128}));  // the cap: 1024 tokens
  // A budget between the 1 x 512 and the 2 x 512 probe's needs: one sequence of 512.
  const RunConfig& cc = c;
  int64_t one_seq = 0, two_seq = 0;
  {
    RunConfig one = cc;
    one.train.micro_batch = 1;
    train::probe_micro_batch(one, 8192, INT64_MAX, &one_seq);
    RunConfig two = cc;
    two.train.micro_batch = 2;
    train::probe_micro_batch(two, 8192, INT64_MAX, &two_seq);
  }
  ASSERT_LT(one_seq, two_seq);
  ASSERT_LT(two_seq, full);
  mb = train::probe_micro_batch(c, 8192, (one_seq + two_seq) / 2, &bytes);
  EXPECT_EQ(mb, (std::pair<int, int64_t>{1, 512}));
  EXPECT_LE(bytes, (one_seq + two_seq) / 2);
  // Below the 128-token probe's need: none.
  RunConfig smallest = cc;
  smallest.train.micro_batch = 1;
  smallest.data.seq_len = 128;
  int64_t least = 0;
  train::probe_micro_batch(smallest, 8192, INT64_MAX, &least);
  EXPECT_EQ(train::probe_micro_batch(c, 8192, least, &bytes), (std::pair<int, int64_t>{1, 128}));
  EXPECT_EQ(train::probe_micro_batch(c, 8192, least - 1, &bytes), (std::pair<int, int64_t>{0, 0}));
  // probe_model with fault.memory_available_mb that small: skipped, with the numbers; with half of the
  // one-sequence need's budget doubled, it measures one sequence and extrapolates.
  metrics::install_memory_counter();
  // (The tiny preset's 2-layer model holds its 151936 x 64 embedding: tens of MiB, so MiB steps suffice.)
  RunConfig tight = c;
  tight.fault.memory_available_mb = int((2 * least - 1) >> 20);
  ASSERT_GT(tight.fault.memory_available_mb, 0);
  const train::ProbeResult skipped = train::probe_model(tight, device::cpu_device());
  EXPECT_NE(skipped.skipped.find("probe skipped: its 2-layer model needs"), std::string::npos) << skipped.skipped;
  EXPECT_EQ(skipped.activation_bytes, 0);
  RunConfig bounded = c;
  bounded.fault.memory_available_mb = int((2 * one_seq + kMiB - 1) / kMiB);  // half of it: one sequence's need
  ASSERT_LT(int64_t(bounded.fault.memory_available_mb) * kMiB, 2 * two_seq);
  const train::ProbeResult p = train::probe_model(bounded, device::cpu_device());
  EXPECT_TRUE(p.skipped.empty()) << p.skipped;
  EXPECT_NE(p.note.find("micro-batch 1 x 512 tokens"), std::string::npos) << p.note;
  EXPECT_NE(p.note.find("extrapolated to 8 x 512 tokens"), std::string::npos) << p.note;
}

TEST(Plan, BandwidthMeasuredOnTheDeviceLayersBuffers) {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  auto comm = comm::make_mpi_communicator(MPI_COMM_WORLD);
  const train::CommBandwidth bw = train::measure_bandwidth(*comm, MPI_COMM_WORLD, device::cpu_device());
  EXPECT_NE(bw.source.find("on the CPUs"), std::string::npos) << bw.source;
  if (n > 1) {
    EXPECT_TRUE(bw.known());
    EXPECT_GT(bw.all_reduce, 0);
    EXPECT_GT(bw.all_gather, 0);
    EXPECT_GT(bw.reduce_scatter, 0);
  }
}
