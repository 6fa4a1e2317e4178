// Qwen3.5's text model (hybrid Gated DeltaNet and gated full-attention layers) against transformers + peft:
// fixtures made by tests/fixtures/make_qwen3_5.py (scripts/make-fixtures.sh qwen3.5) from random-init tiny
// configs, at lengths shorter than a chunk of the delta rule, exactly one, and not a multiple of it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "lorabench/core/error.hpp"
#include "lorabench/io/safetensors.hpp"
#include "lorabench/lora/adapter.hpp"
#include "lorabench/lora/adapter_config.hpp"
#include "lorabench/model/dense.hpp"
#include "lorabench/model/step.hpp"
#include "lorabench/model/weights.hpp"
#include "safetensors_test_util.hpp"
#include "snapshot_test_util.hpp"

using namespace lorabench;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = lbtest::fixtures();
constexpr int kLengths[] = {23, 64, 150};

std::string T(int n) { return "T" + std::to_string(n) + "."; }

using lbtest::load;
using lbtest::loss_and_grads;
using lbtest::max_abs;
using lbtest::no_lora;
using lbtest::ref;

class Qwen3_5Reference : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return kFixtures + "/" + GetParam(); }
};

}  // namespace

TEST(Qwen3_5Shape, ConfigJsonGivesTheLayerMixAndTheFamilysDifferences) {
  const model::ModelShape s = model::load_hf_config(kFixtures + "/qwen3.5-tiny/config.json");
  EXPECT_EQ(s.family, "qwen3_5");
  ASSERT_EQ(s.linear.size(), 4u);
  EXPECT_TRUE(s.is_linear(0) && s.is_linear(1) && s.is_linear(2));
  EXPECT_FALSE(s.is_linear(3));
  EXPECT_EQ(s.layer_mix(), "3 linear-attention + 1 full-attention layers");
  EXPECT_TRUE(s.zero_centred_norm && s.attn_output_gate && s.qk_norm && !s.qkv_bias);
  EXPECT_EQ(s.rope_dim(), 8);  // 32 * 0.25
  EXPECT_EQ(s.q_proj_dim(), 256);
  EXPECT_EQ(s.lin_conv_dim(), 2 * 2 * 16 + 4 * 16);
  EXPECT_EQ(s.lin_in_dim(), 128 + 64 + 2 * 4);
  EXPECT_EQ(s.conv_kernel, 4);
  // The parameter count is the snapshot's.
  io::SafeTensorsFile f(kFixtures + "/qwen3.5-tiny/model.safetensors");
  int64_t n = 0;
  for (const auto& t : f.tensors()) {
    int64_t e = 1;
    for (auto d : t.shape) e *= d;
    n += e;
  }
  EXPECT_EQ(s.total_params(), n);
  EXPECT_EQ(model::build_layout(s, no_lora()).compute_params(), n);
  // The public sizes' presets: Qwen3.5-0.8B's text model counted by hand in test_metrics_flops (752,393,024).
  EXPECT_EQ(model::preset_shape("qwen3.5-0.8b").total_params(), 752393024);
  EXPECT_EQ(model::preset_shape("qwen3.5-0.8b").layer_mix(), "18 linear-attention + 6 full-attention layers");
  EXPECT_FALSE(model::preset_shape("qwen3.5-9b").tie_embeddings);
  const model::ModelShape u = model::load_hf_config(kFixtures + "/qwen3.5-tiny-untied/config.json");
  EXPECT_FALSE(u.tie_embeddings);
  EXPECT_FALSE(u.is_linear(0));
  EXPECT_TRUE(u.is_linear(1));
}

