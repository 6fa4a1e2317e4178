// Qwen3's chat template against the official one (tests/fixtures/tokenizer/qwen3_chat_cases.json: generated
// conversations rendered by transformers' apply_chat_template with Qwen3's tokenizer_config.json and
// encoded by the tokenizers library), the assistant-only mask, and what each template refuses.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data_test_util.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/data/chat_template.hpp"
#include "lorabench/data/sft_dataset.hpp"
#include "lorabench/data/sft_source.hpp"

using namespace lorabench::data;
using lorabench::IoError;

namespace {

// Ordered: a tool definition's keys render in the file's order.
const nlohmann::ordered_json& cases() {
  static const nlohmann::ordered_json j = [] {
    std::ifstream in(std::string(LORABENCH_FIXTURES) + "/tokenizer/qwen3_chat_cases.json");
    return nlohmann::ordered_json::parse(in);
  }();
  return j;
}

ChatOptions qwen3(bool thinking = true) { return {ChatTemplate::kQwen3, thinking}; }

std::vector<std::string> trained_of(const std::string& chat_json, bool thinking = true) {
  std::string why;
  auto tok = lbtest::qwen_tokenizer(&why, "qwen3");
  if (!tok) throw std::runtime_error(why);
  std::vector<std::string> tools;
  auto msgs = parse_chat_json(chat_json, ChatTemplate::kQwen3, &tools);
  return trained_parts(*tok, encode_chat(*tok, msgs, qwen3(thinking), tools));
}

}  // namespace

TEST(ChatQwen3, TheFixtureIsTheTokenizerWeBundle) {
  EXPECT_EQ(cases().at("tokenizer_sha256"), "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4");
  EXPECT_GE(cases().at("cases").size(), 50u);
}

// Text and ids equal to the official template's, for every generated conversation, both modes; the mask
// trains one run per assistant turn, each ending with <|im_end|>, never the empty think block of the
// non-thinking mode.
TEST(ChatQwen3, RendersAndEncodesAsTheOfficialTemplate) {
  LBTEST_QWEN3_TOKENIZER(tok);
  int n = 0, with_tools = 0, with_think = 0;
  for (const auto& c : cases().at("cases")) {
    const std::string chat = c.at("chat").dump();
    const bool thinking = c.at("enable_thinking").get<bool>();
    SCOPED_TRACE("case " + std::to_string(n) + (thinking ? " thinking: " : " not thinking: ") + chat);
    std::vector<std::string> tools;
    const auto msgs = parse_chat_json(chat, ChatTemplate::kQwen3, &tools);
    const RenderedChat r = render_chat(msgs, qwen3(thinking), tools);
    EXPECT_EQ(r.text, c.at("text").get<std::string>());
    const EncodedExample ex = encode_chat(*tok, msgs, qwen3(thinking), tools);
    EXPECT_EQ(ex.ids, c.at("ids").get<std::vector<TokenId>>());
    size_t assistants = 0;
    for (const auto& m : msgs) assistants += m.role == "assistant";
    const auto runs = trained_parts(*tok, ex);
    EXPECT_EQ(runs.size(), assistants);
    for (const auto& run : runs) {
      EXPECT_EQ(run.substr(run.size() - 10), "<|im_end|>") << run;
      if (!thinking) {
        EXPECT_NE(run.rfind("<think>\n\n</think>", 0), 0u) << run;  // the empty block is the prompt's
      }
    }
    with_tools += !tools.empty();
    with_think += thinking && r.text.find("<think>\n") != std::string::npos;
    ++n;
  }
  EXPECT_GT(with_tools, 5);
  EXPECT_GT(with_think, 20);
}

TEST(ChatQwen3, TrainsTheReasoningOfTheFinalTurnAndStripsItFromTheHistory) {
  const std::string chat = R"({"messages": [
    {"role": "user", "content": "Q1"},
    {"role": "assistant", "content": "<think>\nold\n</think>\n\nA1"},
    {"role": "user", "content": "Q2"},
    {"role": "assistant", "content": "A2", "reasoning_content": "new"}]})";
  EXPECT_EQ(trained_of(chat), (std::vector<std::string>{"A1<|im_end|>", "<think>\nnew\n</think>\n\nA2<|im_end|>"}));
  // Non-thinking: reasoning dropped everywhere; the empty block before the final answer is prompt.
  EXPECT_EQ(trained_of(chat, false), (std::vector<std::string>{"A1<|im_end|>", "A2<|im_end|>"}));
  std::vector<std::string> tools;
  const auto rendered = render_chat(parse_chat_json(chat, ChatTemplate::kQwen3, &tools), qwen3(false)).text;
  EXPECT_NE(rendered.find("<|im_start|>assistant\n<think>\n\n</think>\n\nA2<|im_end|>"), std::string::npos) << rendered;
  EXPECT_EQ(rendered.find("old"), std::string::npos);
}

