// The adapter's base model name and configuration checks (lorabench/lora/adapter.hpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lorabench/lora/adapter.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace lorabench;

using lbtest::TempDir;

TEST(AdapterConfig, BaseModelIsWhatPeftCanFind) {
  TempDir t;
  // A Hugging Face cache snapshot: the hub id, whatever config.json says.
  const fs::path cached = t.path / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / "7ae557604adf67be";
  fs::create_directories(cached);
  std::ofstream(cached / "config.json") << R"({"_name_or_path": "/tmp/elsewhere"})";
  EXPECT_EQ(lora::base_model_name(cached.string(), "qwen2.5-0.5b"), "Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(lora::base_model_name(cached.string() + "/", "qwen2.5-0.5b"), "Qwen/Qwen2.5-0.5B-Instruct");
  // A snapshot elsewhere with _name_or_path: that name.
  const fs::path named = t.path / "my-copy";
  fs::create_directories(named);
  std::ofstream(named / "config.json") << R"({"_name_or_path": "Qwen/Qwen2.5-1.5B", "vocab_size": 10})";
  EXPECT_EQ(lora::base_model_name(named.string(), "qwen2.5-0.5b"), "Qwen/Qwen2.5-1.5B");
  // Without one (or with an empty one): the directory's absolute path.
  const fs::path plain = t.path / "plain";
  fs::create_directories(plain);
  std::ofstream(plain / "config.json") << R"({"_name_or_path": "", "vocab_size": 10})";
  EXPECT_EQ(lora::base_model_name(plain.string(), "qwen2.5-0.5b"), plain.string());
  // A random init of a preset has no base to find: the preset.
  EXPECT_EQ(lora::base_model_name("", "qwen2.5-0.5b"), "qwen2.5-0.5b");
}

TEST(AdapterConfig, MismatchesNameEveryField) {
  lora::AdapterConfig a;
  a.r = 8;
  a.alpha = 16;
  a.rslora = true;
  a.targets = {"v", "q"};
  const model::LoraSpec same = model::make_lora_spec(true, 8, 16, 0.1, true, {"q", "v"});
  EXPECT_TRUE(lora::adapter_mismatches(a, same).empty());  // target order and dropout do not matter
  const model::LoraSpec other = model::make_lora_spec(true, 16, 32, 0.0, false, {"q", "k", "v"});
  const auto d = lora::adapter_mismatches(a, other);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0], "r: adapter 8, lora.r 16");
  EXPECT_EQ(d[1], "lora_alpha: adapter 16, lora.alpha 32");
  EXPECT_EQ(d[2], "use_rslora: adapter true, lora.rslora false");
  EXPECT_EQ(d[3], "target_modules: adapter q,v, lora.targets k,q,v");
}

TEST(AdapterConfig, WrittenConfigReadsBack) {
  TempDir t;
  lora::AdapterConfig a;
  a.r = 4;
  a.alpha = 8;
  a.dropout = 0.05;
  a.targets = {"q", "k", "v", "o", "gate", "up", "down"};
  a.base_model = "Qwen/Qwen2.5-0.5B-Instruct";
  lora::write_adapter_config(t.path.string(), a);
  const lora::AdapterConfig b = lora::read_adapter_config(t.path.string());
  EXPECT_EQ(b.r, 4);
  EXPECT_EQ(b.alpha, 8);
  EXPECT_DOUBLE_EQ(b.dropout, 0.05);
  EXPECT_EQ(b.targets, a.targets);
  EXPECT_EQ(b.base_model, a.base_model);
}
