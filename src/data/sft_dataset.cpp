#include "lorabench/data/sft_dataset.hpp"

#include <nlohmann/json.hpp>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "record_json.hpp"

namespace lorabench::data {

using json = detail::Json;

namespace detail {

namespace {

// A string field: "" when present and a string; otherwise the problem.
std::string string_field(const json& o, const char* name, bool required, std::string* out) {
  auto it = o.find(name);
  if (it == o.end() || (!required && it->is_null())) {
    out->clear();
    return required ? std::string("missing field '") + name + "'" : "";
  }
  if (!it->is_string()) return std::string("field '") + name + "' must be a string, got " + it->type_name();
  *out = it->get<std::string>();
  return "";
}

}  // namespace

std::string alpaca_from_json(const json& record, std::vector<ChatMessage>* out) {
  out->clear();
  if (!record.is_object()) return std::string("expected a JSON object, got ") + record.type_name();
  std::string instruction, input, output, system;
  std::string p;
  if (!(p = string_field(record, "instruction", true, &instruction)).empty()) return p;
  if (!(p = string_field(record, "input", false, &input)).empty()) return p;
  if (!(p = string_field(record, "output", true, &output)).empty()) return p;
  if (!(p = string_field(record, "system", false, &system)).empty()) return p;
  if (trim(instruction).empty()) return "field 'instruction' is empty";
  if (record.contains("system")) out->push_back({"system", system});
  out->push_back({"user", input.empty() ? instruction : instruction + "\n\n" + input});
  out->push_back({"assistant", output});
  return "";
}

namespace {

// Fields only the qwen3 template renders: refused under qwen2.5 rather than dropped.
std::string qwen3_only(const std::string& what) {
  return what + " is rendered by the qwen3 chat template only (data.chat_template = qwen3, or a Qwen3 model with "
                "auto); the qwen2.5 template here renders system, user and assistant text";
}

std::string tool_calls_from_json(const json& calls, std::vector<ToolCall>* out) {
  if (!calls.is_array()) return std::string("field 'tool_calls' must be an array, got ") + calls.type_name();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = "tool_calls[" + std::to_string(i) + "]";
    const json* c = &calls[i];
    if (!c->is_object()) return at + " must be an object, got " + c->type_name();
    if (auto f = c->find("function"); f != c->end()) {  // {"type": "function", "function": {name, arguments}}
      if (!f->is_object()) return at + ".function must be an object, got " + f->type_name();
      c = &*f;
    }
    ToolCall call;
    if (std::string p = string_field(*c, "name", true, &call.name); !p.empty()) return at + ": " + p;
    auto a = c->find("arguments");
    if (a == c->end()) return at + ": missing field 'arguments'";
    call.arguments = a->is_string() ? a->get<std::string>() : python_json_dumps(*a);
    out->push_back(std::move(call));
  }
  return "";
}

}  // namespace

std::string chat_from_json(const json& messages, const json* tools, ChatTemplate tmpl, bool need_assistant,
                           std::vector<ChatMessage>* out, std::vector<std::string>* tools_out) {
  out->clear();
  if (tools_out) tools_out->clear();
  const bool qwen3 = tmpl == ChatTemplate::kQwen3;
  if (!messages.is_array()) return std::string("field 'messages' must be an array, got ") + messages.type_name();
  if (messages.empty()) return "field 'messages' is empty";
  bool assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return at + " must be an object, got " + m.type_name();
    ChatMessage msg;
    std::string p;
    if (!(p = string_field(m, "role", true, &msg.role)).empty()) return at + ": " + p;
    if (!(p = string_field(m, "content", true, &msg.content)).empty()) return at + ": " + p;
    if (msg.role == "tool" && !qwen3) return at + ": " + qwen3_only("role 'tool'");
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      return at + ": unknown role '" + msg.role + (qwen3 ? "' (expected system, user, assistant or tool)"
                                                         : "' (expected system, user or assistant)");
    if (auto r = m.find("reasoning_content"); r != m.end() && !r->is_null()) {
      if (!qwen3) return at + ": " + qwen3_only("field 'reasoning_content'");
      if (msg.role != "assistant") return at + ": field 'reasoning_content' belongs to assistant messages";
      if (!r->is_string()) return at + ": field 'reasoning_content' must be a string, got " + r->type_name();
      msg.reasoning = r->get<std::string>();
    }
    if (auto c = m.find("tool_calls"); c != m.end() && !c->is_null() && !(c->is_array() && c->empty())) {
      if (!qwen3) return at + ": " + qwen3_only("field 'tool_calls'");
      if (msg.role != "assistant") return at + ": field 'tool_calls' belongs to assistant messages";
      if (!(p = tool_calls_from_json(*c, &msg.tool_calls)).empty()) return at + "." + p;
    }
    assistant = assistant || msg.role == "assistant";
    out->push_back(std::move(msg));
  }
  if (!assistant && need_assistant) return "no assistant message (nothing to train on)";
  if (tools && !tools->is_null()) {
    if (!tools->is_array()) return std::string("field 'tools' must be an array, got ") + tools->type_name();
    if (!tools->empty() && !qwen3) return qwen3_only("field 'tools'");
    for (const auto& t : *tools) {
      if (tools_out) tools_out->push_back(python_json_dumps(t));
    }
  }
  return "";
}

