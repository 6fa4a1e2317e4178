// The tokenizer the data targets encode with: a cut-down Qwen2.5 tokenizer.json (the byte alphabet, 120
// merges, the Qwen special tokens; corpus/tokenizer/qwen2.5-tiny.json), loaded once per process.
#pragma once

#include <memory>

#include "lorabench/data/tokenizer.hpp"

namespace lbfuzz {

inline std::shared_ptr<const lorabench::data::Tokenizer> tiny_tokenizer() {
  static const auto tok = std::make_shared<const lorabench::data::Tokenizer>(
      lorabench::data::Tokenizer::from_file(LORABENCH_FUZZ_TOKENIZER));
  return tok;
}

}  // namespace lbfuzz
