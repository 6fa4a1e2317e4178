// train/run_specs.hpp: the configuration becomes the layers' values in one place, and the batch geometry
// is the one holder of micro-batch, accumulation, world size and sequence length.
#include <gtest/gtest.h>

#include "lorabench/config/options.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/data/sft_source.hpp"
#include "lorabench/train/run_specs.hpp"

using namespace lorabench;

namespace {
// check_config_fits_model's message, "" when the configuration fits the model.
std::string error_of(const RunConfig& c) {
  try {
    train::check_config_fits_model(c, train::model_shape_of(c));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(RunSpecs, SftSpecFromTheConfiguration) {
  RunConfig c = default_run_config();
  c.data.format = "chat";
  c.data.path = "x.jsonl";
  c.data.seq_len = 99;
  c.data.pack = true;
  c.data.on_bad_record = "skip";
  c.run.seed = 42;
  c.train.micro_batch = 3;
  c.train.grad_accum = 5;
  const data::SftSpec s = train::sft_spec_of(c, 4);
  EXPECT_EQ(s.format, data::SftFormat::kChat);
  EXPECT_EQ(s.path, "x.jsonl");
  EXPECT_TRUE(s.pack);
  EXPECT_EQ(s.on_bad_record, data::BadRecordPolicy::kSkip);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.geo.seq_len, 99);
  EXPECT_EQ(s.geo.micro_batch, 3);
  EXPECT_EQ(s.geo.grad_accum, 5);
  EXPECT_EQ(s.geo.world_size, 4);
  EXPECT_EQ(s.tokenizer_path, data::resolve_tokenizer_path(c.data.tokenizer, c.model.path));
  c.data.tokenizer = "my/tokenizer.json";
  EXPECT_EQ(train::sft_spec_of(c, 4).tokenizer_path, "my/tokenizer.json");
}

TEST(RunSpecs, OneGeometryForSourcesAndCounts) {
  RunConfig c = default_run_config();
  c.data.seq_len = 48;
  c.train.micro_batch = 2;
  c.train.grad_accum = 3;
  const data::BatchGeometry g = train::batch_geometry_of(c, 4);
  EXPECT_EQ(g.global_batch(), 2 * 3 * 4);
  EXPECT_EQ(g.tokens_per_step(), 2 * 3 * 4 * 48);
  EXPECT_EQ(g.micro_batch_tokens(), 2 * 48);
  const data::SyntheticSpec ss = train::synthetic_spec_of(c, 1000, 4);
  EXPECT_EQ(ss.vocab_size, 1000);
  EXPECT_EQ(ss.geo.global_batch(), g.global_batch());
  // The source draws what the geometry says: micro-batch rows of seq_len tokens.
  const data::Batch b = data::make_synthetic_source(ss)->micro_batch(0, 2, 3);
  EXPECT_EQ(b.batch, 2);
  EXPECT_EQ(b.seq, 48);
}

// data.seq_len and lora.r are bounded by the model: the error names the key, where it was set and the
// model's numbers; at the bound itself the run is accepted.
TEST(RunSpecs, KeysTheModelBounds) {
  RunConfig c = parse_run_config("in.ini", "[model]\npreset = tiny\n[lora]\nr = 32\ntargets = q,k\n",
                                 {"data.seq_len=32768"});
  EXPECT_EQ(error_of(c), "");  // tiny: max_position_embeddings 32768; k_proj 64 x 32
  c = parse_run_config("in.ini", "[model]\npreset = tiny\n[lora]\nr = 33\ntargets = q,k\n", {"data.seq_len=32769"});
  const std::string e = error_of(c);
  EXPECT_NE(e.find("--set: data.seq_len: 32769 is above the model's max_position_embeddings = 32768 (the preset tiny)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("in.ini:4: lora.r: 33 is above the smaller dimension of the targeted k projection (64 in x 32 out"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("targeted q projection"), std::string::npos) << e;  // q_proj is 64 x 64
  c.lora.enabled = false;
  c.data.seq_len = 64;
  EXPECT_EQ(error_of(c), "");  // no LoRA, no rank to bound
  // A Qwen3 model takes instruction data (its own template and tokenizer: ChatTemplateAndTokenizerFollowTheFamily).
  c = parse_run_config("in.ini", "[model]\npreset = qwen3-tiny\n[data]\nformat = chat\npath = x.jsonl\n", {});
  EXPECT_EQ(error_of(c), "");
  c.data.format = "synthetic";
  EXPECT_EQ(error_of(c), "");
}

// Qwen3.5: a LoRA target that no layer has is an error (not fewer adapters); instruction data needs Qwen3.5's own
// tokenizer and a template chosen on purpose.
TEST(RunSpecs, LoraTargetsNoLayerHasAreRefusedAndQwen3_5DataNeedsItsTokenizer) {
  RunConfig c = parse_run_config("in.ini", "[model]\npreset = qwen3.5-tiny\n[lora]\nr = 4\n"
                                 "targets = q,k,v,o,gate,up,down,in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,out_proj\n",
                                 {});
  EXPECT_EQ(error_of(c), "");
  c = parse_run_config("in.ini", "[model]\npreset = tiny\n[lora]\ntargets = q,in_proj_qkv\n", {});
  std::string e = error_of(c);
  EXPECT_NE(e.find("in.ini:4: lora.targets: names in_proj_qkv, which no layer of the preset tiny (qwen2, 2 layers) has"),
            std::string::npos)
      << e;
  c = parse_run_config("in.ini", "[model]\npreset = qwen3.5-tiny\n[data]\nformat = chat\npath = x.jsonl\n", {});
  e = error_of(c);
  EXPECT_NE(e.find("data.format: chat data for the preset qwen3.5-tiny needs Qwen3.5's tokenizer"), std::string::npos)
      << e;
  EXPECT_NE(e.find("data.chat_template: auto has no template"), std::string::npos) << e;
  c.data.tokenizer = "my/tokenizer.json";
  c.data.chat_template = "qwen3";
  EXPECT_EQ(error_of(c), "");
}

// data.chat_template = auto and the bundled tokenizer follow the model family; an explicit template, a
// data.tokenizer and model.path's tokenizer are the user's.
TEST(RunSpecs, ChatTemplateAndTokenizerFollowTheFamily) {
  auto c = parse_run_config("in.ini", "[model]\npreset = qwen3-tiny\n[data]\nformat = chat\npath = x.jsonl\n", {});
  data::SftSpec s = train::sft_spec_of(c, 1);
  EXPECT_EQ(s.chat.tmpl, data::ChatTemplate::kQwen3);
  EXPECT_TRUE(s.chat.enable_thinking);
  EXPECT_EQ(s.tokenizer_path, data::resolve_tokenizer_path("", "", "qwen3"));
  EXPECT_NE(s.tokenizer_path.find("/qwen3/tokenizer.json"), std::string::npos) << s.tokenizer_path;
  c.data.enable_thinking = false;
  EXPECT_FALSE(train::sft_spec_of(c, 1).chat.enable_thinking);
  c.data.chat_template = "qwen2.5";
  EXPECT_EQ(train::sft_spec_of(c, 1).chat.tmpl, data::ChatTemplate::kQwen25);
  c.data.tokenizer = "my/tokenizer.json";
  EXPECT_EQ(train::tokenizer_path_of(c), "my/tokenizer.json");

  c = parse_run_config("in.ini", "[model]\npreset = tiny\n[data]\nformat = chat\npath = x.jsonl\n", {});
  s = train::sft_spec_of(c, 1);
  EXPECT_EQ(s.chat.tmpl, data::ChatTemplate::kQwen25);
  EXPECT_NE(s.tokenizer_path.find("/qwen2.5/tokenizer.json"), std::string::npos) << s.tokenizer_path;
  c.data.chat_template = "qwen3";
  EXPECT_EQ(train::chat_options_of(c).tmpl, data::ChatTemplate::kQwen3);
  EXPECT_THROW(parse_run_config("in.ini", "[data]\nchat_template = qwen4\n", {}), ConfigError);
}
