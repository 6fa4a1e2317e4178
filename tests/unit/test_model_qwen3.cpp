// Qwen3 against transformers' Qwen3ForCausalLM and peft (tests/fixtures/README.md, "qwen3-*"; made by
// scripts/make-fixtures.sh qwen3): a tied config whose head_dim is not hidden / heads and an untied one.
// Logits, hidden states and loss in fp32 (1e-5) and bf16 (the Qwen2.5 tests' 2e-2); LoRA and rsLoRA
// logits, loss and every LoRA gradient against peft; full fine-tuning's gradients, q_norm and k_norm
// included; the exported adapter reread bit for bit.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "lorabench/config/options.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/io/safetensors.hpp"
#include "safetensors_test_util.hpp"
#include "snapshot_test_util.hpp"
#include "lorabench/lora/adapter.hpp"
#include "lorabench/model/dense.hpp"

using namespace lorabench;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = lbtest::fixtures();
using lbtest::load;
using lbtest::loss_and_grads;
using lbtest::max_abs;
using lbtest::no_lora;
using lbtest::ref;

class Qwen3Reference : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return kFixtures + "/" + GetParam(); }
};

}  // namespace

TEST(Qwen3Shape, ConfigJsonGivesTheFamilysDifferences) {
  const model::ModelShape s = model::load_hf_config(kFixtures + "/qwen3-tiny/config.json");
  EXPECT_EQ(s.family, "qwen3");
  EXPECT_TRUE(s.qk_norm);
  EXPECT_FALSE(s.qkv_bias);
  EXPECT_EQ(s.head_dim, 32);
  EXPECT_EQ(s.q_dim(), 128);  // 4 heads of 32 on a hidden size of 64
  EXPECT_TRUE(s.tie_embeddings);
  EXPECT_FALSE(model::load_hf_config(kFixtures + "/qwen3-tiny-untied/config.json").tie_embeddings);
  // The presets' parameter counts: Qwen3-0.6B is 0.596 B with its tied embedding (the model card's 0.6B,
  // 0.44B without embeddings), Qwen3-8B 8.19 B.
  EXPECT_EQ(model::preset_shape("qwen3-0.6b").total_params(), 596049920);
  EXPECT_NEAR(double(model::preset_shape("qwen3-8b").total_params()), 8.19e9, 0.01e9);
  const model::ModelShape q2 = model::load_hf_config(std::string(LORABENCH_FIXTURES) + "/qwen2-tiny/config.json");
  EXPECT_EQ(q2.family, "qwen2");
  EXPECT_TRUE(q2.qkv_bias);
  EXPECT_FALSE(q2.qk_norm);
}

// model.preset takes every preset the model layer has, and each is a shape the layout builds.
TEST(Qwen3Shape, ThePresetKeyOffersEveryPreset) {
  const OptionSpec* o = find_option("model.preset");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->type, join(model::preset_names(), "|"));
  for (const auto& name : model::preset_names()) {
    RunConfig c = default_run_config();
    EXPECT_NO_THROW(o->set(c, name)) << name;
    EXPECT_GT(model::preset_shape(name).total_params(), 0) << name;
  }
}