TEST(ChatQwen3, TrainsToolCallsAndNotToolResponses) {
  const std::string chat = R"({"messages": [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "", "reasoning_content": "call",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "content": "21"},
    {"role": "tool", "content": "22"},
    {"role": "assistant", "content": "Warm."}],
    "tools": [{"type": "function", "function": {"name": "get_weather"}}]})";
  EXPECT_EQ(trained_of(chat),
            (std::vector<std::string>{
                "<think>\ncall\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                "\"days\": 2}}\n</tool_call><|im_end|>",
                "<think>\n\n</think>\n\nWarm.<|im_end|>"}));
  std::vector<std::string> tools;
  const auto msgs = parse_chat_json(chat, ChatTemplate::kQwen3, &tools);
  const std::string text = render_chat(msgs, qwen3(), tools).text;
  EXPECT_EQ(text.find("<|im_start|>system\nS\n\n# Tools"), 0u) << text;
  EXPECT_NE(text.find("<|im_start|>user\n<tool_response>\n21\n</tool_response>\n<tool_response>\n22\n</tool_response><|im_end|>"),
            std::string::npos)
      << text;
}

TEST(ChatQwen3, EachTemplateRefusesWhatItWouldNotRender) {
  const char* tool_role = R"([{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}])";
  const char* reasoning = R"([{"role": "assistant", "content": "x", "reasoning_content": "r"}])";
  const char* calls = R"([{"role": "assistant", "content": "x", "tool_calls": [{"name": "f", "arguments": "{}"}]}])";
  const char* tools = R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]})";
  for (const char* j : {tool_role, reasoning, calls, tools}) {
    try {
      (void)parse_chat_json(j, ChatTemplate::kQwen25);
      ADD_FAILURE() << "qwen2.5 accepted " << j;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("qwen3 chat template only"), std::string::npos) << e.what();
    }
    std::vector<std::string> t;
    EXPECT_NO_THROW((void)parse_chat_json(j, ChatTemplate::kQwen3, &t)) << j;
  }
  // Malformed Qwen3 fields, each named.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"([{"role": "user", "content": "x", "reasoning_content": "r"}])", "belongs to assistant messages"},
      {R"([{"role": "assistant", "content": "x", "reasoning_content": 3}])", "'reasoning_content' must be a string"},
      {R"([{"role": "assistant", "content": "x", "tool_calls": {}}])", "'tool_calls' must be an array"},
      {R"([{"role": "assistant", "content": "x", "tool_calls": [{"arguments": "{}"}]}])", "tool_calls[0]: missing field 'name'"},
      {R"([{"role": "assistant", "content": "x", "tool_calls": [{"name": "f"}]}])", "missing field 'arguments'"},
      {R"([{"role": "assistant", "content": null, "tool_calls": [{"name": "f", "arguments": {}}]}])", "'content' must be a string"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "'tools' must be an array"},
      {R"([{"role": "robot", "content": "x"}])", "expected system, user, assistant or tool"},
  };
  for (const auto& [j, want] : bad) {
    try {
      std::vector<std::string> t;
      (void)parse_chat_json(j, ChatTemplate::kQwen3, &t);
      ADD_FAILURE() << "qwen3 accepted " << j;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what() << " / wanted: " << want;
    }
  }
}

// A dataset file read for qwen3 keeps the tools and the reasoning; read for qwen2.5 the same record is a bad
// record naming its line.
TEST(ChatQwen3, DatasetRecordsCarryToolsAndReasoning) {
  lbtest::TempFile f("d.jsonl",
                     R"({"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "reasoning_content": "R"}], "tools": [{"b": 1, "a": [1.5, "é"]}]})"
                     "\n");
  const SftRecords r = load_sft_records(f.path(), SftFormat::kAuto, BadRecordPolicy::kError, ChatTemplate::kQwen3);
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].tools, std::vector<std::string>{"{\"b\": 1, \"a\": [1.5, \"é\"]}"});
  EXPECT_EQ(r.records[0].messages[1].reasoning.value_or("(none)"), "R");
  try {
    (void)load_sft_records(f.path(), SftFormat::kAuto, BadRecordPolicy::kError, ChatTemplate::kQwen25);
    ADD_FAILURE() << "qwen2.5 read a record with reasoning_content";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(f.path() + ":1: messages[1]: field 'reasoning_content' is rendered by the qwen3"),
              std::string::npos)
        << e.what();
  }
}

// The batch source renders a dataset with the template and mode it is given: the labels are the ids of
// exactly the trained parts, and its description names the template.
TEST(ChatQwen3, TheBatchSourceLabelsWhatTheTemplateTrains) {
  LBTEST_QWEN3_TOKENIZER(tok);
  lbtest::TempFile f("d.jsonl",
                     R"({"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "reasoning_content": "R"}]})"
                     "\n");
  for (bool thinking : {true, false}) {
    SftSpec spec;
    spec.path = f.path();
    spec.shuffle = false;
    spec.chat = qwen3(thinking);
    spec.geo = BatchGeometry{1, 1, 1, 64};
    auto src = make_sft_source(spec, tok);
    const Batch b = src->micro_batch(0, 0, 0);
    std::vector<TokenId> trained;
    for (size_t t = 0; t < b.labels.size(); ++t) {
      if (b.labels[t] != kIgnoreIndex) trained.push_back(TokenId(b.labels[t]));
    }
    EXPECT_EQ(tok->decode(trained), thinking ? "<think>\nR\n</think>\n\nA<|im_end|>" : "A<|im_end|>");
    const std::string d = src->describe();
    EXPECT_NE(d.find(thinking ? "chat template qwen3" : "chat template qwen3 (thinking off)"), std::string::npos) << d;
    if (thinking) {
      EXPECT_EQ(d.find("thinking off"), std::string::npos) << d;
    }
  }
}
