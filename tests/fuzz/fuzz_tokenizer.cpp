// tokenizer.json (data.tokenizer, <model.path>/tokenizer.json): Tokenizer::from_json, then encode and
// decode a few texts (ASCII, CJK, special tokens, whitespace runs) with what was accepted
// (tokenizer_oracle.hpp).
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "lorabench/data/tokenizer.hpp"
#include "tokenizer_oracle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string origin = "fuzz/tokenizer.json";
  lbfuzz::expect_clean(origin, [&] {
    const lorabench::data::Tokenizer tok = lorabench::data::Tokenizer::from_json(text, origin);
    const std::string wrong = lbfuzz::tokenizer_oracle(tok);
    if (!wrong.empty()) lbfuzz::finding(wrong);
    (void)tok.token_id("<|im_end|>");
    (void)tok.vocab_size();
  });
  return 0;
}