// transformers 5 saves the rotary settings as rope_parameters (the hub's files: top-level rope_theta); both
// are read, and what lorabench does not implement is refused with the file and the key.
TEST(Qwen3Shape, ConfigJsonVariantsAndRefusals) {
  const std::string src = kFixtures + "/qwen3-tiny/config.json";
  std::ifstream in(src);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const fs::path dir = fs::temp_directory_path() / ("lorabench_qwen3_cfg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "config.json").string();
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) t.replace(at, from.size(), to);
    std::ofstream(path) << t;
    return path;
  };
  EXPECT_EQ(model::load_hf_config(src).rope_theta, 1e6);  // from rope_parameters
  const std::string rp = "\"rope_parameters\": {\n    \"rope_theta\": 1000000.0,\n    \"rope_type\": \"default\"\n  }";
  ASSERT_NE(text.find(rp), std::string::npos);
  // The hub's form: a top-level rope_theta, rope_scaling null.
  EXPECT_EQ(model::load_hf_config(with(rp, "\"rope_theta\": 5000.0, \"rope_scaling\": null")).rope_theta, 5000.0);
  auto refused = [&](const std::string& p, const std::string& what) {
    try {
      model::load_hf_config(p);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  refused(with("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\""), "rope_parameters.rope_type \"yarn\" is not supported");
  refused(with(rp, rp + ", \"rope_theta\": 10000.0"), "rope_theta 10000.0 and rope_parameters.rope_theta 1000000.0 differ");
  refused(with("\"full_attention\",", "\"sliding_attention\","), "layer_types holds \"sliding_attention\"");
  EXPECT_TRUE(model::load_hf_config(with("\"attention_bias\": false", "\"attention_bias\": true")).qkv_bias);
  fs::remove_all(dir);
}

TEST_P(Qwen3Reference, LogitsHiddenStatesAndLossMatchTransformers) {
  io::SafeTensorsFile reff(dir() + "/reference.safetensors");
  auto m = load(dir(), no_lora(), at::kFloat);
  const at::Tensor ids = ref(reff, "input_ids"), labels = ref(reff, "labels");
  std::vector<at::Tensor> hidden;
  const at::Tensor logits = model::forward_logits(m->layout(), *m, ids, &hidden);
  const at::Tensor want = ref(reff, "logits");
  ASSERT_EQ(logits.sizes(), want.sizes());
  EXPECT_LE(max_abs(logits - want), 1e-5) << "logits differ from transformers";
  ASSERT_EQ(hidden.size(), 3u);
  for (size_t i = 0; i < hidden.size(); ++i)
    EXPECT_LE(max_abs(hidden[i] - ref(reff, "hidden_states_" + std::to_string(i))), 1e-5) << "hidden_states_" << i;
  EXPECT_NEAR(loss_and_grads(*m, ids, labels), ref(reff, "loss").item<double>(), 1e-6);
}

TEST_P(Qwen3Reference, Bf16LogitsAndLossMatchTransformersInBf16) {
  io::SafeTensorsFile reff(dir() + "/reference.safetensors"), bf(dir() + "/reference_bf16.safetensors");
  auto m = load(dir(), no_lora(), at::kBFloat16);
  const at::Tensor ids = ref(reff, "input_ids"), labels = ref(reff, "labels");
  const at::Tensor logits = model::forward_logits(m->layout(), *m, ids).to(at::kFloat);
  const at::Tensor want = ref(bf, "logits");
  EXPECT_LE(max_abs(logits - want) / max_abs(want), 2e-2);
  const double loss = loss_and_grads(*m, ids, labels), want_loss = ref(bf, "loss").item<double>();
  EXPECT_NEAR(loss, want_loss, 2e-2 * std::abs(want_loss));
}

TEST_P(Qwen3Reference, LoraLogitsLossAndGradientsMatchPeft) {
  for (const char* tag : {"lora", "rslora"}) {
    const std::string adapter = dir() + "/" + tag;
    if (!fs::exists(adapter)) continue;  // rsLoRA: qwen3-tiny only (its config is the scaling's only change)
    SCOPED_TRACE(adapter);
    io::SafeTensorsFile reff(dir() + "/reference_" + tag + ".safetensors");
    const lora::AdapterConfig ac = lora::read_adapter_config(adapter);
    EXPECT_EQ(ac.rslora, std::string(tag) == "rslora");
    auto m = load(dir(), lora::lora_spec_of(ac), at::kFloat);
    lora::load_adapter(adapter, m->layout(), m->trainable_flats());
    const at::Tensor ids = ref(reff, "input_ids"), labels = ref(reff, "labels");
    const at::Tensor want = ref(reff, "logits");
    EXPECT_LE(max_abs(model::forward_logits(m->layout(), *m, ids) - want) / max_abs(want), 1e-5);
    const double loss = loss_and_grads(*m, ids, labels);
    EXPECT_NEAR(loss, ref(reff, "loss").item<double>(), 1e-6 * std::abs(loss) + 1e-7);
    int checked = 0;
    const auto& layout = m->layout();
    for (size_t u = 0; u < layout.units.size(); ++u)
      for (const auto& s : layout.units[u].trainable) {
        std::string peft = s.name;  // peft's in-memory names carry the adapter name
        peft.replace(peft.rfind(".weight"), 7, ".default.weight");
        const at::Tensor want_g = ref(reff, "grad." + peft);
        const at::Tensor got = m->grad_flats()[u].narrow(0, s.offset, s.numel).view(s.shape);
        EXPECT_LE(max_abs(got - want_g) / std::max(max_abs(want_g), 1e-12), 1e-5) << s.name;
        ++checked;
      }
    EXPECT_EQ(checked, 28);  // 2 layers x 7 projections x (A, B)
  }
}

TEST_P(Qwen3Reference, ExportedAdapterRereadsBitIdentically) {
  const std::string adapter = dir() + "/lora";
  const lora::AdapterConfig ac = lora::read_adapter_config(adapter);
  auto m = load(dir(), lora::lora_spec_of(ac), at::kFloat);
  lora::load_adapter(adapter, m->layout(), m->trainable_flats());
  const fs::path out = fs::temp_directory_path() / ("lorabench_qwen3_adapter_" + std::to_string(::getpid()));
  lora::save_adapter(out.string(), m->layout(), m->trainable_flats(), "qwen3-tiny");
  lbtest::expect_same_tensors(adapter + "/adapter_model.safetensors", (out / "adapter_model.safetensors").string());
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Configs, Qwen3Reference, ::testing::Values("qwen3-tiny", "qwen3-tiny-untied"),
                         [](const auto& info) { return info.param == "qwen3-tiny" ? "TiedHeadDim32" : "Untied"; });

// Full fine-tuning: every parameter's gradient against transformers' autograd, the q/k norms' included.
TEST(Qwen3Reference, FullFineTuningGradientsMatchTransformers) {
  const std::string dir = kFixtures + "/qwen3-tiny";
  io::SafeTensorsFile reff(dir + "/reference.safetensors"), full(dir + "/reference_full.safetensors");
  auto m = load(dir, no_lora(), at::kFloat);
  const double loss = loss_and_grads(*m, ref(reff, "input_ids"), ref(reff, "labels"));
  EXPECT_NEAR(loss, ref(full, "loss").item<double>(), 1e-6);
  int checked = 0, norms = 0;
  const auto& layout = m->layout();
  for (size_t u = 0; u < layout.units.size(); ++u)
    for (const auto& s : layout.units[u].trainable) {
      const at::Tensor want_g = ref(full, "grad." + s.name);
      const at::Tensor got = m->grad_flats()[u].narrow(0, s.offset, s.numel).view(s.shape);
      EXPECT_LE(max_abs(got - want_g) / std::max(max_abs(want_g), 1e-12), 1e-5) << s.name;
      ++checked;
      if (s.name.find("q_norm") != std::string::npos || s.name.find("k_norm") != std::string::npos) ++norms;
    }
  EXPECT_EQ(norms, 4);  // 2 layers x (q_norm, k_norm)
  EXPECT_EQ(checked, 1 + 2 * 11 + 1);  // embedding (tied), 11 tensors per layer, final norm
}
