#include <gtest/gtest.h>

#include <string>

#include "data_test_util.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/data/sft_dataset.hpp"

using lbtest::TempFile;
using lorabench::ConfigError;
using lorabench::IoError;
using lorabench::data::BadRecordPolicy;
using lorabench::data::load_sft_records;
using lorabench::data::SftFormat;
using lorabench::data::SftRecords;

namespace {

const char* kAlpaca1 = R"({"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"})";
const char* kAlpaca2 = R"({"instruction": "Say hi.", "input": "", "output": "Hi!"})";
const char* kChat1 = R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})";

// The IoError message of loading `content` (fails the test when loading succeeds).
std::string load_error(const std::string& name, const std::string& content, SftFormat f = SftFormat::kAuto,
                       BadRecordPolicy p = BadRecordPolicy::kError, std::string* path = nullptr) {
  TempFile file(name, content);
  if (path) *path = file.path();
  try {
    load_sft_records(file.path(), f, p);
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an IoError for " << name << ":\n" << content;
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(SftDataset, AlpacaJsonlBecomesUserAndAssistant) {
  TempFile f("a.jsonl", std::string(kAlpaca1) + "\n\n" + kAlpaca2 + "\r\n");
  SftRecords r = load_sft_records(f.path(), SftFormat::kAuto, BadRecordPolicy::kError);
  EXPECT_EQ(r.format, SftFormat::kAlpaca);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.skipped, 0);
  const auto& m = r.records[0].messages;
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].role, "user");
  EXPECT_EQ(m[0].content, "Add the numbers.\n\n2 and 3");
  EXPECT_EQ(m[1].role, "assistant");
  EXPECT_EQ(m[1].content, "5");
  EXPECT_EQ(r.records[1].messages[0].content, "Say hi.");  // empty input: the instruction alone
  EXPECT_EQ(r.records[0].where, f.path() + ":1");
  EXPECT_EQ(r.records[1].where, f.path() + ":3");  // the blank line 2 is not a record
}

TEST(SftDataset, AlpacaOptionalFields) {
  TempFile f("a.jsonl", R"({"instruction": "Q", "output": "A"})"
                        "\n"
                        R"({"instruction": "Q", "input": null, "output": "A", "system": "Be terse.", "id": 7})"
                        "\n");
  SftRecords r = load_sft_records(f.path(), SftFormat::kAlpaca, BadRecordPolicy::kError);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0].messages.size(), 2u);
  ASSERT_EQ(r.records[1].messages.size(), 3u);
  EXPECT_EQ(r.records[1].messages[0].role, "system");
  EXPECT_EQ(r.records[1].messages[0].content, "Be terse.");
}

TEST(SftDataset, ChatJsonlAndJsonArrays) {
  TempFile chat("c.jsonl", std::string(kChat1) + "\n");
  SftRecords c = load_sft_records(chat.path(), SftFormat::kAuto, BadRecordPolicy::kError);
  EXPECT_EQ(c.format, SftFormat::kChat);
  ASSERT_EQ(c.records.size(), 1u);
  EXPECT_EQ(c.records[0].messages[1].content, "Hello");

  TempFile arr("a.json", std::string("\xEF\xBB\xBF  [\n") + kAlpaca1 + ",\n" + kAlpaca2 + "\n]\n");
  SftRecords a = load_sft_records(arr.path(), SftFormat::kAuto, BadRecordPolicy::kError);
  EXPECT_EQ(a.format, SftFormat::kAlpaca);
  ASSERT_EQ(a.records.size(), 2u);
  EXPECT_EQ(a.records[1].where, arr.path() + "[1]");

  TempFile carr("c.json", std::string("[") + kChat1 + "]");
  EXPECT_EQ(load_sft_records(carr.path(), SftFormat::kChat, BadRecordPolicy::kError).records.size(), 1u);
}

TEST(SftDataset, FormatNames) {
  EXPECT_EQ(lorabench::data::parse_sft_format("auto"), SftFormat::kAuto);
  EXPECT_EQ(lorabench::data::parse_sft_format("chat"), SftFormat::kChat);
  EXPECT_EQ(lorabench::data::parse_sft_format("alpaca"), SftFormat::kAlpaca);
  EXPECT_THROW(lorabench::data::parse_sft_format("synthetic"), ConfigError);
  EXPECT_EQ(lorabench::data::parse_bad_record_policy("skip"), BadRecordPolicy::kSkip);
  EXPECT_THROW(lorabench::data::parse_bad_record_policy("ignore"), ConfigError);
}

