// tokenizer.json (data.tokenizer, <model.path>/tokenizer.json): Tokenizer::from_json, then encode and
// decode a few texts (ASCII, CJK, special tokens, whitespace runs) with what was accepted.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "lorabench/data/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string origin = "fuzz/tokenizer.json";
  lbfuzz::expect_clean(origin, [&] {
    const lorabench::data::Tokenizer tok = lorabench::data::Tokenizer::from_json(text, origin);
    for (const char* s : {"Hello, world! It's 2024.", "<|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd<|im_end|>\n",
                          "  a\t\n\n  b   ", "e\xcc\x81"}) {
      std::vector<size_t> offsets;
      const std::vector<lorabench::data::TokenId> ids = tok.encode(s, &offsets);
      if (offsets.size() != ids.size()) lbfuzz::finding("encode: offsets and ids differ in length");
      if (tok.decode(ids) != tok.normalize(s)) lbfuzz::finding("decode(encode(x)) != normalize(x)");
    }
    (void)tok.token_id("<|im_end|>");
    (void)tok.vocab_size();
  });
  return 0;
}
