// The model and LoRA against Hugging Face transformers and PEFT (tests/fixtures/README.md).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "lorabench/core/error.hpp"
#include "lorabench/io/safetensors.hpp"
#include "safetensors_test_util.hpp"
#include "lorabench/lora/adapter.hpp"
#include "lorabench/model/dense.hpp"

using namespace lorabench;
namespace fs = std::filesystem;

namespace {

const std::string kTiny = std::string(LORABENCH_FIXTURES) + "/qwen2-tiny";
const std::string kTinyLora = std::string(LORABENCH_FIXTURES) + "/qwen2-tiny-lora";

at::Tensor ref(const io::SafeTensorsFile& f, const std::string& name) {
  const io::SafeTensorInfo* t = f.find(name);
  if (!t) throw std::runtime_error("fixture lacks " + name);
  return model::read_tensor(f, *t, t->dtype == "I64" ? at::kLong : at::kFloat);
}

double max_abs(const at::Tensor& a) { return a.abs().max().item<double>(); }

struct Loaded {
  std::unique_ptr<model::DenseModel> model;
};

std::unique_ptr<model::DenseModel> load_tiny(const model::LoraSpec& lora) {
  model::ModelShape shape = model::load_hf_config(kTiny + "/config.json");
  auto m = std::make_unique<model::DenseModel>(model::build_layout(shape, lora), at::kFloat);
  m->load_snapshot(model::Snapshot(kTiny));
  return m;
}

// Mean causal-LM loss and the gradients (scaled for the mean) of one forward+backward.
double loss_and_grads(model::DenseModel& m, const at::Tensor& ids, const at::Tensor& labels) {
  model::MicroBatch mb;
  mb.ids = ids;
  mb.targets = model::shift_targets(labels);
  int64_t counted = mb.targets.ne(-100).sum().item<int64_t>();
  mb.grad_scale = 1.0 / double(counted);
  m.zero_grad();
  model::MicroResult r = model::forward_backward(m.layout(), m, mb, model::StepOptions{});
  EXPECT_EQ(r.tokens(), counted);
  return r.loss() / double(r.tokens());
}

}  // namespace

TEST(ModelReference, TinyLogitsHiddenStatesAndLossMatchTransformers) {
  io::SafeTensorsFile reff(kTiny + "/reference.safetensors");
  model::LoraSpec off;
  off.enabled = false;
  auto m = load_tiny(off);
  at::Tensor ids = ref(reff, "input_ids"), labels = ref(reff, "labels");
  std::vector<at::Tensor> hidden;
  at::Tensor logits = model::forward_logits(m->layout(), *m, ids, &hidden);
  at::Tensor want = ref(reff, "logits");
  ASSERT_EQ(logits.sizes(), want.sizes());
  EXPECT_LE(max_abs(logits - want), 1e-5) << "logits differ from transformers";
  ASSERT_EQ(hidden.size(), 3u);
  for (size_t i = 0; i < hidden.size(); ++i)
    EXPECT_LE(max_abs(hidden[i] - ref(reff, "hidden_states_" + std::to_string(i))), 1e-5) << "hidden_states_" << i;
  double loss = loss_and_grads(*m, ids, labels);
  EXPECT_NEAR(loss, ref(reff, "loss").item<double>(), 1e-6);
}