namespace {

void dump_string(const std::string& s, std::string* out) {
  static const char* hex = "0123456789abcdef";
  *out += '"';
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (ch < 0x20) {
          *out += "\\u00";
          *out += hex[ch >> 4];
          *out += hex[ch & 15];
        } else {
          *out += char(ch);
        }
    }
  }
  *out += '"';
}

void dump(const json& v, std::string* out) {
  switch (v.type()) {
    case json::value_t::object: {
      *out += '{';
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) *out += ", ";
        first = false;
        dump_string(k, out);
        *out += ": ";
        dump(x, out);
      }
      *out += '}';
      break;
    }
    case json::value_t::array: {
      *out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) *out += ", ";
        dump(v[i], out);
      }
      *out += ']';
      break;
    }
    case json::value_t::string: dump_string(v.get_ref<const std::string&>(), out); break;
    default: *out += v.dump(); break;  // numbers, booleans, null: the same text as Python's
  }
}

}  // namespace

std::string python_json_dumps(const json& value) {
  std::string out;
  dump(value, &out);
  return out;
}

}  // namespace detail

SftFormat parse_sft_format(const std::string& name) {
  if (name == "auto") return SftFormat::kAuto;
  if (name == "alpaca") return SftFormat::kAlpaca;
  if (name == "chat") return SftFormat::kChat;
  throw ConfigError("data.format: expected auto, alpaca or chat for a dataset file, got '" + name + "'");
}

const char* sft_format_name(SftFormat format) {
  switch (format) {
    case SftFormat::kAlpaca: return "alpaca";
    case SftFormat::kChat: return "chat";
    case SftFormat::kAuto: break;
  }
  return "auto";
}

BadRecordPolicy parse_bad_record_policy(const std::string& name) {
  if (name == "error") return BadRecordPolicy::kError;
  if (name == "skip") return BadRecordPolicy::kSkip;
  throw ConfigError("data.on_bad_record: expected error or skip, got '" + name + "'");
}

