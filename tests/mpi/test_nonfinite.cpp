// A NaN on one rank is seen by every rank in the same step, and no rank updates its weights.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/data/batch.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/train/step_runner.hpp"

using namespace lorabench;

TEST(NonFinite, EveryRankStopsInTheSameStepWithoutAnUpdate) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  auto comm = comm::make_mpi_communicator(MPI_COMM_WORLD);
  model::ModelShape shape = model::preset_shape("tiny");
  shape.vocab_size = 500;
  model::ModelLayout layout = model::build_layout(shape, model::LoraSpec{});
  for (const char* name : {"ddp", "zero2", "fsdp"}) {
    strategy::StrategySpec spec;
    spec.name = name;
    auto s = strategy::TrainingStrategy::create(spec, layout, at::kFloat, comm.get());
    s->initialize(strategy::InitSource{3, nullptr});
    data::SyntheticSpec ds{7, 500, {1, 1, world, 12}};
    auto source = data::make_synthetic_source(ds);
    train::StepConfig sc;
    sc.schedule.lr = 1e-2;
    sc.nan_at_step = rank == world - 1 ? 2 : -1;  // only the last rank sees the NaN
    train::StepRunner runner(layout, *s, *source, sc, MPI_COMM_WORLD);
    for (int step = 0; step < 2; ++step) EXPECT_FALSE(runner.run(step).nonfinite) << name;
    strategy::FullState before = s->gather_state();
    train::StepResult r = runner.run(2);
    EXPECT_TRUE(r.nonfinite) << name << " rank " << rank;
    EXPECT_NE(r.why.find("non-finite loss on 1 rank"), std::string::npos) << r.why;
    strategy::FullState after = s->gather_state();
    EXPECT_EQ(after.step, 2) << name << ": the optimizer must not have stepped";
    for (size_t u = 0; u < before.params.size(); ++u) {
      if (!before.params[u].defined()) continue;
      EXPECT_TRUE(at::equal(before.params[u], after.params[u])) << name;
    }
    // The next step trains normally again (the gradients of the bad step were dropped).
    EXPECT_FALSE(runner.run(3).nonfinite) << name;
    EXPECT_EQ(s->gather_state().step, 3) << name;
  }
}