TEST(Qwen3_5Shape, TheMultimodalConfigIsReadThroughItsTextConfigAndBadKeysAreNamed) {
  const fs::path dir = fs::temp_directory_path() / ("lorabench_qwen3_5_cfg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& text) {
    std::ofstream(dir / "config.json") << text;
    return (dir / "config.json").string();
  };
  const std::string text_cfg = R"({"model_type": "qwen3_5_text", "vocab_size": 128, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16, "rope_parameters": {"rope_theta": 10000000, "partial_rotary_factor": 0.25,
    "mrope_section": [11, 11, 10], "mrope_interleaved": true, "rope_type": "default"}})";
  // model_type qwen3_5 (Qwen3_5ForConditionalGeneration's snapshot): tie_word_embeddings at the top.
  const model::ModelShape s = model::load_hf_config(
      write(R"({"model_type": "qwen3_5", "tie_word_embeddings": true, "text_config": )" + text_cfg + "}"));
  EXPECT_EQ(s.family, "qwen3_5");
  EXPECT_TRUE(s.tie_embeddings);
  EXPECT_EQ(s.rope_theta, 1e7);
  EXPECT_EQ(s.layer_mix(), "6 linear-attention + 2 full-attention layers");  // full_attention_interval 4
  EXPECT_TRUE(s.is_linear(0) && !s.is_linear(3) && !s.is_linear(7));
  // The JSON key is named with its place in the file.
  std::string bad = text_cfg;
  bad.replace(bad.find("\"linear_num_value_heads\": 4"), 27, "\"linear_num_value_heads\": 3");
  try {
    model::load_hf_config(write(R"({"model_type": "qwen3_5", "text_config": )" + bad + "}"));
    ADD_FAILURE() << "3 value heads for 2 key heads accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("text_config.linear_num_value_heads"), std::string::npos) << e.what();
  }
  std::string types = text_cfg;
  types.replace(types.find("\"vocab_size\""), 0, R"("layer_types": ["linear_attention", "sliding_attention"], )");
  EXPECT_THROW(model::load_hf_config(write(types)), IoError);  // two entries for eight layers, an unknown kind
  // Qwen3 has no linear layers.
  std::string q3 = R"({"model_type": "qwen3", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
    "num_hidden_layers": 1, "num_attention_heads": 1, "layer_types": ["linear_attention"]})";
  EXPECT_THROW(model::load_hf_config(write(q3)), IoError);
  fs::remove_all(dir);
}

TEST(Qwen3_5Shape, LoraTargetsTheLinearProjectionsByPeftsNamesAndRefusesMissingOnes) {
  model::ModelShape s = model::preset_shape("qwen3.5-tiny");
  model::LoraSpec lora = model::make_lora_spec(true, 4, 8, 0, false, {"in_proj_qkv", "out_proj", "q", "down"});
  const model::ModelLayout m = model::build_layout(s, lora);
  int linear_adapters = 0, attn_adapters = 0;
  for (const auto& u : m.units)
    for (const auto& t : u.trainable) {
      linear_adapters += t.name.find("linear_attn.") != std::string::npos;
      attn_adapters += t.name.find("self_attn.") != std::string::npos;
    }
  EXPECT_EQ(linear_adapters, 3 * 2 * 2);  // 3 linear layers x (in_proj_qkv, out_proj) x (A, B)
  EXPECT_EQ(attn_adapters, 1 * 2);        // 1 full layer x q x (A, B)
  EXPECT_EQ(std::string(model::proj_peft_name(model::Proj::kLinQkv)), "in_proj_qkv");
  // A layer has the adapters of its own kind's projections only (a run's configuration that names a projection
  // no layer has is refused by train::check_config_fits_model, RunSpecs.LoraTargetsNoLayerHasAreRefused).
  const model::ModelLayout q2 =
      model::build_layout(model::preset_shape("tiny"), model::make_lora_spec(true, 4, 8, 0, false, {"q", "in_proj_z"}));
  for (const auto& u : q2.units)
    for (const auto& t : u.trainable) EXPECT_EQ(t.name.find("in_proj_z"), std::string::npos) << t.name;
}

