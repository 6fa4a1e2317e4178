// Tensor parallelism (model/tensor_parallel.hpp, strategy::make_tensor_parallel) computes the single-rank training:
// the same losses, gradient norms and, gathered into the full model's layout (what the adapter is written from),
// the same LoRA weights and AdamW moments at the end (fp32, relative difference <= 1e-5), for tp over every rank
// and, on 4 ranks, tp 2 x dp 2 (ddp across the tensor-parallel groups), with gradient accumulation, activation
// checkpointing and LoRA dropout. On 4 ranks tp 4 splits a model of 2 key/value heads: each is held by two ranks.
// The single-rank reference runs inside every rank (MPI_COMM_SELF). LB_TEST_MODEL names another preset
// (tests/mpi/strategy.cmake runs qwen3-tiny too: q/k norms, no biases, head_dim of its own).
//
// Built twice: here on the CPU (label mpi), and as test_tensor_parallel_gpu (tests/gpu, label gpu) with
// LB_TEST_ON_CUDA: every rank on the machine's first GPU, the tensor-parallel group's collectives on device buffers
// (the MPI communicator staging them, split into the groups like NCCL's), the reference on the same GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <string>

#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/data/batch.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/model/tensor_parallel.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/train/step_runner.hpp"
#include "mpi_test_util.hpp"
#include "test_device.hpp"
#include "state_compare.hpp"

using namespace lorabench;
using lbtest::norm_rel;
using lbtest::rel;