TEST(SftDataset, MalformedJsonLineNamesFileAndLine) {
  std::string path;
  std::string e = load_error("bad.jsonl", std::string(kAlpaca1) + "\n" + kAlpaca2 + "\n{\"instruction\": \"x\",\n",
                             SftFormat::kAuto, BadRecordPolicy::kError, &path);
  EXPECT_TRUE(contains(e, path + ":3: malformed JSON")) << e;
}

TEST(SftDataset, MissingFieldNamesFileLineAndField) {
  std::string path;
  std::string e = load_error("bad.jsonl", std::string(kAlpaca1) + "\n{\"instruction\": \"Q\", \"input\": \"\"}\n",
                             SftFormat::kAuto, BadRecordPolicy::kError, &path);
  EXPECT_TRUE(contains(e, path + ":2: missing field 'output'")) << e;
  e = load_error("bad.jsonl", "{\"instruction\": \"Q\", \"output\": 5}\n", SftFormat::kAlpaca, BadRecordPolicy::kError,
                 &path);
  EXPECT_TRUE(contains(e, path + ":1: field 'output' must be a string")) << e;
  e = load_error("bad.jsonl", std::string(kChat1) + "\n{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n",
                 SftFormat::kChat, BadRecordPolicy::kError, &path);
  EXPECT_TRUE(contains(e, path + ":2: no assistant message")) << e;
  e = load_error("bad.jsonl", "{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}\n", SftFormat::kChat,
                 BadRecordPolicy::kError, &path);
  EXPECT_TRUE(contains(e, path + ":1: messages[0]: unknown role 'bot'")) << e;
  // A chat record in an alpaca file (format fixed by the first record).
  e = load_error("mixed.jsonl", std::string(kAlpaca1) + "\n" + kChat1 + "\n", SftFormat::kAuto, BadRecordPolicy::kError,
                 &path);
  EXPECT_TRUE(contains(e, path + ":2: missing field 'instruction'")) << e;
  e = load_error("neither.jsonl", "{\"prompt\": \"x\"}\n", SftFormat::kAuto, BadRecordPolicy::kError, &path);
  EXPECT_TRUE(contains(e, path + ":1: cannot tell the format")) << e;
  e = load_error("scalar.jsonl", "42\n", SftFormat::kAuto, BadRecordPolicy::kError, &path);
  EXPECT_TRUE(contains(e, path + ":1: expected a JSON object")) << e;
}

TEST(SftDataset, InvalidUtf8NamesFileAndLine) {
  std::string path;
  std::string e = load_error("bad.jsonl",
                             std::string(kAlpaca1) + "\n" + kAlpaca2 + "\n" + kAlpaca1 +
                                 "\n{\"instruction\": \"caf\xE9\", \"output\": \"x\"}\n",
                             SftFormat::kAuto, BadRecordPolicy::kError, &path);
  EXPECT_TRUE(contains(e, path + ":4: invalid UTF-8")) << e;
  e = load_error("bad.json", std::string("[\n") + kAlpaca1 + ",\n{\"instruction\": \"\xC3\", \"output\": \"x\"}]",
                 SftFormat::kAuto, BadRecordPolicy::kSkip, &path);
  EXPECT_TRUE(contains(e, path + ":3: invalid UTF-8")) << e;  // an array cannot be split: always an error
}

TEST(SftDataset, EmptyFilesAreErrors) {
  std::string path;
  std::string e = load_error("empty.jsonl", "", SftFormat::kAuto, BadRecordPolicy::kSkip, &path);
  EXPECT_TRUE(contains(e, path + ": no records")) << e;
  e = load_error("blank.jsonl", "\n  \n\r\n", SftFormat::kAuto, BadRecordPolicy::kSkip, &path);
  EXPECT_TRUE(contains(e, path + ": no records")) << e;
  e = load_error("empty.json", "[]", SftFormat::kAuto, BadRecordPolicy::kSkip, &path);
  EXPECT_TRUE(contains(e, path + ": no records")) << e;
  EXPECT_THROW(load_sft_records("/nonexistent/data.jsonl", SftFormat::kAuto, BadRecordPolicy::kSkip), IoError);
}

