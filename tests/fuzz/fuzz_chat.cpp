// One chat as JSON (`lorabench tokenize --chat` on stdin): parse_chat_json, then the chat template and
// the assistant-only label mask (encode_chat with the tiny Qwen2.5 tokenizer). parse_chat_json's errors
// name no location (its caller adds it), so any lorabench::Error is accepted.
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "lorabench/data/chat_template.hpp"
#include "tiny_tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  lbfuzz::expect_clean("", [&] {
    const auto messages = lorabench::data::parse_chat_json(text);
    const auto rendered = lorabench::data::render_chat(messages);
    for (const auto& [b, e] : rendered.trained)
      if (b > e || e > rendered.text.size()) lbfuzz::finding("trained span outside the rendered text");
    const auto ex = lorabench::data::encode_chat(*lbfuzz::tiny_tokenizer(), messages);
    if (ex.ids.size() != ex.trained.size()) lbfuzz::finding("encode_chat: ids and mask differ in length");
  });
  return 0;
}