namespace {

int line_of_offset(const std::string& text, size_t offset) {
  int line = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

class Loader {
 public:
  Loader(const std::string& path, SftFormat format, BadRecordPolicy policy, ChatTemplate tmpl)
      : policy_(policy), tmpl_(tmpl) {
    out_.path = path;
    out_.format = format;
  }

  // One record: `parsed` is its JSON (or null with `problem` set when it could not be parsed).
  void add(const std::string& where, const json* parsed, std::string problem) {
    ++seen_;
    SftRecord rec;
    rec.where = where;
    if (problem.empty()) problem = convert(*parsed, &rec.messages, &rec.tools);
    if (!problem.empty()) {
      std::string msg = where + ": " + problem;
      if (policy_ == BadRecordPolicy::kError) throw IoError(msg + " (data.on_bad_record = skip leaves such records out)");
      ++out_.skipped;
      out_.problems.push_back(msg);
      return;
    }
    out_.records.push_back(std::move(rec));
  }

  SftRecords finish() {
    if (seen_ == 0) throw IoError(out_.path + ": no records (the file is empty)");
    if (out_.records.empty()) {
      throw IoError(out_.path + ": all " + std::to_string(seen_) + " records are bad; the first: " +
                    out_.problems.front());
    }
    return std::move(out_);
  }

 private:
  std::string convert(const json& rec, std::vector<ChatMessage>* msgs, std::vector<std::string>* tools_out) {
    if (!rec.is_object()) return std::string("expected a JSON object, got ") + rec.type_name();
    if (out_.format == SftFormat::kAuto) {
      if (rec.contains("messages")) out_.format = SftFormat::kChat;
      else if (rec.contains("instruction")) out_.format = SftFormat::kAlpaca;
      else return "cannot tell the format (data.format = auto): neither 'messages' (chat) nor 'instruction' (alpaca)";
    }
    if (out_.format == SftFormat::kAlpaca) return detail::alpaca_from_json(rec, msgs);
    auto it = rec.find("messages");
    if (it == rec.end()) return "missing field 'messages' (chat format)";
    auto tools = rec.find("tools");
    return detail::chat_from_json(*it, tools == rec.end() ? nullptr : &*tools, tmpl_, true, msgs, tools_out);
  }

  BadRecordPolicy policy_;
  ChatTemplate tmpl_;
  SftRecords out_;
  int64_t seen_ = 0;
};

}  // namespace

SftRecords load_sft_records(const std::string& path, SftFormat format, BadRecordPolicy policy, ChatTemplate tmpl) {
  std::string text = read_file(path);
  size_t start = (text.compare(0, 3, "\xEF\xBB\xBF") == 0) ? 3 : 0;
  size_t first = text.find_first_not_of(" \t\r\n", start);
  Loader loader(path, format, policy, tmpl);

  if (first != std::string::npos && text[first] == '[') {
    // JSON array: it has to parse as a whole before its elements can be told apart.
    size_t bad = 0;
    if (!is_valid_utf8(text, &bad))
      throw IoError(path + ":" + std::to_string(line_of_offset(text, bad)) + ": invalid UTF-8 (byte " +
                    std::to_string(bad) + ")");
    json arr;
    try {
      arr = json::parse(text.begin() + long(start), text.end());
    } catch (const json::parse_error& e) {
      throw IoError(path + ":" + std::to_string(line_of_offset(text, start + e.byte - (e.byte > 0))) +
                    ": malformed JSON array: " + e.what());
    } catch (const json::exception& e) {  // e.g. a number too large for a double (out_of_range.406)
      throw IoError(path + ": malformed JSON array: " + e.what());
    }
    for (size_t i = 0; i < arr.size(); ++i) loader.add(path + "[" + std::to_string(i) + "]", &arr[i], "");
    return loader.finish();
  }

  // JSONL.
  size_t pos = start;
  int line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view row(text.data() + pos, end - pos);
    pos = end + 1;
    ++line;
    if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
    if (row.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank: not a record
    std::string where = path + ":" + std::to_string(line);
    size_t bad = 0;
    if (!is_valid_utf8(row, &bad)) {
      loader.add(where, nullptr, "invalid UTF-8 (byte " + std::to_string(bad + 1) + " of the line)");
      continue;
    }
    json rec;
    try {
      rec = json::parse(row.begin(), row.end());
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number beyond a double
      loader.add(where, nullptr, std::string("malformed JSON: ") + e.what());
      continue;
    }
    loader.add(where, &rec, "");
  }
  return loader.finish();
}

}  // namespace lorabench::data