TEST(SftDataset, JsonArrayErrorsNameTheElementOrLine) {
  std::string path;
  std::string e = load_error("a.json", std::string("[") + kAlpaca1 + ", {\"instruction\": \"Q\"}]", SftFormat::kAuto,
                             BadRecordPolicy::kError, &path);
  EXPECT_TRUE(contains(e, path + "[1]: missing field 'output'")) << e;
  e = load_error("a.json", std::string("[\n") + kAlpaca1 + ",\n" + kAlpaca2 + "\n,,]\n", SftFormat::kAuto,
                 BadRecordPolicy::kSkip, &path);
  EXPECT_TRUE(contains(e, path + ":4: malformed JSON array")) << e;
}

TEST(SftDataset, SkipModeCountsEveryBadRecord) {
  std::string text = std::string(kAlpaca1) + "\n" +            // 1 good
                     "{broken\n" +                             // 2 malformed
                     kAlpaca2 + "\n" +                          // 3 good
                     "{\"instruction\": \"Q\"}\n" +             // 4 missing output
                     "{\"instruction\": \"\xFF\", \"output\": \"x\"}\n" +  // 5 invalid UTF-8
                     "\n" +                                     // 6 blank: not a record
                     kAlpaca1 + "\n";                           // 7 good
  TempFile f("skip.jsonl", text);
  SftRecords r = load_sft_records(f.path(), SftFormat::kAuto, BadRecordPolicy::kSkip);
  EXPECT_EQ(r.records.size(), 3u);
  EXPECT_EQ(r.skipped, 3);
  ASSERT_EQ(r.problems.size(), 3u);
  EXPECT_TRUE(contains(r.problems[0], f.path() + ":2: malformed JSON")) << r.problems[0];
  EXPECT_TRUE(contains(r.problems[1], f.path() + ":4: missing field 'output'")) << r.problems[1];
  EXPECT_TRUE(contains(r.problems[2], f.path() + ":5: invalid UTF-8")) << r.problems[2];
  EXPECT_EQ(r.records[2].where, f.path() + ":7");
  // The same file in error mode stops at line 2.
  try {
    load_sft_records(f.path(), SftFormat::kAuto, BadRecordPolicy::kError);
    ADD_FAILURE() << "expected an IoError";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), f.path() + ":2:")) << e.what();
  }
  // Array elements are skipped and counted too.
  TempFile a("skip.json", std::string("[") + kAlpaca1 + ", 3, {\"output\": \"x\"}, " + kAlpaca2 + "]");
  SftRecords ra = load_sft_records(a.path(), SftFormat::kAlpaca, BadRecordPolicy::kSkip);
  EXPECT_EQ(ra.records.size(), 2u);
  EXPECT_EQ(ra.skipped, 2);
  EXPECT_TRUE(contains(ra.problems[1], a.path() + "[2]: missing field 'instruction'")) << ra.problems[1];
}

TEST(SftDataset, EverythingSkippedIsAnError) {
  std::string path;
  std::string e = load_error("allbad.jsonl", "{x\n[1]\n{\"instruction\": \"Q\"}\n", SftFormat::kAuto,
                             BadRecordPolicy::kSkip, &path);
  EXPECT_TRUE(contains(e, path + ": all 3 records are bad")) << e;
  EXPECT_TRUE(contains(e, path + ":1:")) << e;
}

TEST(SftDataset, BundledToyDatasetLoadsCleanly) {
  const std::string path = std::string(LORABENCH_SOURCE_DIR) + "/inputs/data/sft_toy.jsonl";
  SftRecords r = load_sft_records(path, SftFormat::kAuto, BadRecordPolicy::kError);
  EXPECT_EQ(r.format, SftFormat::kAlpaca);
  EXPECT_GE(r.records.size(), 200u);
  EXPECT_EQ(r.skipped, 0);
  int chinese = 0;
  for (const auto& rec : r.records) {
    for (const auto& m : rec.messages) {
      if (m.content.find("\xE7\x9A\x84") != std::string::npos || m.content.find("\xE6\x98\xAF") != std::string::npos) {
        ++chinese;  // 的 or 是
        break;
      }
    }
  }
  EXPECT_GE(chinese, 10);
}
