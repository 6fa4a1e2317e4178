// Private to the data layer: one JSON record -> chat messages. Each returns "" on success, otherwise what
// is wrong with the record (the caller adds file:line). Records are parsed keeping their keys' order
// (ordered_json), as Python does: a tool call's arguments are rendered in the order the file has them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lorabench/data/chat_template.hpp"

namespace lorabench::data::detail {

using Json = nlohmann::ordered_json;

std::string alpaca_from_json(const Json& record, std::vector<ChatMessage>* out);
// `messages` is the array itself ({"messages": X} -> X); `tools` the record's "tools" (nullptr when it has
// none), rendered into *tools_out. Checked for `tmpl`: the roles and fields it renders, nothing it would
// drop. Training records need an assistant message.
std::string chat_from_json(const Json& messages, const Json* tools, ChatTemplate tmpl, bool need_assistant,
                           std::vector<ChatMessage>* out, std::vector<std::string>* tools_out);
// `value` as Python's json.dumps(value, ensure_ascii=False) writes it (what the chat templates' tojson
// gives): ", " and ": " between items, non-ASCII text as is, control characters escaped.
std::string python_json_dumps(const Json& value);

}  // namespace lorabench::data::detail
