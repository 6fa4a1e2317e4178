// Shared by the data-layer tests: the real Qwen2.5 and Qwen3 tokenizers (loaded once per test binary) and temporary
// files. A missing tokenizer is a test FAILURE that says how to get it, never a skip.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "lorabench/core/error.hpp"
#include "lorabench/data/sft_source.hpp"
#include "lorabench/data/tokenizer.hpp"

namespace lbtest {

// The bundled tokenizer `name` at the build's default path (third_party/<name>/tokenizer.json: qwen2.5 or
// qwen3), loaded once; nullptr when it cannot be loaded, with the reason in *why.
inline std::shared_ptr<const lorabench::data::Tokenizer> qwen_tokenizer(std::string* why,
                                                                        const std::string& name = "qwen2.5") {
  struct Loaded {
    std::shared_ptr<const lorabench::data::Tokenizer> tok;
    std::string error;
  };
  static std::map<std::string, Loaded> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    Loaded l;
    try {
      l.tok = std::make_shared<const lorabench::data::Tokenizer>(
          lorabench::data::Tokenizer::from_file(lorabench::data::default_tokenizer_path(name)));
    } catch (const lorabench::Error& e) {
      l.error = e.what();
    }
    it = cache.emplace(name, std::move(l)).first;
  }
  *why = it->second.error;
  return it->second.tok;
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
#define LBTEST_BUNDLED_TOKENIZER(tok, name)                                                              \
  std::string tok##_why_;                                                                                \
  auto tok = ::lbtest::qwen_tokenizer(&tok##_why_, name);                                                \
  ASSERT_TRUE(tok != nullptr) << "the " name " tokenizer is required: " << tok##_why_                     \
                              << "\nrun scripts/install-deps.sh (it fetches third_party/" name "/tokenizer.json)"
#define LBTEST_QWEN_TOKENIZER(tok) LBTEST_BUNDLED_TOKENIZER(tok, "qwen2.5")
#define LBTEST_QWEN3_TOKENIZER(tok) LBTEST_BUNDLED_TOKENIZER(tok, "qwen3")
