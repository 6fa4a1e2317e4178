#include "lorabench/data/chat_template.hpp"

#include "lorabench/core/error.hpp"
#include "record_json.hpp"

namespace lorabench::data {

ChatTemplate parse_chat_template(const std::string& name) {
  if (name == "qwen2.5") return ChatTemplate::kQwen25;
  if (name == "qwen3") return ChatTemplate::kQwen3;
  throw ConfigError("data.chat_template: expected auto, qwen2.5 or qwen3, got '" + name + "'");
}

const char* chat_template_name(ChatTemplate t) { return t == ChatTemplate::kQwen3 ? "qwen3" : "qwen2.5"; }

ChatTemplate chat_template_of_family(const std::string& family) {
  return family == "qwen3" ? ChatTemplate::kQwen3 : ChatTemplate::kQwen25;
}

namespace {

// The Python string methods the official templates use, on newlines only: s.lstrip('\n') and friends.
std::string lstrip_nl(const std::string& s) { return s.substr(std::min(s.find_first_not_of('\n'), s.size())); }
std::string rstrip_nl(const std::string& s) {
  const size_t e = s.find_last_not_of('\n');
  return e == std::string::npos ? "" : s.substr(0, e + 1);
}
std::string strip_nl(const std::string& s) { return lstrip_nl(rstrip_nl(s)); }
bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

class Writer {
 public:
  explicit Writer(RenderedChat* r) : r_(r) {}
  Writer& operator<<(const std::string& s) {
    r_->text += s;
    return *this;
  }
  size_t pos() const { return r_->text.size(); }
  void train_from(size_t begin) { r_->trained.emplace_back(begin, r_->text.size()); }

 private:
  RenderedChat* r_;
};

void render_qwen25(const std::vector<ChatMessage>& messages, Writer& w) {
  auto add = [&w](const std::string& role, const std::string& content) {
    w << "<|im_start|>" << role << "\n";
    const size_t begin = w.pos();
    w << content << "<|im_end|>";
    if (role == "assistant") w.train_from(begin);  // content + <|im_end|>
    w << "\n";
  };
  if (messages.empty() || messages.front().role != "system") add("system", kDefaultSystemPrompt);
  for (const auto& m : messages) add(m.role, m.content);
}

// Qwen3's template (tokenizer_config.json of Qwen/Qwen3-*), without a generation prompt; see the header.
void render_qwen3(const std::vector<ChatMessage>& messages, const std::vector<std::string>& tools, bool thinking,
                  Writer& w) {
  const size_t n = messages.size();
  const bool leading_system = n > 0 && messages[0].role == "system";
  if (!tools.empty()) {
    w << "<|im_start|>system\n";
    if (leading_system) w << messages[0].content << "\n\n";
    w << "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
         "function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& t : tools) w << "\n" << t;
    w << "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
         "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
         "<args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (leading_system) {
    w << "<|im_start|>system\n" << messages[0].content << "<|im_end|>\n";
  }
  // The last real user query: a user message that is not only a tool response. Reasoning is kept after it.
  size_t last_query = n - 1;
  for (size_t i = n; i-- > 0;) {
    const auto& m = messages[i];
    if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const ChatMessage& m = messages[i];
    const bool last = i + 1 == n;
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      w << "<|im_start|>" << m.role << "\n" << m.content << "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string content = m.content, reasoning;
      if (m.reasoning) {
        reasoning = *m.reasoning;
      } else if (const size_t close = content.find("</think>"); close != std::string::npos) {
        std::string before = rstrip_nl(content.substr(0, close));
        const size_t open = before.rfind("<think>");
        reasoning = lstrip_nl(open == std::string::npos ? before : before.substr(open + 7));
        content = lstrip_nl(content.substr(content.rfind("</think>") + 8));
      }
      if (!thinking) reasoning.clear();
      w << "<|im_start|>assistant\n";
      size_t begin = w.pos();
      if (i > last_query && (last || !reasoning.empty())) {
        w << "<think>\n" << strip_nl(reasoning) << "\n</think>\n\n";
        if (!thinking) begin = w.pos();  // the non-thinking mode's empty block is the prompt's
        w << lstrip_nl(content);
      } else {
        w << content;
      }
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (k > 0 || !content.empty()) w << "\n";
        w << "<tool_call>\n{\"name\": \"" << m.tool_calls[k].name << "\", \"arguments\": " << m.tool_calls[k].arguments
          << "}\n</tool_call>";
      }
      w << "<|im_end|>";
      w.train_from(begin);
      w << "\n";
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") w << "<|im_start|>user";
      w << "\n<tool_response>\n" << m.content << "\n</tool_response>";
      if (last || messages[i + 1].role != "tool") w << "<|im_end|>\n";
    }
  }
}

}  // namespace

RenderedChat render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options,
                         const std::vector<std::string>& tools) {
  RenderedChat r;
  Writer w(&r);
  if (options.tmpl == ChatTemplate::kQwen3) {
    render_qwen3(messages, tools, options.enable_thinking, w);
  } else {
    LB_CHECK(tools.empty(), "the qwen2.5 chat template renders no tools");
    render_qwen25(messages, w);
  }
  return r;
}

EncodedExample encode_chat(const Tokenizer& tok, const std::vector<ChatMessage>& messages, const ChatOptions& options,
                           const std::vector<std::string>& tools) {
  // Normalising each text first makes the rendered text its own normal form (the templates add only ASCII
  // and added tokens), so the offsets encode() reports index the rendered text directly.
  std::vector<ChatMessage> normalised = messages;
  for (auto& m : normalised) {
    m.content = tok.normalize(m.content);
    if (m.reasoning) m.reasoning = tok.normalize(*m.reasoning);
    for (auto& c : m.tool_calls) {
      c.name = tok.normalize(c.name);
      c.arguments = tok.normalize(c.arguments);
    }
  }
  std::vector<std::string> normalised_tools = tools;
  for (auto& t : normalised_tools) t = tok.normalize(t);
  RenderedChat r = render_chat(normalised, options, normalised_tools);

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

std::vector<std::string> trained_parts(const Tokenizer& tok, const EncodedExample& ex) {
  std::vector<std::string> parts;
  std::vector<TokenId> run;
  for (size_t i = 0; i <= ex.ids.size(); ++i) {
    if (i < ex.ids.size() && ex.trained[i]) {
      run.push_back(ex.ids[i]);
    } else if (!run.empty()) {
      parts.push_back(tok.decode(run));
      run.clear();
    }
  }
  return parts;
}

std::vector<ChatMessage> parse_chat_json(const std::string& json_text, ChatTemplate tmpl,
                                         std::vector<std::string>* tools) {
  detail::Json j;
  try {
    j = detail::Json::parse(json_text);
  } catch (const detail::Json::exception& e) {  // parse_error, or out_of_range for a number beyond a double
    throw IoError(std::string("malformed JSON: ") + e.what());
  }
  std::vector<ChatMessage> msgs;
  std::vector<std::string> tool_defs;
  std::string problem;
  if (j.is_object()) {
    auto it = j.find("messages");
    auto t = j.find("tools");
    problem = it == j.end() ? "missing field 'messages'"
                            : detail::chat_from_json(*it, t == j.end() ? nullptr : &*t, tmpl, false, &msgs, &tool_defs);
  } else {
    problem = detail::chat_from_json(j, nullptr, tmpl, false, &msgs, &tool_defs);
  }
  if (!problem.empty()) throw IoError(problem);
  if (tools) *tools = std::move(tool_defs);
  return msgs;
}

}  // namespace lorabench::data
