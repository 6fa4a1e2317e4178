#include <gtest/gtest.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data_test_util.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/data/tokenizer.hpp"

using lorabench::IoError;
using lorabench::data::byte_to_unicode;
using lorabench::data::TokenId;
using lorabench::data::Tokenizer;
using nlohmann::json;

namespace {

struct EncodeCase {
  std::string text;
  std::vector<TokenId> ids;
};

std::vector<EncodeCase> encode_cases() {
  std::ifstream in(std::string(LORABENCH_FIXTURES) + "/tokenizer/qwen2.5_encode_cases.json");
  EXPECT_TRUE(in.good()) << "missing fixture tests/fixtures/tokenizer/qwen2.5_encode_cases.json";
  std::vector<EncodeCase> cases;
  if (!in) return cases;
  for (const auto& c : json::parse(in)) cases.push_back({c.at("text"), c.at("ids").get<std::vector<TokenId>>()});
  return cases;
}

// NFC by utf8proc directly (not through the tokenizer), the oracle of the round trip.
std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                                    &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  EXPECT_GE(n, 0);
  std::string r(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return r;
}

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// A tiny byte-level BPE tokenizer.json: the 256 byte tokens, then `extra` tokens built by `merges`.
std::string tiny_tokenizer_json(const std::vector<std::string>& merges, json model_patch = json::object()) {
  json vocab = json::object();
  int id = 0;
  auto level = [](const std::string& raw) {
    std::string s;
    for (unsigned char b : raw) s += utf8(byte_to_unicode(b));
    return s;
  };
  for (int b = 0; b < 256; ++b) vocab[level(std::string(1, char(b)))] = id++;
  json merge_list = json::array();
  for (const auto& m : merges) {
    size_t sp = m.find(' ');
    std::string a = m.substr(0, sp), b = m.substr(sp + 1);
    merge_list.push_back(level(a) + " " + level(b));
    if (!vocab.contains(level(a + b))) vocab[level(a + b)] = id++;
  }
  json model = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false},
                {"vocab", vocab}, {"merges", merge_list}};
  model.update(model_patch);
  json j = {
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", id}, {"content", "<|end|>"}, {"single_word", false}, {"lstrip", false},
                                     {"rstrip", false}, {"normalized", false}, {"special", true}}})},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"},
                       {"pattern", {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}})}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", model}};
  return j.dump();
}

}  // namespace

TEST(Tokenizer, ByteToUnicodeIsGpt2Map) {
  EXPECT_EQ(byte_to_unicode('A'), U'A');
  EXPECT_EQ(byte_to_unicode('!'), U'!');
  EXPECT_EQ(byte_to_unicode(' '), char32_t(0x120));   // Ġ
  EXPECT_EQ(byte_to_unicode('\n'), char32_t(0x10A));  // Ċ
  EXPECT_EQ(byte_to_unicode(0), char32_t(0x100));
  EXPECT_EQ(byte_to_unicode(0xAD), char32_t(0x143));  // the soft hyphen is not "printable" in GPT-2's map
  EXPECT_EQ(byte_to_unicode(0xFF), char32_t(0xFF));
}

TEST(Tokenizer, Utf8Validation) {
  using lorabench::data::is_valid_utf8;
  EXPECT_TRUE(is_valid_utf8("plain ascii text"));
  EXPECT_TRUE(is_valid_utf8("中文 é 😀"));
  size_t bad = 0;
  EXPECT_FALSE(is_valid_utf8("ok\xC3", &bad));  // truncated
  EXPECT_EQ(bad, 2u);
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xFF"));
}

