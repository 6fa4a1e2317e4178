// Private to the data layer: one JSON record -> chat messages. Each returns "" on success, otherwise what
// is wrong with the record (the caller adds file:line).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lorabench/data/chat_template.hpp"

namespace lorabench::data::detail {

std::string alpaca_from_json(const nlohmann::json& record, std::vector<ChatMessage>* out);
// `messages` is the array itself ({"messages": X} -> X). Training records need an assistant message.
std::string chat_from_json(const nlohmann::json& messages, std::vector<ChatMessage>* out, bool need_assistant);

}  // namespace lorabench::data::detail