namespace {

constexpr int kSteps = 6;
using lbtest::kTol;
using lbtest::test_device;

model::ModelShape test_shape() {
  model::ModelShape s = model::preset_shape(getenv("LB_TEST_MODEL") ? getenv("LB_TEST_MODEL") : "tiny");
  s.vocab_size = 1001;  // rows split unevenly over 2 and 4 ranks: the last rank's are padded
  return s;
}

struct Case {
  int tp = 2;
  int accum = 1;
  bool checkpointing = false;
  double dropout = 0;
  std::string name() const {
    return "tp" + std::to_string(tp) + " accum" + std::to_string(accum) + (checkpointing ? " +ac" : "") +
           (dropout > 0 ? " dropout" : "");
  }
};

model::ModelLayout layout_of(const Case& c) {
  model::LoraSpec lora = model::make_lora_spec(true, 4, 8, c.dropout, false, {"q", "k", "v", "o", "gate", "up", "down"});
  return model::build_layout(test_shape(), lora);
}

struct Trajectory {
  std::vector<double> loss, norm;
  strategy::FullState state;
};

// Trains kSteps steps on `dp` data-parallel groups of `tp` ranks (rank r: tp index r % tp, data-parallel index
// r / tp); tp = 1 and world 1: the single-rank reference, the global batch as extra accumulation steps.
Trajectory train(const Case& c, int tp, int dp, int accum, MPI_Comm world) {
  const model::ModelLayout layout = layout_of(c);
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  auto world_comm = device::make_staging_communicator(comm::make_mpi_communicator(world), test_device());
  std::unique_ptr<comm::Communicator> tp_comm, kv_comm, dp_comm;
  strategy::MeshGroups groups;
  if (tp > 1) {
    tp_comm = world_comm->split(rank / tp, rank % tp);
    const int replicas = model::tp_kv_replicas(layout.shape, tp);
    if (replicas > 1) kv_comm = tp_comm->split(tp_comm->rank() / replicas, tp_comm->rank());
    groups.tp = tp_comm.get();
    groups.tp_kv = kv_comm.get();
  }
  MPI_Comm data;
  MPI_Comm_split(world, rank % tp, rank / tp, &data);
  if (dp > 1) dp_comm = world_comm->split(rank % tp, rank / tp);
  strategy::StrategySpec spec;
  spec.name = dp > 1 ? "ddp" : "single";
  spec.bucket_mb = 0.02;
  spec.grad_accum = accum;
  auto s = strategy::TrainingStrategy::create(spec, layout, at::kFloat, dp_comm.get(), &test_device(), groups);
  strategy::InitSource src;
  src.seed = 17;
  s->initialize(src);
  {  // non-zero B (deterministic values, in the full layout) so the first steps already move every adapter
    strategy::FullState st = s->gather_state();
    for (auto& p : st.params)
      if (p.defined()) p.add_(at::sin(at::arange(p.numel(), p.options())).mul_(0.05));
    s->load_state(st);
  }
  data::SyntheticSpec ds;
  ds.seed = 99;
  ds.vocab_size = 1001;
  ds.geo.seq_len = 16;
  ds.geo.micro_batch = 2;
  ds.geo.grad_accum = accum;
  ds.geo.world_size = dp;
  auto source = data::make_synthetic_source(ds);
  train::StepConfig sc;
  sc.grad_accum = accum;
  sc.seed = 5;
  sc.lora_dropout = c.dropout > 0;
  sc.max_grad_norm = 0.5;  // clipping is exercised, so the norm must count the replicated matrices once
  sc.adamw.weight_decay = 0.1;
  sc.schedule.kind = "cosine";
  sc.schedule.lr = 5e-3;
  sc.schedule.warmup_steps = 2;
  sc.schedule.total_steps = kSteps + 2;
  sc.options.activation_checkpointing = c.checkpointing;
  sc.options.head_chunk = 300;
  train::StepRunner runner(s->compute_layout(), *s, *source, sc, data);
  Trajectory t;
  for (int step = 0; step < kSteps; ++step) {
    train::StepResult r = runner.run(step);
    EXPECT_FALSE(r.nonfinite);
    t.loss.push_back(r.loss);
    t.norm.push_back(r.grad_norm);
  }
  t.state = s->gather_state();
  for (auto* v : {&t.state.params, &t.state.exp_avg, &t.state.exp_avg_sq})
    for (auto& x : *v)
      if (x.defined()) x = x.cpu();
  MPI_Comm_free(&data);
  return t;
}

void check_case(const Case& c) {
  const int world = lbtest::world_size();
  ASSERT_EQ(world % c.tp, 0);
  const int dp = world / c.tp;
  Trajectory got = train(c, c.tp, dp, c.accum, MPI_COMM_WORLD);
  Trajectory ref = train(c, 1, 1, c.accum * dp, MPI_COMM_SELF);
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_LE(rel(got.loss[i], ref.loss[i]), kTol) << c.name() << " step " << i << ": " << got.loss[i] << " vs "
                                                   << ref.loss[i];
    EXPECT_LE(rel(got.norm[i], ref.norm[i]), kTol) << c.name() << " grad norm step " << i << ": " << got.norm[i]
                                                   << " vs " << ref.norm[i];
  }
  // The gathered state is in the full model's layout: every tensor whole, as the single rank holds it.
  ASSERT_EQ(got.state.params.size(), ref.state.params.size());
  for (size_t u = 0; u < ref.state.params.size(); ++u) {
    ASSERT_EQ(got.state.params[u].defined(), ref.state.params[u].defined());
    if (ref.state.params[u].defined()) EXPECT_EQ(got.state.params[u].numel(), ref.state.params[u].numel());
  }
  EXPECT_LE(norm_rel(got.state.params, ref.state.params), kTol) << c.name() << ": final weights";
  EXPECT_LE(norm_rel(got.state.exp_avg, ref.state.exp_avg), 2 * kTol) << c.name() << ": AdamW m";
  EXPECT_LE(norm_rel(got.state.exp_avg_sq, ref.state.exp_avg_sq), 2 * kTol) << c.name() << ": AdamW v";
  EXPECT_EQ(got.state.step, kSteps);
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

class TensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallel, ReproducesSingleRank) {
  const Case& c = GetParam();
  if (lbtest::world_size() % c.tp != 0) GTEST_SKIP() << c.name() << " needs a multiple of " << c.tp << " ranks";
  // A dropout mask is keyed by the micro-batch's index in the step, which data parallelism renumbers (the
  // reference's extra accumulation steps): only tp over every rank draws the reference's masks.
  if (c.dropout > 0 && lbtest::world_size() != c.tp)
    GTEST_SKIP() << c.name() << " is compared on " << c.tp << " ranks (tp over every rank)";
  check_case(c);
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (int tp : {2, 4})
    for (int accum : {1, 3})
      for (bool ac : {false, true}) out.push_back({tp, accum, ac, 0});
  for (int tp : {2, 4}) out.push_back({tp, 2, true, 0.1});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Equivalence, TensorParallel, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = i.param.name();
                           for (char& ch : n)
                             if (ch == ' ' || ch == '+') ch = '_';
                           return n;
                         });

// A model that cannot be split into whole heads is refused with the key named, before anything is allocated.
TEST(TensorParallelConfig, RefusesWhatCannotBeSplit) {
  model::ModelShape s = model::preset_shape("qwen2.5-0.5b");  // 14 heads, 2 key/value heads
  EXPECT_THROW(model::tp_local_shape(s, 4), ConfigError);
  try {
    model::tp_local_shape(s, 4);
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.tp"), std::string::npos) << e.what();
  }
  EXPECT_EQ(model::tp_local_shape(s, 2).heads, 7);
  EXPECT_THROW(model::tp_local_shape(model::preset_shape("qwen3.5-tiny"), 2), ConfigError);
}

}  // namespace
