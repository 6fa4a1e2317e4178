// Where each tensor of a tensor-parallel rank's part lies in the full model (model/tensor_parallel.hpp): over the
// ranks of a group every element of every full tensor, compute and LoRA, is held by exactly as many ranks as
// tp_slice says (1 for what is split, the group for what is replicated, tp / K for a shared key/value head), and a
// part copied out of the full model and back reproduces it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "lorabench/core/error.hpp"
#include "lorabench/model/tensor_parallel.hpp"
#include "lorabench/model/weights.hpp"

using namespace lorabench;

namespace {

struct SplitCase {
  std::string preset;
  int tp;
};
void PrintTo(const SplitCase& c, std::ostream* os) { *os << c.preset << " tp " << c.tp; }

class TensorParallelLayout : public ::testing::TestWithParam<SplitCase> {};

TEST_P(TensorParallelLayout, EveryElementIsHeldByTheRanksItsSliceSays) {
  const SplitCase& sc = GetParam();
  model::ModelShape shape = model::preset_shape(sc.preset);
  shape.vocab_size = 1001;  // uneven rows: the last rank's are padding
  const model::LoraSpec lora = model::make_lora_spec(true, 4, 8, 0, false, {"q", "k", "v", "o", "gate", "up", "down"});
  const model::ModelLayout full = model::build_layout(shape, lora);
  const model::ModelLayout part = model::build_layout(model::tp_local_shape(shape, sc.tp), lora);
  ASSERT_EQ(full.units.size(), part.units.size());
  for (size_t u = 0; u < full.units.size(); ++u) {
    for (bool compute : {true, false}) {
      const model::UnitLayout& fu = full.units[u];
      const int64_t n = compute ? fu.compute_numel : fu.trainable_numel;
      const int64_t ln = compute ? part.units[u].compute_numel : part.units[u].trainable_numel;
      if (n == 0) continue;
      // Distinct values, so a slice taken from the wrong place is seen.
      const at::Tensor values = at::arange(1, n + 1, at::kDouble);
      at::Tensor held = at::zeros({n}, at::kDouble);
      for (int r = 0; r < sc.tp; ++r) {
        at::Tensor mine = at::empty({ln}, at::kDouble), back = at::zeros({n}, at::kDouble);
        model::tp_copy_unit(full, part, sc.tp, r, int(u), compute, values, mine, true);
        model::tp_copy_unit(full, part, sc.tp, r, int(u), compute, back, mine, false);
        // What came back is the full tensor's own values, where the rank holds them.
        const at::Tensor where = back.ne(0);
        EXPECT_TRUE(at::equal(back.masked_select(where), values.masked_select(where))) << fu.name << " rank " << r;
        held.add_(where.to(at::kDouble));
      }
      for (const auto& slot : compute ? fu.compute : fu.trainable) {
        const int holders = model::tp_slice(shape, sc.tp, 0, slot.name).holders;
        const at::Tensor h = model::slot_view(held, slot);
        EXPECT_EQ(h.min().item<double>(), holders) << slot.name << " tp " << sc.tp;
        EXPECT_EQ(h.max().item<double>(), holders) << slot.name << " tp " << sc.tp;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, TensorParallelLayout,
                         ::testing::Values(SplitCase{"tiny", 2}, SplitCase{"tiny", 4}, SplitCase{"qwen3-tiny", 2},
                                           SplitCase{"qwen3-tiny", 4}, SplitCase{"small", 8}),
                         [](const ::testing::TestParamInfo<SplitCase>& i) {
                           std::string n = i.param.preset + "_tp" + std::to_string(i.param.tp);
                           for (char& c : n)
                             if (c == '-' || c == '.') c = '_';
                           return n;
                         });

// The part's shape: whole heads, key/value heads shared where there are fewer than ranks, the MLP and vocabulary
// split; what cannot be split so is refused naming the key.
TEST(TensorParallelLayout, ThePartsShape) {
  const model::ModelShape s = model::preset_shape("qwen2.5-1.5b");  // 12 heads, 2 key/value heads, MLP 8960
  const model::ModelShape p2 = model::tp_local_shape(s, 2), p4 = model::tp_local_shape(s, 4);
  EXPECT_EQ(p2.heads, 6);
  EXPECT_EQ(p2.kv_heads, 1);
  EXPECT_EQ(model::tp_kv_replicas(s, 2), 1);
  EXPECT_EQ(p4.heads, 3);
  EXPECT_EQ(p4.kv_heads, 1);
  EXPECT_EQ(model::tp_kv_replicas(s, 4), 2);
  EXPECT_EQ(p4.intermediate, 8960 / 4);
  EXPECT_EQ(p4.vocab_size, (s.vocab_size + 3) / 4);
  EXPECT_EQ(p4.hidden, s.hidden);
  EXPECT_THROW(model::tp_local_shape(s, 8), ConfigError);  // 12 heads
  try {
    model::tp_local_shape(model::preset_shape("qwen3.5-tiny"), 2);
    ADD_FAILURE() << "Qwen3.5 split";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.tp = 2"), std::string::npos) << e.what();
  }
}

}  // namespace
