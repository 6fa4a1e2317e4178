// The Qwen chat templates and the assistant-only label mask. Torch-free.
//
// Two templates, each rendering what the model's official tokenizer_config.json chat_template produces
// without a generation prompt (data.chat_template; `auto` picks the model family's):
//
// qwen2.5 (Qwen2.5-Instruct; roles system, user, assistant; no tools):
//   <|im_start|>system\n{system}<|im_end|>\n          first; kDefaultSystemPrompt when messages[0] is
//                                                     not a system message
//   <|im_start|>{role}\n{content}<|im_end|>\n         for every message, in order
//
// qwen3 (Qwen3; roles system, user, assistant, tool; tool calls; tool definitions; reasoning):
//   no default system message; with `tools`, the first system message's content and the tool definitions
//   form one system turn; a `tool` message is a <tool_response> inside a user turn (consecutive ones
//   share it); an assistant message's tool calls follow its content as <tool_call> blocks. An assistant
//   message's reasoning is its `reasoning_content`, else the part of its content before </think> (the
//   content is then what follows). The assistant turns after the last real user query (a user message that
//   is not a tool response) keep their reasoning in <think>\n...\n</think>\n\n before the content, the last
//   message always (an empty block when it has none); earlier ones lose it, as the official template
//   removes reasoning from the history.
//   enable_thinking = false trains the non-thinking mode: every message's reasoning is dropped, and the
//   empty <think>\n\n</think>\n\n that then opens the final answer is part of the prompt (the official
//   template's generation prompt writes it when enable_thinking is false), so it is not trained.
//
// Trained tokens: what each assistant turn generates, from after its "<|im_start|>assistant\n" to its
// <|im_end|> inclusive (so the model learns to stop): the reasoning block (qwen3, thinking on), the
// content, the tool calls. Role headers, the "\n" after <|im_end|>, system, user and tool turns are not
// trained. A token is trained when its bytes overlap a trained span, so a word that straddles the header
// and the content (content that starts with "\n" or spaces merges with the header's "\n") counts as content.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lorabench/data/tokenizer.hpp"

namespace lorabench::data {

constexpr const char* kDefaultSystemPrompt = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

enum class ChatTemplate { kQwen25, kQwen3 };

// "qwen2.5" | "qwen3"; throws ConfigError naming data.chat_template for anything else ("auto" is resolved
// by the caller, from the model family).
ChatTemplate parse_chat_template(const std::string& name);
const char* chat_template_name(ChatTemplate t);
// The template of a model family (ModelShape::family: "qwen2" -> qwen2.5, "qwen3" -> qwen3).
ChatTemplate chat_template_of_family(const std::string& family);

struct ChatOptions {
  ChatTemplate tmpl = ChatTemplate::kQwen25;
  bool enable_thinking = true;  // qwen3 only
};

struct ToolCall {
  std::string name;
  std::string arguments;  // as rendered: a string argument verbatim, an object as Python's json.dumps writes it
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}

  std::string role;  // system | user | assistant | tool (tool: qwen3 only)
  std::string content;
  std::optional<std::string> reasoning;  // reasoning_content (qwen3); unset when the record has none
  std::vector<ToolCall> tool_calls;      // assistant only (qwen3)
};

struct RenderedChat {
  std::string text;                                 // the template's output
  std::vector<std::pair<size_t, size_t>> trained;   // byte ranges [begin, end) of text that carry loss
};

// Renders `messages` and, for qwen3, the tool definitions `tools` offered to the model (each as Python's
// json.dumps writes it), validated for options.tmpl (parse_chat_json and the dataset reader check roles and
// fields).
RenderedChat render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options = {},
                         const std::vector<std::string>& tools = {});

struct EncodedExample {
  std::vector<TokenId> ids;
  std::vector<uint8_t> trained;  // 1 = this token carries loss (same length as ids)
};

// Normalises each text field (NFC, as encode() would), renders, encodes and marks the trained tokens.
EncodedExample encode_chat(const Tokenizer& tok, const std::vector<ChatMessage>& messages, const ChatOptions& options = {},
                           const std::vector<std::string>& tools = {});

// The trained parts of `ex` as text: each run of consecutive trained tokens, decoded (what `lorabench
// tokenize --chat --render` prints).
std::vector<std::string> trained_parts(const Tokenizer& tok, const EncodedExample& ex);

// Parses one chat given as JSON text: {"messages": [...], "tools": [...] (optional)} or a bare array of
// messages, checked for `tmpl` (an assistant message is not required here); the tool definitions go to
// *tools. Throws IoError with a message saying what is wrong (no location: the caller adds it).
std::vector<ChatMessage> parse_chat_json(const std::string& json_text, ChatTemplate tmpl = ChatTemplate::kQwen25,
                                         std::vector<std::string>* tools = nullptr);

}  // namespace lorabench::data
