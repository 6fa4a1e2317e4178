// SFT dataset files: JSONL (one record per line) or one JSON array of records, in Alpaca or chat format.
// Torch-free; the records come back as chat messages ready for the chat template.
//
// Formats (data.format):
//   alpaca  {"instruction": str, "input": str (optional, may be empty or null), "output": str,
//            "system": str (optional)}  ->  user = instruction + ("\n\n" + input when input is not
//            empty), assistant = output; the system message when "system" is given.
//   chat    {"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]} with at least
//            one assistant message (otherwise nothing would be trained). With the qwen3 chat template
//            also role "tool", an assistant's "reasoning_content" (str or null) and "tool_calls"
//            ([{"function": {"name": str, "arguments": str or JSON}}] or the same without "function"), and
//            the record's "tools" (an array of tool definitions); the qwen2.5 template refuses them
//            rather than drop them (chat_template.hpp).
//   auto    per file, from the first record that is a JSON object: "messages" -> chat, "instruction"
//            -> alpaca. Every record of the file must then be of that format.
// Other fields of a record are ignored.
//
// The file is a JSON array when its first non-blank character is '['; otherwise it is JSONL, where
// blank lines are allowed and are not records. A leading UTF-8 BOM is ignored.
//
// Bad records (data.on_bad_record):
//   error (default)  the first bad record is an IoError naming "file:line" (JSONL, 1-based line) or
//                    "file[index]" (JSON array, 0-based element) and saying what is wrong: malformed
//                    JSON, invalid UTF-8, not an object, a missing or mistyped field, an unknown role,
//                    no assistant message.
//   skip             such records are left out; each one is counted and its message kept (problems).
// Always errors, in both modes: a missing or unreadable file, a file with no records (empty or only
// blank lines), a file whose every record is bad, and a JSON array that does not parse as a whole
// (its elements cannot be told apart; the message names file:line of the syntax error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lorabench/data/chat_template.hpp"

namespace lorabench::data {

enum class SftFormat { kAuto, kAlpaca, kChat };
enum class BadRecordPolicy { kError, kSkip };

// "auto" | "alpaca" | "chat"; throws ConfigError for anything else.
SftFormat parse_sft_format(const std::string& name);
const char* sft_format_name(SftFormat format);
// "error" | "skip"; throws ConfigError for anything else.
BadRecordPolicy parse_bad_record_policy(const std::string& name);

struct SftRecord {
  std::vector<ChatMessage> messages;  // what the chat template renders (no default system added yet)
  std::vector<std::string> tools;     // the record's tool definitions, as the template renders them
  std::string where;                  // "file:line" or "file[index]"
};

struct SftRecords {
  std::string path;
  SftFormat format = SftFormat::kAuto;  // the format used (never kAuto after loading)
  std::vector<SftRecord> records;       // the good records, in file order
  int64_t skipped = 0;                  // bad records left out (policy skip)
  std::vector<std::string> problems;    // "where: what" for each skipped record
};

// Reads and checks every record for the chat template `tmpl` (the roles and fields it renders).
SftRecords load_sft_records(const std::string& path, SftFormat format, BadRecordPolicy policy,
                            ChatTemplate tmpl = ChatTemplate::kQwen25);

}  // namespace lorabench::data