TEST_P(Qwen3_5Reference, LogitsHiddenStatesAndLossMatchTransformersAtEveryChunkBoundary) {
  io::SafeTensorsFile reff(dir() + "/reference.safetensors");
  auto m = load(dir(), no_lora(), at::kFloat);
  for (int n : kLengths) {
    SCOPED_TRACE("T = " + std::to_string(n));
    const at::Tensor ids = ref(reff, T(n) + "input_ids"), labels = ref(reff, T(n) + "labels");
    std::vector<at::Tensor> hidden;
    const at::Tensor logits = model::forward_logits(m->layout(), *m, ids, &hidden);
    const at::Tensor want = ref(reff, T(n) + "logits");
    ASSERT_EQ(logits.sizes(), want.sizes());
    EXPECT_LE(max_abs(logits - want), 1e-5) << "logits differ from transformers";
    ASSERT_EQ(int64_t(hidden.size()), m->layout().shape.layers + 1);
    for (size_t i = 0; i < hidden.size(); ++i)
      EXPECT_LE(max_abs(hidden[i] - ref(reff, T(n) + "hidden_states_" + std::to_string(i))), 1e-5)
          << "hidden_states_" << i;
    EXPECT_NEAR(loss_and_grads(*m, ids, labels), ref(reff, T(n) + "loss").item<double>(), 1e-6);
  }
}

TEST_P(Qwen3_5Reference, Bf16LogitsAndLossMatchTransformersInBf16) {
  io::SafeTensorsFile reff(dir() + "/reference.safetensors"), bf(dir() + "/reference_bf16.safetensors");
  auto m = load(dir(), no_lora(), at::kBFloat16);
  for (int n : kLengths) {
    SCOPED_TRACE("T = " + std::to_string(n));
    const at::Tensor ids = ref(reff, T(n) + "input_ids"), labels = ref(reff, T(n) + "labels");
    const at::Tensor logits = model::forward_logits(m->layout(), *m, ids).to(at::kFloat);
    const at::Tensor want = ref(bf, T(n) + "logits");
    const at::Tensor exact = ref(reff, T(n) + "logits");
    // transformers' own bf16 logits differ from its fp32 ones by 2-5% of the largest logit here (1% on the Qwen3
    // fixtures: more roundings per layer), and the logits are 7-14 times as many as the Qwen2.5 fixture's, so
    // the largest deviation is a tail statistic: the Qwen2.5 tests' 2e-2 bounds the RMS deviation from
    // transformers' bf16, the largest one gets twice that, and lorabench's bf16 must be as accurate as
    // transformers' against the fp32 logits.
    auto rms = [](const at::Tensor& t) { return t.square().mean().sqrt().item<double>(); };
    EXPECT_LE(rms(logits - want) / rms(want), 2e-2);
    EXPECT_LE(max_abs(logits - want) / max_abs(want), 4e-2);
    EXPECT_LE(rms(logits - exact), 1.25 * rms(want - exact));
    const double loss = loss_and_grads(*m, ids, labels), want_loss = ref(bf, T(n) + "loss").item<double>();
    EXPECT_NEAR(loss, want_loss, 2e-2 * std::abs(want_loss));
  }
}

TEST_P(Qwen3_5Reference, LoraLogitsLossAndGradientsMatchPeftOnBothLayerKinds) {
  const std::string adapter = dir() + "/lora";
  io::SafeTensorsFile reff(dir() + "/reference_lora.safetensors");
  const lora::AdapterConfig ac = lora::read_adapter_config(adapter);
  EXPECT_EQ(ac.targets.size(), 12u);
  auto m = load(dir(), lora::lora_spec_of(ac), at::kFloat);
  lora::load_adapter(adapter, m->layout(), m->trainable_flats());
  const at::Tensor ids = ref(reff, "input_ids"), labels = ref(reff, "labels");
  const at::Tensor want = ref(reff, "logits");
  EXPECT_LE(max_abs(model::forward_logits(m->layout(), *m, ids) - want) / max_abs(want), 1e-5);
  const double loss = loss_and_grads(*m, ids, labels);
  EXPECT_NEAR(loss, ref(reff, "loss").item<double>(), 1e-6 * std::abs(loss) + 1e-7);
  int checked = 0, want_checked = 0;
  const auto& layout = m->layout();
  for (int64_t l = 0; l < layout.shape.layers; ++l) want_checked += 2 * (layout.shape.is_linear(l) ? 5 + 3 : 4 + 3);
  for (size_t u = 0; u < layout.units.size(); ++u)
    for (const auto& s : layout.units[u].trainable) {
      std::string peft = s.name;  // peft's in-memory names carry the adapter name
      peft.replace(peft.rfind(".weight"), 7, ".default.weight");
      const at::Tensor want_g = ref(reff, "grad." + peft);
      const at::Tensor got = m->grad_flats()[u].narrow(0, s.offset, s.numel).view(s.shape);
      EXPECT_LE(max_abs(got - want_g) / std::max(max_abs(want_g), 1e-12), 1e-5) << s.name;
      ++checked;
    }
  EXPECT_EQ(checked, want_checked);
}

