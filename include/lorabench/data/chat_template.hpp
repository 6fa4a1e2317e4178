// The Qwen2.5-Instruct chat template and the assistant-only label mask. Torch-free.
//
// Rendering (what Qwen2.5-Instruct's tokenizer_config.json chat_template produces without tools and
// without a generation prompt):
//   <|im_start|>system\n{system}<|im_end|>\n          first; kDefaultSystemPrompt when messages[0] is
//                                                     not a system message
//   <|im_start|>{role}\n{content}<|im_end|>\n         for every message, in order
//
// Trained tokens: the content of every assistant message AND the <|im_end|> that closes it, so the model
// learns to stop. The role header ("<|im_start|>assistant\n") and the "\n" after <|im_end|> are not trained;
// neither is anything of the system and user messages. A token is trained when its bytes overlap a
// trained span, so a word that straddles the header and the content (content that starts with "\n" or
// spaces merges with the header's "\n") counts as content.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lorabench/data/tokenizer.hpp"

namespace lorabench::data {

constexpr const char* kDefaultSystemPrompt = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

struct RenderedChat {
  std::string text;                                 // the template's output
  std::vector<std::pair<size_t, size_t>> trained;   // byte ranges [begin, end) of text that carry loss
};

// Renders `messages` (roles already validated: system | user | assistant).
RenderedChat render_chat(const std::vector<ChatMessage>& messages);

struct EncodedExample {
  std::vector<TokenId> ids;
  std::vector<uint8_t> trained;  // 1 = this token carries loss (same length as ids)
};

// Normalises each content (NFC, as encode() would), renders, encodes and marks the trained tokens.
EncodedExample encode_chat(const Tokenizer& tok, const std::vector<ChatMessage>& messages);

// Parses one chat given as JSON text: either {"messages": [...]} or a bare array of {role, content}
// (roles system | user | assistant; an assistant message is not required here).
// Throws IoError with a message saying what is wrong (no location: the caller adds it).
std::vector<ChatMessage> parse_chat_json(const std::string& json_text);

}  // namespace lorabench::data