TEST(Tokenizer, MergesApplyByRankLeftmostFirst) {
  // "a b" ranks before "b c": "abc" -> "ab" + "c" although "bc" would also be a token.
  Tokenizer t = Tokenizer::from_json(tiny_tokenizer_json({"a b", "b c", "ab c"}), "tiny");
  TokenId ab = t.token_id("ab"), abc = t.token_id("abc"), bc = t.token_id("bc");
  ASSERT_GE(ab, 256);
  ASSERT_GE(bc, 256);
  ASSERT_GE(abc, 256);
  EXPECT_EQ(t.encode("abc"), (std::vector<TokenId>{abc}));
  EXPECT_EQ(t.encode("bc"), (std::vector<TokenId>{bc}));
  EXPECT_EQ(t.encode("abcbc"), (std::vector<TokenId>{abc, bc}));
  // Equal ranks: the leftmost pair merges first ("aaa" -> "aa" + "a").
  Tokenizer u = Tokenizer::from_json(tiny_tokenizer_json({"a a"}), "tiny");
  EXPECT_EQ(u.encode("aaa"), (std::vector<TokenId>{u.token_id("aa"), TokenId('a')}));
  EXPECT_EQ(u.encode("aaaa"), (std::vector<TokenId>{u.token_id("aa"), u.token_id("aa")}));
  // Added tokens split the text before anything else; a space is its own word here (" " + "a").
  TokenId end = u.token_id("<|end|>");
  EXPECT_EQ(u.encode("a<|end|> a"), (std::vector<TokenId>{TokenId('a'), end, TokenId(' '), TokenId('a')}));
  EXPECT_EQ(u.decode(u.encode("a<|end|> aaa")), "a<|end|> aaa");
}

// tiny_tokenizer_json with `added` as its added_tokens: {content, id in the file} pairs.
std::string with_added(const std::string& tokenizer_json, const std::vector<std::pair<std::string, int>>& added) {
  json j = json::parse(tokenizer_json);
  j["added_tokens"] = json::array();
  for (const auto& [content, id] : added)
    j["added_tokens"].push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
  return j.dump();
}

TEST(Tokenizer, AddedTokensAreNumberedLikeHuggingFace) {
  // Hugging Face tokenizers ignores the ids listed for added tokens: in file order, each gets the next id
  // after the vocabulary (the number of entries) and the added tokens before it.
  const std::string base = tiny_tokenizer_json({"a b"});  // 256 byte tokens + "ab" = 257 entries
  const TokenId n = 257;
  // The fuzz finding: two tokens listed with one id. Both used to get it, and it decoded as the later one.
  Tokenizer t = Tokenizer::from_json(with_added(base, {{"<|im_start|>", n}, {"<|im_end|>", n}}), "dup");
  EXPECT_EQ(t.token_id("<|im_start|>"), n);
  EXPECT_EQ(t.token_id("<|im_end|>"), n + 1);
  EXPECT_EQ(t.vocab_size(), n + 2);
  const std::string chat = "<|im_start|>user\nab<|im_end|>\n";
  EXPECT_EQ(t.encode(chat), (std::vector<TokenId>{n, TokenId('u'), TokenId('s'), TokenId('e'), TokenId('r'),
                                                   TokenId('\n'), t.token_id("ab"), n + 1, TokenId('\n')}));
  EXPECT_EQ(t.decode(t.encode(chat)), chat);
  EXPECT_EQ(t.decode({n}), "<|im_start|>");
  EXPECT_EQ(t.decode({n + 1}), "<|im_end|>");

  // Listed ids that disagree are not used either; the same content listed twice keeps its first id.
  Tokenizer u = Tokenizer::from_json(with_added(base, {{"<|x|>", n + 5}, {"<|y|>", n + 3}, {"<|x|>", n + 9}, {"<|z|>", 2}}),
                                     "renumbered");
  EXPECT_EQ(u.token_id("<|x|>"), n);
  EXPECT_EQ(u.token_id("<|y|>"), n + 1);
  EXPECT_EQ(u.token_id("<|z|>"), n + 2);
  EXPECT_EQ(u.vocab_size(), n + 3);
  EXPECT_EQ(u.decode(u.encode("<|z|><|x|><|y|>")), "<|z|><|x|><|y|>");

  // Content that is a vocabulary entry gets that entry's id (here "ab", listed as n); the next one n.
  Tokenizer v = Tokenizer::from_json(with_added(base, {{"ab", n}, {"<|w|>", n + 1}}), "in-vocab");
  const TokenId ab = v.token_id("ab");
  ASSERT_GE(ab, 256);
  ASSERT_LT(ab, n);
  EXPECT_EQ(v.token_id("<|w|>"), n);
  EXPECT_EQ(v.vocab_size(), n + 1);
  EXPECT_EQ(v.encode("aab<|w|>"), (std::vector<TokenId>{TokenId('a'), ab, n}));
  EXPECT_EQ(v.decode(v.encode("aab<|w|>")), "aab<|w|>");

  // A vocabulary entry whose text is not its bytes ("\xC4\xA0" "a" is the byte-level spelling of " a") would
  // encode to " a" and decode as such: refused.
  EXPECT_THROW(Tokenizer::from_json(with_added(tiny_tokenizer_json({" a"}), {{"\xC4\xA0" "a", n}}), "x"), IoError);
  // Ids with a gap: the next id is the number of entries, even when a vocabulary token has it (refused).
  json gap = json::parse(base);
  gap["model"]["vocab"]["\xC4\xA0\xC4\xA0"] = 300;  // 258 entries: ids 0..256 and 300
  Tokenizer w = Tokenizer::from_json(gap.dump(), "gap");
  EXPECT_EQ(w.token_id("<|end|>"), 258);
  EXPECT_EQ(w.vocab_size(), 301);
  gap["model"]["vocab"]["\xC4\xA0\xC4\xA0"] = 258;
  EXPECT_THROW(Tokenizer::from_json(gap.dump(), "x"), IoError);
}

