#include "lorabench/data/chat_template.hpp"

#include <nlohmann/json.hpp>

#include "lorabench/core/error.hpp"
#include "record_json.hpp"

namespace lorabench::data {

RenderedChat render_chat(const std::vector<ChatMessage>& messages) {
  RenderedChat r;
  auto add = [&r](const std::string& role, const std::string& content) {
    r.text += "<|im_start|>";
    r.text += role;
    r.text += '\n';
    size_t begin = r.text.size();
    r.text += content;
    r.text += "<|im_end|>";
    if (role == "assistant") r.trained.emplace_back(begin, r.text.size());  // content + <|im_end|>
    r.text += '\n';
  };
  if (messages.empty() || messages.front().role != "system") add("system", kDefaultSystemPrompt);
  for (const auto& m : messages) add(m.role, m.content);
  return r;
}

EncodedExample encode_chat(const Tokenizer& tok, const std::vector<ChatMessage>& messages) {
  // Normalising each content first makes the rendered text its own normal form (the template adds only
  // ASCII and added tokens), so the offsets encode() reports index the rendered text directly.
  std::vector<ChatMessage> normalised = messages;
  for (auto& m : normalised) m.content = tok.normalize(m.content);
  RenderedChat r = render_chat(normalised);

  EncodedExample ex;
  std::vector<size_t> offsets;
  ex.ids = tok.encode(r.text, &offsets);
  ex.trained.assign(ex.ids.size(), 0);
  size_t span = 0;
  for (size_t i = 0; i < ex.ids.size(); ++i) {
    size_t begin = offsets[i];
    size_t end = begin + tok.token_bytes(ex.ids[i]).size();
    while (span < r.trained.size() && r.trained[span].second <= begin) ++span;
    if (span < r.trained.size() && end > r.trained[span].first) ex.trained[i] = 1;
  }
  LB_CHECK(offsets.empty() || offsets.back() + tok.token_bytes(ex.ids.back()).size() == r.text.size(),
           "the rendered chat is not in normal form");
  return ex;
}

std::vector<ChatMessage> parse_chat_json(const std::string& json_text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number beyond a double
    throw IoError(std::string("malformed JSON: ") + e.what());
  }
  std::vector<ChatMessage> msgs;
  std::string problem;
  if (j.is_object()) {
    auto it = j.find("messages");
    problem = it == j.end() ? "missing field 'messages'" : detail::chat_from_json(*it, &msgs, false);
  } else {
    problem = detail::chat_from_json(j, &msgs, false);
  }
  if (!problem.empty()) throw IoError(problem);
  return msgs;
}

}  // namespace lorabench::data
