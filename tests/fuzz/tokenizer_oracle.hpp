// What fuzz_tokenizer checks of a tokenizer that from_json accepted; shared with the unit build's replay
// of the regression inputs (tests/unit/test_fuzz_regressions.cpp), so a regress-* input that once broke
// the round trip is checked there too, not only read.
#pragma once

#include <string>
#include <vector>

#include "lorabench/data/tokenizer.hpp"

namespace lbfuzz {

// ASCII, the chat markers with CJK, whitespace runs, a decomposed character (NFC changes it).
inline const std::vector<std::string>& tokenizer_texts() {
  static const std::vector<std::string> texts = {"Hello, world! It's 2024.",
                                                 "<|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd<|im_end|>\n",
                                                 "  a\t\n\n  b   ", "e\xcc\x81"};
  return texts;
}

// Encodes and decodes each text: "" when all is well, else what went wrong (the finding).
inline std::string tokenizer_oracle(const lorabench::data::Tokenizer& tok) {
  for (const std::string& s : tokenizer_texts()) {
    std::vector<size_t> offsets;
    const std::vector<lorabench::data::TokenId> ids = tok.encode(s, &offsets);
    if (offsets.size() != ids.size()) return "encode: offsets and ids differ in length";
    if (tok.decode(ids) != tok.normalize(s)) return "decode(encode(x)) != normalize(x)";
  }
  return "";
}

}  // namespace lbfuzz
