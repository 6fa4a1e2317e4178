// Every input that was once a fuzzer finding (tests/fuzz/corpus/<target>/regress-*), replayed through the
// same reader in the ordinary build: it must be refused with one of lorabench's errors naming the file, or
// read. The fuzz label replays them under the sanitizers as well; this keeps them in `ctest -L unit`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "h5_input.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/data/chat_template.hpp"
#include "lorabench/data/sft_dataset.hpp"
#include "lorabench/data/tokenizer.hpp"
#include "lorabench/io/checkpoint.hpp"
#include "lorabench/io/safetensors.hpp"
#include "lorabench/lora/adapter_config.hpp"
#include "lorabench/model/shape.hpp"
#include "report_data.hpp"
#include "tokenizer_oracle.hpp"

namespace fs = std::filesystem;
using namespace lorabench;

namespace {

const fs::path kCorpus = fs::path(LORABENCH_SOURCE_DIR) / "tests/fuzz/corpus";

std::vector<fs::path> regressions(const std::string& target) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kCorpus / target))
    if (e.path().filename().string().rfind("regress-", 0) == 0) out.push_back(e.path());
  return out;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The input as the file `name` in a fresh directory; returns its path.
std::string as_file(const std::string& data, const std::string& name) {
  const fs::path p = lbfuzz::temp_dir() / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc) << data;
  return p.string();
}

void expect_refused_or_read(const std::string& path, const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  // any other exception fails the test (gtest reports it)
}

}  // namespace

TEST(FuzzRegressions, SafeTensors) {
  for (const auto& f : regressions("safetensors")) {
    SCOPED_TRACE(f.filename().string());
    const std::string p = as_file(bytes_of(f), "model.safetensors");
    expect_refused_or_read(p, [&] { io::SafeTensorsFile st(p); });
  }
}

TEST(FuzzRegressions, HfConfig) {
  for (const auto& f : regressions("hf_config")) {
    SCOPED_TRACE(f.filename().string());
    const std::string p = as_file(bytes_of(f), "config.json");
    bool refused = false;
    try {
      (void)model::load_hf_config(p);
    } catch (const IoError& e) {
      refused = true;
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
    EXPECT_TRUE(refused) << "every hf_config regression is a file lorabench must refuse";
  }
}

TEST(FuzzRegressions, AdapterConfig) {
  for (const auto& f : regressions("adapter_config")) {
    SCOPED_TRACE(f.filename().string());
    const std::string p = as_file(bytes_of(f), "adapter_config.json");
    expect_refused_or_read(p, [&] { (void)lora::read_adapter_config(lbfuzz::temp_dir().string()); });
  }
}

TEST(FuzzRegressions, Tokenizer) {
  for (const auto& f : regressions("tokenizer")) {
    SCOPED_TRACE(f.filename().string());
    // What it accepts must pass fuzz_tokenizer's round trip as well (a finding of that oracle is a
    // tokenizer.json that reads fine).
    expect_refused_or_read("regress-tokenizer.json", [&] {
      const data::Tokenizer tok = data::Tokenizer::from_json(bytes_of(f), "regress-tokenizer.json");
      EXPECT_EQ(lbfuzz::tokenizer_oracle(tok), "");
    });
  }
}

TEST(FuzzRegressions, SftData) {
  for (const auto& f : regressions("sft_data")) {
    SCOPED_TRACE(f.filename().string());
    const std::string in = bytes_of(f);
    const std::string p = as_file(in.substr(1), "train.jsonl");  // byte 0 is the fuzz target's mode byte
    for (auto policy : {data::BadRecordPolicy::kError, data::BadRecordPolicy::kSkip})
      expect_refused_or_read(p, [&] { (void)data::load_sft_records(p, data::SftFormat::kAuto, policy); });
  }
}

TEST(FuzzRegressions, Chat) {
  for (const auto& f : regressions("chat")) {
    SCOPED_TRACE(f.filename().string());
    expect_refused_or_read("", [&] { (void)data::parse_chat_json(bytes_of(f)); });
  }
}

TEST(FuzzRegressions, Checkpoint) {
  for (const auto& f : regressions("checkpoint")) {
    SCOPED_TRACE(f.filename().string());
    const std::string in = bytes_of(f);
    const std::string p = lbfuzz::h5_input("step_00000002.h5", (kCorpus / "checkpoint/step_00000002.h5").string(),
                                           reinterpret_cast<const uint8_t*>(in.data()), in.size());
    ASSERT_FALSE(p.empty());
    expect_refused_or_read(p, [&] { (void)io::read_checkpoint(p, true); });
  }
}

TEST(FuzzRegressions, RunFile) {
  for (const auto& f : regressions("run_file")) {
    SCOPED_TRACE(f.filename().string());
    const std::string in = bytes_of(f);
    const std::string p = lbfuzz::h5_input("run.h5", (kCorpus / "run_file/run.h5").string(),
                                           reinterpret_cast<const uint8_t*>(in.data()), in.size());
    ASSERT_FALSE(p.empty());
    expect_refused_or_read(p, [&] { (void)report::load_run(p, p); });
  }
}
