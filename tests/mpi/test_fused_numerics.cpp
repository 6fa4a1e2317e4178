// The fused, vocabulary-chunked LM head + loss trains like the unfused reference path (full logits, fp32
// log-softmax): loss after 5 steps within 1e-5 in fp32 and 1e-2 in bf16 (the performance issue's bar),
// on the `small` preset with LoRA r16 on every projection.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "lorabench/data/batch.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/train/step_runner.hpp"

using namespace lorabench;

namespace {

std::vector<double> losses(at::ScalarType dtype, int64_t head_chunk) {
  model::ModelShape shape = model::preset_shape("small");
  model::LoraSpec lora = model::make_lora_spec(true, 16, 32, 0, false, {"q", "k", "v", "o", "gate", "up", "down"});
  model::ModelLayout layout = model::build_layout(shape, lora);
  strategy::StrategySpec spec;
  spec.name = "single";
  auto s = strategy::TrainingStrategy::create(spec, layout, dtype, nullptr);
  s->initialize(strategy::InitSource{11, nullptr});
  data::SyntheticSpec ds{21, int(shape.vocab_size), {2, 1, 1, 64}};
  auto source = data::make_synthetic_source(ds);
  train::StepConfig sc;
  sc.schedule.lr = 2e-3;
  sc.options.head_chunk = head_chunk;
  train::StepRunner runner(layout, *s, *source, sc, MPI_COMM_SELF);
  std::vector<double> out;
  for (int step = 0; step < 5; ++step) out.push_back(runner.run(step).loss);
  return out;
}

}  // namespace

TEST(FusedHead, Fp32MatchesTheUnfusedPathTo1e5) {
  auto fused = losses(at::kFloat, 4096), plain = losses(at::kFloat, 0);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(fused[i], plain[i], 1e-5 * std::abs(plain[i])) << "step " << i;
}

TEST(FusedHead, Bf16MatchesTheUnfusedPathTo1e2) {
  auto fused = losses(at::kBFloat16, 4096), plain = losses(at::kBFloat16, 0);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(fused[i], plain[i], 1e-2) << "step " << i;
}