TEST_P(Qwen3_5Reference, ExportedAdapterRereadsBitIdentically) {
  const std::string adapter = dir() + "/lora";
  const lora::AdapterConfig ac = lora::read_adapter_config(adapter);
  auto m = load(dir(), lora::lora_spec_of(ac), at::kFloat);
  lora::load_adapter(adapter, m->layout(), m->trainable_flats());
  const fs::path out = fs::temp_directory_path() / ("lorabench_qwen3_5_adapter_" + std::to_string(::getpid()));
  lora::save_adapter(out.string(), m->layout(), m->trainable_flats(), GetParam());
  lbtest::expect_same_tensors(adapter + "/adapter_model.safetensors", (out / "adapter_model.safetensors").string());
  const lora::AdapterConfig again = lora::read_adapter_config(out.string());
  EXPECT_EQ(again.targets.size(), 12u);
  fs::remove_all(out);
}

// A hub snapshot of Qwen3.5 is the multimodal model's: config.json's text_config, the text model's tensors under
// model.language_model.*, a vision tower and a multi-token-prediction head beside them. The same weights so
// named give the same logits; the other parts are skipped, and a text tensor that is missing is named.
TEST(Qwen3_5Reference, TheMultimodalSnapshotLoadsItsTextModel) {
  const std::string src = kFixtures + "/qwen3.5-tiny";
  const fs::path dir = fs::temp_directory_path() / ("lorabench_qwen3_5_mm_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ifstream in(src + "/config.json");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir / "config.json") << R"({"model_type": "qwen3_5", "tie_word_embeddings": true, "text_config": )"
                                       << text << R"(, "vision_config": {"model_type": "qwen3_5_vision"}})";
  }
  io::SafeTensorsFile f(src + "/model.safetensors");
  std::vector<at::Tensor> keep;
  std::vector<io::TensorToWrite> out;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    keep.push_back(t.contiguous());
    out.push_back({name, "F32", t.sizes().vec(), keep.back().data_ptr()});
  };
  for (const auto& t : f.tensors()) {
    std::string name = t.name;
    name.replace(0, std::string("model.").size(), "model.language_model.");
    add(name, model::read_tensor(f, t, at::kFloat));
  }
  add("model.visual.blocks.0.norm1.weight", at::ones({8}));
  add("mtp.fc.weight", at::ones({4, 4}));
  io::write_safetensors((dir / "model.safetensors").string(), out, {{"format", "pt"}});

  const model::Snapshot snap(dir.string());
  EXPECT_EQ(snap.skipped(), 2);
  EXPECT_EQ(snap.name_on_disk("model.norm.weight"), "model.language_model.norm.weight");
  io::SafeTensorsFile reff(src + "/reference.safetensors");
  auto m = load(dir.string(), no_lora(), at::kFloat);
  const at::Tensor ids = ref(reff, T(23) + "input_ids");
  EXPECT_LE(max_abs(model::forward_logits(m->layout(), *m, ids) - ref(reff, T(23) + "logits")), 1e-5);
  // Without one text tensor the error names it.
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const io::TensorToWrite& t) { return t.name.find("layers.1.linear_attn.A_log") != std::string::npos; }),
            out.end());
  io::write_safetensors((dir / "model.safetensors").string(), out, {{"format", "pt"}});
  try {
    load(dir.string(), no_lora(), at::kFloat);
    ADD_FAILURE() << "a snapshot without A_log loaded";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor model.layers.1.linear_attn.A_log"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// The merged export (W + scaling B A for every adapted projection of both layer kinds) is a Qwen3_5ForCausalLM
// snapshot that lorabench reads back (config.json with the layer types) and that gives the adapter's logits.
TEST_P(Qwen3_5Reference, MergedExportGivesTheAdaptersLogits) {
  const std::string adapter = dir() + "/lora";
  auto m = load(dir(), lora::lora_spec_of(lora::read_adapter_config(adapter)), at::kFloat);
  lora::load_adapter(adapter, m->layout(), m->trainable_flats());
  const fs::path out = fs::temp_directory_path() / ("lorabench_qwen3_5_merged_" + std::to_string(::getpid()));
  lora::save_merged(out.string(), m->layout(), m->compute_flats(), m->trainable_flats(), at::kFloat);
  const model::ModelShape s = model::load_hf_config((out / "config.json").string());
  EXPECT_EQ(s.layer_mix(), m->layout().shape.layer_mix());
  EXPECT_EQ(s.rope_dim(), m->layout().shape.rope_dim());
  auto merged = load(out.string(), no_lora(), at::kFloat);
  io::SafeTensorsFile reff(dir() + "/reference_lora.safetensors");
  const at::Tensor ids = ref(reff, "input_ids");
  const at::Tensor a = model::forward_logits(m->layout(), *m, ids);
  const at::Tensor b = model::forward_logits(merged->layout(), *merged, ids);
  EXPECT_LE(max_abs(a - b) / max_abs(a), 1e-5);
  EXPECT_GT(max_abs(a - ref(io::SafeTensorsFile(dir() + "/reference.safetensors"), T(150) + "logits")), 1e-3);
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Configs, Qwen3_5Reference, ::testing::Values("qwen3.5-tiny", "qwen3.5-tiny-untied"),
                         [](const auto& info) { return info.param == "qwen3.5-tiny" ? "ThreeLinearOneFull" : "Untied"; });

// Full fine-tuning: every parameter's gradient against transformers' autograd (the convolution, A_log, dt_bias,
// the gated norm, the zero-centred norms and q/k norms included), with and without activation checkpointing.
TEST(Qwen3_5Reference, FullFineTuningGradientsMatchTransformers) {
  const std::string dir = kFixtures + "/qwen3.5-tiny";
  io::SafeTensorsFile reff(dir + "/reference.safetensors"), full(dir + "/reference_full.safetensors");
  auto m = load(dir, no_lora(), at::kFloat);
  for (bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing ? "activation checkpointing" : "all activations kept");
    model::StepOptions opts;
    opts.activation_checkpointing = checkpointing;
    const double loss = loss_and_grads(*m, ref(reff, T(150) + "input_ids"), ref(reff, T(150) + "labels"), opts);
    EXPECT_NEAR(loss, ref(full, "loss").item<double>(), 1e-6);
    int checked = 0, linear_only = 0;
    const auto& layout = m->layout();
    for (size_t u = 0; u < layout.units.size(); ++u)
      for (const auto& s : layout.units[u].trainable) {
        const at::Tensor want_g = ref(full, "grad." + s.name);
        const at::Tensor got = m->grad_flats()[u].narrow(0, s.offset, s.numel).view(s.shape);
        EXPECT_LE(max_abs(got - want_g) / std::max(max_abs(want_g), 1e-12), 1e-5) << s.name;
        ++checked;
        if (s.name.find("A_log") != std::string::npos || s.name.find("dt_bias") != std::string::npos ||
            s.name.find("conv1d") != std::string::npos)
          ++linear_only;
      }
    EXPECT_EQ(linear_only, 3 * 3);
    EXPECT_EQ(checked, 1 + 3 * 14 + 11 + 1);  // embedding (tied), 14 tensors per linear layer, 11 per full, norm
  }
}
