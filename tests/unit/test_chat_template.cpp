#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "data_test_util.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/data/chat_template.hpp"

using lorabench::data::ChatMessage;
using lorabench::data::encode_chat;
using lorabench::data::kDefaultSystemPrompt;
using lorabench::data::parse_chat_json;
using lorabench::data::render_chat;
using lorabench::data::TokenId;

namespace {

// From tests/fixtures/tokenizer/qwen2.5_encode_cases.json (reference ids):
//   "<|im_start|>system\nYou are Qwen, ... assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n
//    <|im_start|>assistant\n"  ->  kPrefix
//   "Hello world" -> 9707 1879 (case 0); <|im_end|> = 151645 and "\n" = 198 (same case).
const std::vector<TokenId> kPrefix = {151644, 8948, 198,   2610,  525,   1207, 16948, 11,     3465, 553, 54364,
                                      14817,  13,   1446,  525,   264,   10950, 17847, 13,    151645, 198, 151644,
                                      872,    198,  13048, 0,     151645, 198,   151644, 77091, 198};
const std::vector<TokenId> kReply = {9707, 1879, 151645, 198};

std::vector<TokenId> concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST(ChatTemplate, RendersQwenFormatWithDefaultSystem) {
  auto r = render_chat({{"user", "Hi!"}, {"assistant", "Hello world"}});
  EXPECT_EQ(r.text, std::string("<|im_start|>system\n") + kDefaultSystemPrompt +
                        "<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello world<|im_end|>\n");
  ASSERT_EQ(r.trained.size(), 1u);
  EXPECT_EQ(r.text.substr(r.trained[0].first, r.trained[0].second - r.trained[0].first), "Hello world<|im_end|>");
  // An explicit system message replaces the default one.
  auto s = render_chat({{"system", "Be brief."}, {"user", "Hi!"}, {"assistant", "Yes."}});
  EXPECT_EQ(s.text.rfind("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n", 0), 0u) << s.text;
  EXPECT_EQ(s.text.find(kDefaultSystemPrompt), std::string::npos);
}

TEST(ChatTemplate, SystemUserAssistantGivesTheReferenceIds) {
  LBTEST_QWEN_TOKENIZER(tok);
  const auto want = concat(kPrefix, kReply);
  auto implicit = encode_chat(*tok, {{"user", "Hi!"}, {"assistant", "Hello world"}});
  EXPECT_EQ(implicit.ids, want);
  auto explicit_system =
      encode_chat(*tok, {{"system", kDefaultSystemPrompt}, {"user", "Hi!"}, {"assistant", "Hello world"}});
  EXPECT_EQ(explicit_system.ids, want);
  // The whole rendering tokenized at once agrees with the per-span view.
  EXPECT_EQ(tok->encode(render_chat({{"user", "Hi!"}, {"assistant", "Hello world"}}).text), want);

  // Only the assistant's content and its <|im_end|> are trained; the final "\n" is not.
  std::vector<uint8_t> mask(want.size(), 0);
  mask[kPrefix.size()] = 1;      // Hello
  mask[kPrefix.size() + 1] = 1;  // " world"
  mask[kPrefix.size() + 2] = 1;  // <|im_end|>
  EXPECT_EQ(implicit.trained, mask);
}

TEST(ChatTemplate, CustomSystemMessageIds) {
  LBTEST_QWEN_TOKENIZER(tok);
  auto ex = encode_chat(*tok, {{"system", "Hello world"}, {"user", "Hi!"}, {"assistant", "Hello world"}});
  std::vector<TokenId> want = {151644, 8948, 198, 9707, 1879, 151645, 198,   151644, 872, 198, 13048, 0,
                               151645, 198,  151644, 77091, 198, 9707, 1879, 151645, 198};
  EXPECT_EQ(ex.ids, want);
  EXPECT_EQ(std::count(ex.trained.begin(), ex.trained.end(), 1), 3);
}

TEST(ChatTemplate, EveryAssistantTurnIsTrainedAndNothingElse) {
  LBTEST_QWEN_TOKENIZER(tok);
  std::vector<ChatMessage> chat = {{"user", "What is 2 + 2?"}, {"assistant", "4"},
                                   {"user", "And 3 + 3?"},     {"assistant", "6, of course."}};
  auto ex = encode_chat(*tok, chat);
  ASSERT_EQ(ex.ids.size(), ex.trained.size());
  std::vector<TokenId> trained;
  for (size_t i = 0; i < ex.ids.size(); ++i)
    if (ex.trained[i]) trained.push_back(ex.ids[i]);
  EXPECT_EQ(tok->decode(trained), "4<|im_end|>6, of course.<|im_end|>");
  // The untrained tokens are exactly the rest of the rendering.
  std::string rest;
  for (size_t i = 0; i < ex.ids.size(); ++i)
    if (!ex.trained[i]) rest += tok->token_bytes(ex.ids[i]);
  EXPECT_EQ(rest.find("of course"), std::string::npos);
  EXPECT_NE(rest.find("And 3 + 3?"), std::string::npos);
}

TEST(ChatTemplate, ContentMergingWithTheHeaderCountsAsContent) {
  LBTEST_QWEN_TOKENIZER(tok);
  // "assistant\n" + "\n\nAnswer": the header's "\n" and the content's "\n\n" form one "\n\n\n" token.
  auto ex = encode_chat(*tok, {{"user", "x"}, {"assistant", "\n\nAnswer"}});
  std::string trained;
  for (size_t i = 0; i < ex.ids.size(); ++i)
    if (ex.trained[i]) trained += tok->token_bytes(ex.ids[i]);
  EXPECT_EQ(trained, "\n\n\nAnswer<|im_end|>");
}

TEST(ChatTemplate, ContentIsNormalisedToNfc) {
  LBTEST_QWEN_TOKENIZER(tok);
  auto a = encode_chat(*tok, {{"user", "cafe\xCC\x81"}, {"assistant", "e\xCC\x81t\xC3\xA9"}});
  auto b = encode_chat(*tok, {{"user", "caf\xC3\xA9"}, {"assistant", "\xC3\xA9t\xC3\xA9"}});
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.trained, b.trained);
}

TEST(ChatTemplate, ParsesChatJson) {
  auto a = parse_chat_json(R"({"messages": [{"role": "user", "content": "Hi"}]})");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].role, "user");
  auto b = parse_chat_json(R"([{"role": "system", "content": "S"}, {"role": "assistant", "content": "A"}])");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].content, "A");
  EXPECT_THROW(parse_chat_json(R"([{"role": "robot", "content": "x"}])"), lorabench::IoError);
  EXPECT_THROW(parse_chat_json(R"([{"role": "user"}])"), lorabench::IoError);
  EXPECT_THROW(parse_chat_json(R"({"msgs": []})"), lorabench::IoError);
  EXPECT_THROW(parse_chat_json("[{"), lorabench::IoError);
}