TEST(Tokenizer, RefusesWhatItDoesNotImplement) {
  EXPECT_THROW(Tokenizer::from_json(tiny_tokenizer_json({}, {{"type", "WordPiece"}}), "x"), IoError);
  EXPECT_THROW(Tokenizer::from_json(tiny_tokenizer_json({}, {{"byte_fallback", true}}), "x"), IoError);
  EXPECT_THROW(Tokenizer::from_json(tiny_tokenizer_json({"a q"}, {{"merges", json::array({"a"})}}), "x"), IoError);
  EXPECT_THROW(Tokenizer::from_json("{not json", "x"), IoError);
  try {
    Tokenizer::from_json(tiny_tokenizer_json({}, {{"type", "Unigram"}}), "some/tokenizer.json");
    ADD_FAILURE() << "expected an IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("some/tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, MissingFileSaysHowToGetIt) {
  try {
    Tokenizer::from_file("/nonexistent/dir/tokenizer.json");
    ADD_FAILURE() << "expected an IoError";
  } catch (const IoError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("/nonexistent/dir/tokenizer.json"), std::string::npos) << m;
    EXPECT_NE(m.find("scripts/install-deps.sh"), std::string::npos) << m;
  }
}

TEST(Tokenizer, Qwen25EncodeCasesMatchTheReference) {
  LBTEST_QWEN_TOKENIZER(tok);
  auto cases = encode_cases();
  ASSERT_EQ(cases.size(), 216u);
  int mismatches = 0;
  for (const auto& c : cases) {
    auto got = tok->encode(c.text);
    if (got != c.ids) ++mismatches;
    EXPECT_EQ(got, c.ids) << "text: " << json(c.text).dump();
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Tokenizer, DecodeOfEncodeIsNfc) {
  LBTEST_QWEN_TOKENIZER(tok);
  for (const auto& c : encode_cases()) {
    EXPECT_EQ(tok->decode(tok->encode(c.text)), nfc(c.text)) << "text: " << json(c.text).dump();
    EXPECT_EQ(tok->decode(c.ids), nfc(c.text)) << "text: " << json(c.text).dump();
  }
  // Decomposed é (e + U+0301) becomes the composed one.
  EXPECT_EQ(tok->encode("e\xCC\x81"), tok->encode("\xC3\xA9"));
  EXPECT_EQ(tok->decode(tok->encode("cafe\xCC\x81")), "caf\xC3\xA9");
}

TEST(Tokenizer, QwenSpecialTokensAndSizes) {
  LBTEST_QWEN_TOKENIZER(tok);
  EXPECT_EQ(tok->token_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tok->token_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok->token_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok->token_id("<tool_call>"), 151657);
  EXPECT_EQ(tok->token_id("no such token"), -1);
  EXPECT_EQ(tok->vocab_size(), 151665);
  EXPECT_EQ(tok->decode({151644, 872, 198}), "<|im_start|>user\n");
  // A partial multi-byte character decodes to U+FFFD, like Hugging Face's ByteLevel decoder.
  ASSERT_EQ(tok->encode("\xD9\xA3"), (std::vector<TokenId>{149, 96}));  // ARABIC-INDIC DIGIT THREE: 2 byte tokens
  EXPECT_EQ(tok->decode({149}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->decode({149, 96}), "\xD9\xA3");
  EXPECT_EQ(tok->decode({96, 13}), "\xEF\xBF\xBD.");
  EXPECT_THROW(tok->decode({151665}), lorabench::Error);
  EXPECT_THROW(tok->decode({-1}), lorabench::Error);
  EXPECT_THROW(tok->encode("bad \xFF byte"), IoError);
}

TEST(Tokenizer, OffsetsIndexTheNormalisedText) {
  LBTEST_QWEN_TOKENIZER(tok);
  std::string text = "<|im_start|>user\nHi cafe\xCC\x81!<|im_end|>";
  std::string norm = tok->normalize(text);
  EXPECT_EQ(norm, "<|im_start|>user\nHi caf\xC3\xA9!<|im_end|>");
  std::vector<size_t> offsets;
  auto ids = tok->encode(text, &offsets);
  ASSERT_EQ(ids.size(), offsets.size());
  size_t at = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(offsets[i], at);
    EXPECT_EQ(norm.compare(at, tok->token_bytes(ids[i]).size(), tok->token_bytes(ids[i])), 0);
    at += tok->token_bytes(ids[i]).size();
  }
  EXPECT_EQ(at, norm.size());
}

TEST(Tokenizer, LongWordsAndRunsRoundTrip) {
  LBTEST_QWEN_TOKENIZER(tok);
  std::string chinese;
  for (int i = 0; i < 400; ++i) chinese += "训练模型需要数据和耐心";  // one \p{L}+ word of 4400 characters
  EXPECT_EQ(tok->decode(tok->encode(chinese)), chinese);
  std::string spaces(200000, ' ');
  spaces += "x";
  auto ids = tok->encode(spaces);
  EXPECT_EQ(tok->decode(ids), spaces);
  EXPECT_LT(ids.size(), 20000u);  // merged into long whitespace tokens
  std::string digits(5000, '7');
  EXPECT_EQ(tok->encode(digits).size(), 5000u);  // \p{N} splits every digit
}

// What Hugging Face tokenizers does, recorded by scripts/make-fixtures.sh tokenizer-split
// (tests/fixtures/tokenizer/make_split_cases.py): Split regexes that can match the empty string, on the
// tests' tiny tokenizer, and tokenizer.json files that tokenizers refuses.
namespace {

const json& hf_split_cases() {
  static const json cases = [] {
    std::ifstream in(std::string(LORABENCH_FIXTURES) + "/tokenizer/hf_split_cases.json");
    EXPECT_TRUE(in.good()) << "missing fixture tests/fixtures/tokenizer/hf_split_cases.json";
    return in ? json::parse(in) : json::object();
  }();
  return cases;
}

json tiny_base() {
  std::ifstream in(std::string(LORABENCH_SOURCE_DIR) + "/" + hf_split_cases().at("base").get<std::string>());
  EXPECT_TRUE(in.good());
  return json::parse(in);
}

json with_split_pattern(json j, const std::string& pattern) {
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", pattern}};
  return j;
}

// Regexes Oniguruma accepts whose meaning PCRE2 does not share (refused, with the reason, instead of
// being matched differently). Each is in the fixture's "patterns" with tokenizers' ids.
const std::vector<std::pair<std::string, std::string>>& knowingly_refused() {
  static const std::vector<std::pair<std::string, std::string>> r = {
      {"(?<!a+)b", "lookbehind assertion is not fixed length"},  // PCRE2 10.42 has fixed-length lookbehinds only
      {"\\x{110000}", "too large"},  // beyond Unicode: Oniguruma takes it (it matches no character)
  };
  return r;
}

}  // namespace

TEST(Tokenizer, SplitRegexesMatchHuggingFaceOnEveryText) {
  const json& f = hf_split_cases();
  const auto texts = f.at("texts").get<std::vector<std::string>>();
  const json base = tiny_base();
  ASSERT_GE(f.at("patterns").size(), 100u);
  int compared = 0;
  for (const auto& c : f.at("patterns")) {
    const std::string pattern = c.at("pattern");
    SCOPED_TRACE("pattern " + json(pattern).dump());
    auto known = std::find_if(knowingly_refused().begin(), knowingly_refused().end(),
                              [&](const auto& k) { return k.first == pattern; });
    if (known != knowingly_refused().end()) {
      try {
        Tokenizer::from_json(with_split_pattern(base, pattern).dump(), "split.json");
        ADD_FAILURE() << "expected a refusal: " << known->second;
      } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find(known->second), std::string::npos) << e.what();
      }
      continue;
    }
    const Tokenizer tok = Tokenizer::from_json(with_split_pattern(base, pattern).dump(), "split.json");
    ASSERT_EQ(c.at("ids").size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      std::vector<size_t> offsets;
      const auto ids = tok.encode(texts[i], &offsets);
      EXPECT_EQ(ids, c.at("ids")[i].get<std::vector<TokenId>>()) << "text " << json(texts[i]).dump();
      EXPECT_EQ(tok.decode(ids), tok.normalize(texts[i])) << "text " << json(texts[i]).dump();
      ++compared;
    }
  }
  EXPECT_GT(compared, 3000);
}

