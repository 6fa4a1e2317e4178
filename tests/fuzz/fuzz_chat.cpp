// One chat as JSON (`lorabench tokenize --chat` on stdin): parse_chat_json, then the chat template and
// the assistant-only label mask (encode_chat with the tiny Qwen2.5 tokenizer), for each template (Qwen3's in
// both modes). parse_chat_json's errors name no location (its caller adds it), so any lorabench::Error is
// accepted.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "lorabench/data/chat_template.hpp"
#include "tiny_tokenizer.hpp"

namespace {

void check(const std::string& text, lorabench::data::ChatTemplate tmpl, bool thinking) {
  std::vector<std::string> tools;
  const auto messages = lorabench::data::parse_chat_json(text, tmpl, &tools);
  const lorabench::data::ChatOptions options{tmpl, thinking};
  const auto rendered = lorabench::data::render_chat(messages, options, tools);
  size_t last_end = 0;
  for (const auto& [b, e] : rendered.trained) {
    if (b > e || e > rendered.text.size() || b < last_end) lbfuzz::finding("trained span outside the rendered text or out of order");
    last_end = e;
  }
  const auto ex = lorabench::data::encode_chat(*lbfuzz::tiny_tokenizer(), messages, options, tools);
  if (ex.ids.size() != ex.trained.size()) lbfuzz::finding("encode_chat: ids and mask differ in length");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  lbfuzz::expect_clean("", [&] { check(text, lorabench::data::ChatTemplate::kQwen25, true); });
  lbfuzz::expect_clean("", [&] { check(text, lorabench::data::ChatTemplate::kQwen3, true); });
  lbfuzz::expect_clean("", [&] { check(text, lorabench::data::ChatTemplate::kQwen3, false); });
  return 0;
}
