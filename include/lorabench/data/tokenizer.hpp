// The Qwen2.5 tokenizer: byte-level BPE read from a Hugging Face tokenizer.json. Torch-free.
//
// encode() does what Hugging Face tokenizers does for Qwen2 / Qwen2.5 (no BOS/EOS is ever added):
//   1. added tokens (<|endoftext|>, <|im_start|>, <|im_end|>, <tool_call>, ...) are matched in the raw
//      text first, leftmost then longest; each becomes its id and splits the text into segments;
//   2. each segment is NFC-normalised (libutf8proc), when the file's normalizer is NFC;
//   3. the pre-tokenizer's Split regex (read from the file; PCRE2 with UTF + UCP, JIT-compiled) cuts the
//      segment into words ("Isolated": every byte belongs to exactly one word; an empty match only ends
//      the text before it, as in Hugging Face's Split, see encode_segment); \s is rewritten to the
//      Unicode White_Space class first, because that is Oniguruma's \s (what Hugging Face compiles the
//      regex with) while PCRE2's also matches U+180E;
//   4. each word's bytes are merged by merge rank (lowest first, leftmost among equals) into vocabulary
//      ids; the vocabulary and merges are kept in raw bytes, the GPT-2 byte-to-unicode map only matters
//      when reading the file.
// decode() concatenates the tokens' bytes (added tokens as their text) and, like Hugging Face's
// ByteLevel decoder, replaces each invalid UTF-8 subsequence (a cut multi-byte character) with U+FFFD.
// So decode(encode(x)) == normalize(x) for every valid UTF-8 string x.
//
// Not thread-safe: encode() keeps a per-word BPE cache and regex scratch space. Use one Tokenizer per
// thread (loading Qwen2.5's 151k-token file takes about 1 s and peaks at ~65 MB).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lorabench::data {

using TokenId = int32_t;

class Tokenizer {
 public:
  // Reads a tokenizer.json. Throws IoError naming the path when the file is missing (with the hint to run
  // scripts/install-deps.sh), is not valid JSON, is one that Hugging Face tokenizers refuses too (an
  // unknown key, an added token missing one of its fields or with a field of the wrong type, a regex
  // Oniguruma does not compile: tests/fixtures/tokenizer/hf_split_cases.json lists the cases), or uses a
  // feature this implementation does not have (a model other than BPE, byte fallback, a normalizer other
  // than NFC/none, a post-processor other than ByteLevel/none, a decoder other than ByteLevel, truncation
  // or padding, added tokens with lstrip/rstrip/single_word): an unsupported tokenizer is refused, never
  // approximated.
  // Added tokens get the ids Hugging Face tokenizers gives them, not the file's "id" fields: in file
  // order, a token listed again keeps its id, one whose content is a vocabulary entry gets that entry's
  // id, any other the next id after the vocabulary (the number of entries) and the added tokens before
  // it. For a file Hugging Face wrote the two agree.
  static Tokenizer from_file(const std::string& path);
  // The same from the file's text; `origin` names it in error messages.
  static Tokenizer from_json(const std::string& json_text, const std::string& origin);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (valid UTF-8; throws IoError otherwise).
  std::vector<TokenId> encode(std::string_view text) const;
  // The same, and offsets[i] = the byte offset in normalize(text) where token i starts (token i covers
  // [offsets[i], offsets[i] + token_bytes(ids[i]).size())). Used to map tokens to chat-template spans.
  std::vector<TokenId> encode(std::string_view text, std::vector<size_t>* offsets) const;
  // Text of `ids`; throws lorabench::Error for an id outside [0, vocab_size()) that names no token.
  std::string decode(const std::vector<TokenId>& ids) const;

  // What encode() tokenizes: NFC applied between added tokens (added tokens are kept verbatim).
  std::string normalize(std::string_view text) const;
  // The raw bytes of one token (an added token's text); throws like decode() for an unknown id.
  const std::string& token_bytes(TokenId id) const;
  // The id of an added token ("<|im_end|>") or of a vocabulary entry given as raw bytes; -1 when none.
  TokenId token_id(std::string_view token) const;
  // One past the largest id (151665 for Qwen2.5; the model's embedding has 151936 rows).
  int vocab_size() const;
  // Where it was read from.
  const std::string& origin() const;

 private:
  struct Impl;
  struct Loader;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The GPT-2 byte-level alphabet: byte b -> one Unicode code point (printable bytes map to themselves, the
// others to U+0100 upwards in byte order). Exposed for tests.
char32_t byte_to_unicode(unsigned char b);

// The length of the valid UTF-8 character at s[0] (1..4), or 0 when the bytes there are not one.
size_t utf8_char_length(std::string_view s);
// True when `s` is entirely valid UTF-8 (no surrogates, no overlong forms, nothing above U+10FFFF). When
// not and `bad_offset` is given, it receives the offset of the first invalid byte.
bool is_valid_utf8(std::string_view s, size_t* bad_offset = nullptr);

}  // namespace lorabench::data