// The example, spelled out: "é" alone and CJK before <|im_end|>, with a regex whose
// \s*(?!\S) matches the empty string at the end of the segment.
TEST(Tokenizer, EmptyMatchAtTheEndOfASegmentAddsNothing) {
  const Tokenizer tok = Tokenizer::from_json(
      with_split_pattern(tiny_base(), "(?i:'s|'t|'re|'v|'d)|[^\\r\\n\\p{L}\\s]+|\\s*(?!\\S)|\\s+").dump(), "x");
  EXPECT_EQ(tok.encode("\xC3\xA9"), (std::vector<TokenId>{127, 102}));
  const std::string text = "\xE4\xBD\xA0\xE5\xA5\xBD<|im_end|>";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST(Tokenizer, RefusesTheRegexesOnigurumaRefuses) {
  const json base = tiny_base();
  ASSERT_GE(hf_split_cases().at("refused_patterns").size(), 5u);
  for (const auto& c : hf_split_cases().at("refused_patterns")) {
    const std::string pattern = c.at("pattern");
    SCOPED_TRACE("pattern " + json(pattern).dump() + ", tokenizers: " + c.at("error").get<std::string>());
    try {
      Tokenizer::from_json(with_split_pattern(base, pattern).dump(), "some/tokenizer.json");
      ADD_FAILURE() << "accepted a regex Hugging Face tokenizers refuses";
    } catch (const IoError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("some/tokenizer.json"), std::string::npos) << m;
      // tokenizers says "Oniguruma error: <message> at line 1 column N": the same message.
      std::string onig = c.at("error");
      onig = onig.substr(onig.find(": ") + 2);
      onig = onig.substr(0, onig.find(" at line "));
      EXPECT_NE(m.find(onig), std::string::npos) << m;
    }
  }
}

