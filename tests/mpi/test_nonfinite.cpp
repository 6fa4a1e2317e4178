// A NaN on one rank is seen by every rank in the same step, and no rank updates its weights; nor does any
// rank in a step whose global batch has no token to train on.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/data/batch.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/train/step_runner.hpp"

using namespace lorabench;

namespace {

// The tiny model (vocabulary 500) under a strategy on every rank of the job, initialised alike.
struct TinyJob {
  int rank = 0, world = 1;
  std::unique_ptr<comm::Communicator> comm = comm::make_mpi_communicator(MPI_COMM_WORLD);
  model::ModelLayout layout;
  TinyJob() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    model::ModelShape shape = model::preset_shape("tiny");
    shape.vocab_size = 500;
    layout = model::build_layout(shape, model::LoraSpec{});
  }
  std::unique_ptr<strategy::TrainingStrategy> strategy(const char* name) const {
    strategy::StrategySpec spec;
    spec.name = name;
    auto s = strategy::TrainingStrategy::create(spec, layout, at::kFloat, comm.get());
    s->initialize(strategy::InitSource{3, nullptr});
    return s;
  }
};

// No weight moved between the two states.
void expect_same_params(const strategy::FullState& before, const strategy::FullState& after, const char* name) {
  for (size_t u = 0; u < before.params.size(); ++u) {
    if (!before.params[u].defined()) continue;
    EXPECT_TRUE(at::equal(before.params[u], after.params[u])) << name;
  }
}

}  // namespace

TEST(NonFinite, EveryRankStopsInTheSameStepWithoutAnUpdate) {
  const TinyJob job;
  const int rank = job.rank, world = job.world;
  for (const char* name : {"ddp", "zero2", "fsdp"}) {
    auto s = job.strategy(name);
    data::SyntheticSpec ds{7, 500, {1, 1, world, 12}};
    auto source = data::make_synthetic_source(ds);
    train::StepConfig sc;
    sc.schedule.lr = 1e-2;
    sc.nan_at_step = rank == world - 1 ? 2 : -1;  // only the last rank sees the NaN
    train::StepRunner runner(job.layout, *s, *source, sc, MPI_COMM_WORLD);
    for (int step = 0; step < 2; ++step) EXPECT_FALSE(runner.run(step).nonfinite) << name;
    strategy::FullState before = s->gather_state();
    train::StepResult r = runner.run(2);
    EXPECT_TRUE(r.nonfinite) << name << " rank " << rank;
    EXPECT_NE(r.why.find("non-finite loss on 1 rank"), std::string::npos) << r.why;
    strategy::FullState after = s->gather_state();
    EXPECT_EQ(after.step, 2) << name << ": the optimizer must not have stepped";
    expect_same_params(before, after, name);
    // The next step trains normally again (the gradients of the bad step were dropped).
    EXPECT_FALSE(runner.run(3).nonfinite) << name;
    EXPECT_EQ(s->gather_state().step, 3) << name;
  }
}

namespace {

// Synthetic tokens, but at step `empty_step` no position of any rank's batch carries a loss (a batch of
// prompts whose answers data.seq_len cut away).
class EmptyAtStep final : public data::BatchSource {
 public:
  EmptyAtStep(std::unique_ptr<data::BatchSource> inner, int64_t empty_step)
      : inner_(std::move(inner)), empty_step_(empty_step) {}
  data::Batch micro_batch(int64_t step, int micro, int rank) override {
    data::Batch b = inner_->micro_batch(step, micro, rank);
    if (step == empty_step_) {
      std::fill(b.labels.begin(), b.labels.end(), data::kIgnoreIndex);
      b.loss_tokens = 0;
    }
    return b;
  }
  std::string describe() const override { return inner_->describe(); }
  int64_t epoch_size() const override { return inner_->epoch_size(); }

 private:
  std::unique_ptr<data::BatchSource> inner_;
  int64_t empty_step_;
};

}  // namespace

// A step with no token to train on anywhere in the global batch is seen as such by every rank, reports no
// loss, and updates nothing (it used to report loss 0 and step the optimizer on a zero gradient).
TEST(EmptyStep, NoTokenToTrainOnMakesNoUpdateOnAnyRank) {
  const TinyJob job;
  const int rank = job.rank, world = job.world;
  for (const char* name : {"ddp", "fsdp"}) {
    auto s = job.strategy(name);
    EmptyAtStep source(data::make_synthetic_source(data::SyntheticSpec{7, 500, {1, 1, world, 12}}), 1);
    train::StepConfig sc;
    sc.schedule.lr = 1e-2;
    sc.adamw.weight_decay = 0.1;  // a step on a zero gradient would still move the weights
    train::StepRunner runner(job.layout, *s, source, sc, MPI_COMM_WORLD);
    EXPECT_FALSE(runner.run(0).empty) << name;
    const strategy::FullState before = s->gather_state();
    const train::StepResult r = runner.run(1);
    EXPECT_TRUE(r.empty) << name << " rank " << rank;
    EXPECT_TRUE(std::isnan(r.loss)) << name << ": a mean over no token is no number, not 0";
    EXPECT_EQ(r.loss_tokens, 0);
    const strategy::FullState after = s->gather_state();
    EXPECT_EQ(after.step, 1) << name << ": the optimizer must not have stepped";
    expect_same_params(before, after, name);
    EXPECT_FALSE(runner.run(2).empty) << name;
    EXPECT_EQ(s->gather_state().step, 2) << name;
  }
}