TEST(ModelReference, TinyLoraLogitsLossAndGradientsMatchPeft) {
  io::SafeTensorsFile reff(kTinyLora + "/reference_lora.safetensors");
  lora::AdapterConfig ac = lora::read_adapter_config(kTinyLora);
  EXPECT_EQ(ac.r, 4);
  EXPECT_EQ(ac.alpha, 8);
  auto m = load_tiny(lora::lora_spec_of(ac));
  lora::load_adapter(kTinyLora, m->layout(), m->trainable_flats());
  at::Tensor ids = ref(reff, "input_ids"), labels = ref(reff, "labels");
  at::Tensor logits = model::forward_logits(m->layout(), *m, ids);
  at::Tensor want = ref(reff, "logits");
  EXPECT_LE(max_abs(logits - want) / max_abs(want), 1e-5);
  double loss = loss_and_grads(*m, ids, labels);
  EXPECT_NEAR(loss, ref(reff, "loss").item<double>(), 1e-6 * std::abs(loss) + 1e-7);

  int checked = 0;
  const auto& layout = m->layout();
  for (size_t u = 0; u < layout.units.size(); ++u) {
    for (const auto& s : layout.units[u].trainable) {
      // PEFT names its in-memory parameters with the adapter name: ...lora_A.default.weight
      std::string peft = s.name;
      peft.replace(peft.rfind(".weight"), 7, ".default.weight");
      at::Tensor want_g = ref(reff, "grad." + peft);
      at::Tensor got = m->grad_flats()[u].narrow(0, s.offset, s.numel).view(s.shape);
      double scale = std::max(max_abs(want_g), 1e-12);
      EXPECT_LE(max_abs(got - want_g) / scale, 1e-5) << s.name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 28);  // 2 layers x 7 projections x (A, B)
}

TEST(ModelReference, ExportedAdapterRereadsBitIdentically) {
  lora::AdapterConfig ac = lora::read_adapter_config(kTinyLora);
  auto m = load_tiny(lora::lora_spec_of(ac));
  lora::load_adapter(kTinyLora, m->layout(), m->trainable_flats());
  fs::path dir = fs::temp_directory_path() / ("lorabench_adapter_" + std::to_string(::getpid()));
  lora::save_adapter(dir.string(), m->layout(), m->trainable_flats(), "tiny");
  lora::AdapterConfig back = lora::read_adapter_config(dir.string());
  EXPECT_EQ(back.r, ac.r);
  EXPECT_EQ(back.alpha, ac.alpha);
  EXPECT_EQ(back.targets, ac.targets);
  EXPECT_EQ(back.rslora, ac.rslora);
  auto m2 = load_tiny(lora::lora_spec_of(back));
  lora::load_adapter(dir.string(), m2->layout(), m2->trainable_flats());
  for (size_t u = 0; u < m->trainable_flats().size(); ++u) {
    if (!m->trainable_flats()[u].defined()) continue;
    EXPECT_TRUE(at::equal(m->trainable_flats()[u], m2->trainable_flats()[u])) << "unit " << u;
  }
  // Same tensors as the PEFT file, by name and bit pattern.
  lbtest::expect_same_tensors(kTinyLora + "/adapter_model.safetensors", (dir / "adapter_model.safetensors").string());
  fs::remove_all(dir);
}

TEST(ModelReference, MergedExportEqualsAdapterForward) {
  io::SafeTensorsFile reff(kTinyLora + "/reference_lora.safetensors");
  lora::AdapterConfig ac = lora::read_adapter_config(kTinyLora);
  auto m = load_tiny(lora::lora_spec_of(ac));
  lora::load_adapter(kTinyLora, m->layout(), m->trainable_flats());
  fs::path dir = fs::temp_directory_path() / ("lorabench_merged_" + std::to_string(::getpid()));
  lora::save_merged(dir.string(), m->layout(), m->compute_flats(), m->trainable_flats(), at::kFloat);
  model::LoraSpec off;
  off.enabled = false;
  model::DenseModel merged(model::build_layout(model::load_hf_config((dir / "config.json").string()), off), at::kFloat);
  merged.load_snapshot(model::Snapshot(dir.string()));
  at::Tensor ids = ref(reff, "input_ids");
  at::Tensor a = model::forward_logits(m->layout(), *m, ids);
  at::Tensor b = model::forward_logits(merged.layout(), merged, ids);
  EXPECT_LE(max_abs(a - b) / max_abs(a), 1e-5);
  fs::remove_all(dir);
}

TEST(ModelReference, UnitPiecesReadStraightFromTheSnapshotEqualTheFullUnitsPieces) {
  // What fsdp keeps of each unit when it loads a snapshot (model::load_unit_range) against the whole unit loaded
  // and cut (load_unit), for 1 to 3 ranks (pieces that start and end inside tensors, and one past the unit's end,
  // padded with zeros), fp32 and bf16 (converted from the file's fp32).
  model::ModelShape shape = model::load_hf_config(kTiny + "/config.json");
  const model::ModelLayout layout = model::build_layout(shape, model::LoraSpec{});
  const model::Snapshot snap(kTiny);
  int checked = 0;
  for (auto dt : {at::kFloat, at::kBFloat16})
    for (int u = 0; u < int(layout.units.size()); ++u) {
      const int64_t n = layout.units[u].compute_numel;
      at::Tensor full = at::zeros({n}, dt);
      model::load_unit(snap, layout, u, full, at::Tensor());
      for (int64_t world : {1, 2, 3}) {
        const int64_t piece = (n + world - 1) / world;
        at::Tensor padded = at::cat({full, at::zeros({piece * world - n}, dt)});
        for (int64_t r = 0; r < world; ++r) {
          at::Tensor got = at::full({piece}, 7.0, dt);  // overwritten everywhere, padding included
          model::load_unit_range(snap, layout, u, got, r * piece);
          EXPECT_TRUE(got.equal(padded.narrow(0, r * piece, piece)))
              << "unit " << u << " rank " << r << " of " << world << " " << c10::toString(dt);
          ++checked;
        }
      }
    }
  EXPECT_GT(checked, 20);
  // A piece that lies past every tensor is zeros, and a tensor of the wrong shape is still refused.
  at::Tensor tail = at::ones({4}, at::kFloat);
  model::load_unit_range(snap, layout, 0, tail, layout.units[0].compute_numel);
  EXPECT_EQ(tail.abs().sum().item<double>(), 0.0);
  model::ModelShape wrong = shape;
  wrong.intermediate += 8;
  EXPECT_THROW(model::load_unit_range(snap, model::build_layout(wrong, model::LoraSpec{}), 1, tail, 0), lorabench::IoError);
}