TEST(Tokenizer, RefusesTheFilesHuggingFaceRefuses) {
  const json base = tiny_base();
  // Files tokenizers loads that lorabench refuses as unsupported (the substring of its reason).
  const std::map<std::string, std::string> unsupported = {
      {"added token content empty", "empty added token"},
      {"decoder null", "unsupported decoder"},
      {"decoder missing", "unsupported decoder"},
      {"decoder Metaspace", "unsupported decoder"},
      {"padding set", "\"padding\" is set"},
      {"truncation set", "\"truncation\" is set"},
      {"post_processor TemplateProcessing", "unsupported post_processor"},
  };
  int refused = 0;
  for (const auto& c : hf_split_cases().at("files")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    json j = base;
    for (const auto& ch : c.at("changes")) {
      const json::json_pointer ptr(ch.at("pointer").get<std::string>());
      if (ch.at("delete").get<bool>()) {
        j[ptr.parent_pointer()].erase(ptr.back());
      } else {
        j[ptr] = ch.at("value");
      }
    }
    std::string error;
    try {
      Tokenizer::from_json(j.dump(), "some/tokenizer.json");
    } catch (const IoError& e) {
      error = e.what();
      EXPECT_NE(error.find("some/tokenizer.json"), std::string::npos) << error;
    }
    if (!c.at("accepted").get<bool>()) {
      EXPECT_FALSE(error.empty()) << "accepted a file tokenizers refuses (" << c.at("error").get<std::string>() << ")";
      refused += !error.empty();
    } else if (unsupported.count(name)) {
      EXPECT_NE(error.find(unsupported.at(name)), std::string::npos) << error;
    } else {
      EXPECT_TRUE(error.empty()) << error;
    }
  }
  EXPECT_GE(refused, 15);
}
