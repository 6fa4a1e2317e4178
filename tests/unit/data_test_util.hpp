// Shared by the data-layer tests: the real Qwen2.5 tokenizer (loaded once per test binary) and temporary
// files. A missing tokenizer is a test FAILURE that says how to get it, never a skip.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "lorabench/core/error.hpp"
#include "lorabench/data/sft_source.hpp"
#include "lorabench/data/tokenizer.hpp"

namespace lbtest {

// The tokenizer at the build's default path (third_party/qwen2.5/tokenizer.json); nullptr when it cannot
// be loaded, with the reason in *why.
inline std::shared_ptr<const lorabench::data::Tokenizer> qwen_tokenizer(std::string* why) {
  static std::shared_ptr<const lorabench::data::Tokenizer> tok;
  static std::string error;
  static bool tried = false;
  if (!tried) {
    tried = true;
    try {
      tok = std::make_shared<const lorabench::data::Tokenizer>(
          lorabench::data::Tokenizer::from_file(lorabench::data::default_tokenizer_path()));
    } catch (const lorabench::Error& e) {
      error = e.what();
    }
  }
  *why = error;
  return tok;
}

// A temporary file holding `content`, removed at scope exit.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& content) {
    char dir[] = "/tmp/lorabench_data_test_XXXXXX";
    dir_ = mkdtemp(dir);
    path_ = dir_ + "/" + name;
    std::ofstream(path_, std::ios::binary) << content;
  }
  ~TempFile() {
    std::remove(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

}  // namespace lbtest

// Declares `tok` (std::shared_ptr<const Tokenizer>) or fails the test with the reason and the fix.
#define LBTEST_QWEN_TOKENIZER(tok)                                                                       \
  std::string tok##_why_;                                                                                \
  auto tok = ::lbtest::qwen_tokenizer(&tok##_why_);                                                      \
  ASSERT_TRUE(tok != nullptr) << "the Qwen2.5 tokenizer is required: " << tok##_why_                     \
                              << "\nrun scripts/install-deps.sh (it fetches third_party/qwen2.5/tokenizer.json)"
