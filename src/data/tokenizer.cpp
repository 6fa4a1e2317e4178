#include "lorabench/data/tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <oniguruma.h>
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::data {

namespace {

using nlohmann::json;

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes keep their code point, the rest are numbered from
// U+0100 in byte order.
std::array<char32_t, 256> make_byte_to_unicode() {
  std::array<char32_t, 256> m{};
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    m[size_t(b)] = printable ? char32_t(b) : char32_t(256 + n++);
  }
  return m;
}
const std::array<char32_t, 256> kByteToUnicode = make_byte_to_unicode();

// Decodes one UTF-8 character (valid input assumed); returns its length.
size_t decode_utf8(const unsigned char* p, char32_t* cp) {
  if (p[0] < 0x80) { *cp = p[0]; return 1; }
  if ((p[0] & 0xE0) == 0xC0) { *cp = char32_t(p[0] & 0x1F) << 6 | (p[1] & 0x3F); return 2; }
  if ((p[0] & 0xF0) == 0xE0) {
    *cp = char32_t(p[0] & 0x0F) << 12 | char32_t(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    return 3;
  }
  *cp = char32_t(p[0] & 0x07) << 18 | char32_t(p[1] & 0x3F) << 12 | char32_t(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
  return 4;
}

// The inverse of kByteToUnicode, indexed by code point (all of them are below U+0144); -1 = not in the
// alphabet.
std::array<int16_t, 512> make_unicode_to_byte() {
  std::array<int16_t, 512> m;
  m.fill(-1);
  for (int b = 0; b < 256; ++b) m[size_t(kByteToUnicode[size_t(b)])] = int16_t(b);
  return m;
}
const std::array<int16_t, 512> kUnicodeToByte = make_unicode_to_byte();

// Converts a byte-level vocabulary string ("Ġthe") back to the raw bytes it stands for (" the").
bool byte_level_to_bytes(std::string_view s, std::string* out) {
  out->clear();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    size_t len = utf8_char_length(s.substr(i));
    if (len == 0 || len > 2) return false;  // the alphabet is U+0021..U+0143: one or two bytes
    char32_t cp = 0;
    decode_utf8(p + i, &cp);
    i += len;
    if (cp >= kUnicodeToByte.size() || kUnicodeToByte[cp] < 0) return false;
    out->push_back(char(kUnicodeToByte[cp]));
  }
  return true;
}

// Appends U+FFFD (the replacement character).
void append_replacement(std::string* out) { out->append("\xEF\xBF\xBD"); }

// The length of the maximal subpart of an ill-formed sequence at s[0] (>= 1): what from_utf8_lossy and
// the WHATWG decoder replace with one U+FFFD.
size_t invalid_subpart_length(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  unsigned char c = p[0];
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c == 0xE0) { need = 2; lo = 0xA0; }
  else if (c == 0xED) { need = 2; hi = 0x9F; }
  else if (c >= 0xE1 && c <= 0xEF) need = 2;
  else if (c == 0xF0) { need = 3; lo = 0x90; }
  else if (c == 0xF4) { need = 3; hi = 0x8F; }
  else if (c >= 0xF1 && c <= 0xF3) need = 3;
  else return 1;
  size_t i = 1;
  for (; i <= need && i < s.size(); ++i) {
    unsigned char b = p[i];
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
  }
  return i;
}

struct PcreCodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct PcreMatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
struct PcreJitStackDeleter {
  void operator()(pcre2_jit_stack* s) const { pcre2_jit_stack_free(s); }
};
struct PcreCompileContextDeleter {
  void operator()(pcre2_compile_context* c) const { pcre2_compile_context_free(c); }
};
struct PcreMatchContextDeleter {
  void operator()(pcre2_match_context* c) const { pcre2_match_context_free(c); }
};

// Oniguruma's (hence Hugging Face tokenizers') \s: the Unicode White_Space property. PCRE2's \s with UCP
// also matches U+180E MONGOLIAN VOWEL SEPARATOR (through \h), which is not White_Space since Unicode 6.3.
constexpr const char* kWhiteSpaceSet =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// Oniguruma's \h and \H (a hexadecimal digit, and not one); PCRE2's are horizontal whitespace.
constexpr const char* kHexDigitSet = "0-9a-fA-F";

// Rewrites the constructs of a Hugging Face (Oniguruma) pattern that PCRE2 reads with another meaning:
// \s and \S into explicit White_Space classes, \h and \H into hex-digit classes, and the interval {,n}
// (Oniguruma: {0,n}; PCRE2 before 10.43: the literal text) into {0,n}. Returns false for \S or \H inside
// a character class (not expressible without nested classes). What else differs: ^ and $ (line anchors
// in Oniguruma) are PCRE2_MULTILINE at compile time.
bool onig_pattern_to_pcre2(const std::string& in, std::string* out) {
  out->clear();
  bool in_class = false;
  auto set = [&](const char* members, bool negated) {
    if (in_class) {
      if (negated) return false;
      *out += members;
    } else {
      *out += std::string(negated ? "[^" : "[") + members + "]";
    }
    return true;
  };
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '\\' && i + 1 < in.size()) {
      char e = in[i + 1];
      ++i;
      bool ok = true;
      if (e == 's' || e == 'S') ok = set(kWhiteSpaceSet, e == 'S');
      else if (e == 'h' || e == 'H') ok = set(kHexDigitSet, e == 'H');
      else *out += std::string{c, e};
      if (!ok) return false;
      continue;
    }
    if (!in_class && c == '{' && i + 2 < in.size() && in[i + 1] == ',' && std::isdigit(static_cast<unsigned char>(in[i + 2]))) {
      size_t j = i + 2;
      while (j < in.size() && std::isdigit(static_cast<unsigned char>(in[j]))) ++j;
      if (j < in.size() && in[j] == '}') {
        *out += "{0";
        continue;  // the ",n}" follows unchanged
      }
    }
    if (!in_class && c == '[') {
      in_class = true;
      *out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < in.size() && in[i + 1] == '^') *out += in[++i];
      if (i + 1 < in.size() && in[i + 1] == ']') *out += in[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    *out += c;
  }
  return true;
}

// Words whose BPE result is remembered; the cache is dropped when it grows past this many entries.
constexpr size_t kWordCacheLimit = 1 << 18;

}  // namespace

char32_t byte_to_unicode(unsigned char b) { return kByteToUnicode[b]; }

size_t utf8_char_length(std::string_view s) {
  if (s.empty()) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  if (p[0] < 0x80) return 1;
  size_t n = invalid_subpart_length(s);
  size_t want = p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : 2;
  return (p[0] >= 0xC2 && p[0] <= 0xF4 && n == want) ? n : 0;
}

bool is_valid_utf8(std::string_view s, size_t* bad_offset) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len = utf8_char_length(s.substr(i));
    if (len == 0) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

namespace {

// Raw bytes -> token id: open addressing over ids whose keys are the tokens' own bytes (bytes_of), so
// the 151k-entry vocabulary needs no second copy of its strings and a lookup is about one cache miss.
class TokenIndex {
 public:
  void reset(size_t expected) {
    size_t n = 16;
    while (n < 2 * expected) n <<= 1;
    slots_.assign(n, -1);
  }
  // Inserts `id` under its bytes; a later insert of the same bytes replaces the earlier id.
  void insert(TokenId id, const std::vector<std::string>& bytes_of) {
    size_t i = slot(bytes_of[size_t(id)], bytes_of);
    slots_[i] = id;
  }
  TokenId find(std::string_view key, const std::vector<std::string>& bytes_of) const {
    return slots_[slot(key, bytes_of)];
  }

 private:
  size_t slot(std::string_view key, const std::vector<std::string>& bytes_of) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = std::hash<std::string_view>{}(key) & mask;; i = (i + 1) & mask) {
      TokenId id = slots_[i];
      if (id < 0 || bytes_of[size_t(id)] == key) return i;
    }
  }
  std::vector<TokenId> slots_;
};

}  // namespace

struct Tokenizer::Impl {
  std::string origin;
  bool nfc = false;
  bool ignore_merges = false;

  TokenIndex index;                                 // raw bytes -> id (vocabulary and added tokens)
  std::vector<std::string> bytes_of;                // id -> raw bytes ("" for an id that names nothing)
  std::vector<bool> known;                          // id -> names a token
  std::array<TokenId, 256> byte_token{};            // the single-byte token of each byte
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, TokenId>> merges;

  struct Added {
    std::string text;
    TokenId id;
  };
  std::vector<Added> added;       // longest first
  std::array<bool, 256> added_first{};  // bytes that start some added token

  std::unique_ptr<pcre2_code, PcreCodeDeleter> regex;
  bool jit = false;
  std::unique_ptr<pcre2_jit_stack, PcreJitStackDeleter> jit_stack;  // grows to 16 MiB (long whitespace runs)
  std::unique_ptr<pcre2_match_context, PcreMatchContextDeleter> match_context;
  mutable std::unique_ptr<pcre2_match_data, PcreMatchDataDeleter> match_data;

  // BPE scratch and cache (hence "not thread-safe").
  mutable std::unordered_map<std::string, std::vector<TokenId>> cache;
  mutable std::string key;
  mutable std::vector<TokenId> sym;
  mutable std::vector<int32_t> prev, next;

  static uint64_t pair_key(TokenId a, TokenId b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

  // The added token that starts at text[pos] (longest), or nullptr.
  const Added* added_at(std::string_view text, size_t pos) const {
    if (!added_first[static_cast<unsigned char>(text[pos])]) return nullptr;
    for (const auto& a : added) {
      if (text.size() - pos >= a.text.size() && std::memcmp(text.data() + pos, a.text.data(), a.text.size()) == 0)
        return &a;
    }
    return nullptr;
  }

  // Calls f(segment_begin, segment_end, added) for the text between added tokens (added == nullptr) and
  // for each added token, in order.
  template <typename F>
  void split_added(std::string_view text, F&& f) const {
    size_t seg = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      const Added* a = added_at(text, i);
      if (!a) continue;
      if (i > seg) f(seg, i, nullptr);
      f(i, i + a->text.size(), a);
      i += a->text.size() - 1;
      seg = i + 1;
    }
    if (seg < text.size()) f(seg, text.size(), nullptr);
  }

  std::string nfc_of(std::string_view s) const {
    if (!nfc) return std::string(s);
    bool ascii = true;
    for (unsigned char c : s) {
      if (c >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) return std::string(s);
    utf8proc_uint8_t* out = nullptr;
    utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                      static_cast<utf8proc_ssize_t>(s.size()), &out,
                                      static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) LB_THROW(IoError, std::string("NFC normalisation failed: ") + utf8proc_errmsg(n));
    std::string r(reinterpret_cast<const char*>(out), size_t(n));
    std::free(out);
    return r;
  }

  // BPE of one word (raw bytes) appended to `out`.
  void bpe(std::string_view word, std::vector<TokenId>* out) const {
    if (word.empty()) LB_THROW(Error, origin + ": internal error: an empty pre-tokenized word");
    if (word.size() == 1) {
      out->push_back(byte_token[static_cast<unsigned char>(word[0])]);
      return;
    }
    key.assign(word.data(), word.size());
    auto hit = cache.find(key);
    if (hit != cache.end()) {
      out->insert(out->end(), hit->second.begin(), hit->second.end());
      return;
    }
    std::vector<TokenId> result;
    if (ignore_merges) {
      TokenId v = index.find(key, bytes_of);
      if (v >= 0) result.push_back(v);
    }
    if (result.empty()) merge_word(word, &result);
    if (cache.size() >= kWordCacheLimit) cache.clear();
    out->insert(out->end(), result.begin(), result.end());
    cache.emplace(key, std::move(result));
  }

  // Merges by rank with a heap of candidate pairs: O(n log n), so a long word (a paragraph of Chinese is
  // one \p{L}+ word) stays cheap. Ties go to the leftmost pair, as in Hugging Face tokenizers.
  void merge_word(std::string_view word, std::vector<TokenId>* result) const {
    const int n = int(word.size());
    sym.resize(size_t(n));
    prev.resize(size_t(n));
    next.resize(size_t(n));
    for (int i = 0; i < n; ++i) {
      sym[size_t(i)] = byte_token[static_cast<unsigned char>(word[size_t(i)])];
      prev[size_t(i)] = i - 1;
      next[size_t(i)] = i + 1 < n ? i + 1 : -1;
    }
    struct Cand {
      int32_t rank;
      int32_t pos;
      TokenId left, right, merged;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto push = [&](int pos) {
      if (pos < 0 || next[size_t(pos)] < 0) return;
      int nx = next[size_t(pos)];
      auto m = merges.find(pair_key(sym[size_t(pos)], sym[size_t(nx)]));
      if (m != merges.end()) heap.push(Cand{m->second.first, pos, sym[size_t(pos)], sym[size_t(nx)], m->second.second});
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      Cand c = heap.top();
      heap.pop();
      int nx = next[size_t(c.pos)];
      // Stale when either side has been merged since the candidate was pushed.
      if (sym[size_t(c.pos)] != c.left || nx < 0 || sym[size_t(nx)] != c.right) continue;
      sym[size_t(c.pos)] = c.merged;
      sym[size_t(nx)] = -1;  // dead
      int after = next[size_t(nx)];
      next[size_t(c.pos)] = after;
      if (after >= 0) prev[size_t(after)] = c.pos;
      if (prev[size_t(c.pos)] >= 0) push(prev[size_t(c.pos)]);
      push(c.pos);
    }
    for (int i = 0; i >= 0; i = next[size_t(i)]) result->push_back(sym[size_t(i)]);
  }

  // One search of the pre-tokenizer regex from byte `start` of `seg`: true and [*b, *e) for the leftmost
  // match, false when there is none.
  bool search(std::string_view seg, size_t start, size_t* b, size_t* e) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(seg.data());
    int rc = jit ? pcre2_jit_match(regex.get(), subject, seg.size(), start, PCRE2_NO_UTF_CHECK, match_data.get(),
                                   match_context.get())
                 : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // no JIT, or its stack is too small: the interpreter
      rc = pcre2_match(regex.get(), subject, seg.size(), start, PCRE2_NO_UTF_CHECK, match_data.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) LB_THROW(IoError, origin + ": pre-tokenizer regex failed (PCRE2 error " + std::to_string(rc) + ")");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_data.get());
    *b = ov[0];
    *e = ov[1];
    return true;
  }

  // Pre-tokenizes one normalised segment and BPE-encodes its words. The words are what Hugging Face's
  // Split(behavior = Isolated) makes of the regex's matches as its regex iterator finds them (onig's
  // find_iter): every match is a word, and so is the text between two matches. An empty match is a
  // boundary only: it ends the text before it, but is no word itself; an empty match at the position
  // where the previous match ended is not taken, and the next search starts one character later, so the
  // character stepped over belongs to the text after it (not to a word of its own).
  void encode_segment(std::string_view seg, size_t base, std::vector<TokenId>* ids,
                      std::vector<size_t>* offsets) const {
    auto word = [&](size_t b, size_t e) {  // a word is never empty: b < e <= seg.size()
      size_t first = ids->size();
      bpe(seg.substr(b, e - b), ids);
      if (offsets) {
        size_t at = base + b;
        for (size_t k = first; k < ids->size(); ++k) {
          offsets->push_back(at);
          at += bytes_of[size_t((*ids)[k])].size();
        }
      }
    };
    size_t emitted = 0;           // seg[0, emitted) is in words already
    size_t start = 0;             // where the next search starts
    size_t last_end = SIZE_MAX;   // end of the last match taken (none yet)
    while (start <= seg.size()) {
      size_t b = 0, e = 0;
      if (!search(seg, start, &b, &e)) break;
      if (b == e && e == last_end) {  // an empty match right after the last match: step over a character
        start += std::max<size_t>(1, utf8_char_length(seg.substr(start)));
        continue;
      }
      if (b > emitted) word(emitted, b);
      if (e > b) word(b, e);
      emitted = e;
      start = last_end = e;
    }
    if (emitted < seg.size()) word(emitted, seg.size());
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream probe(path, std::ios::binary);
  if (!probe) {
    throw IoError("tokenizer file " + path +
                  " not found or unreadable; run scripts/install-deps.sh to fetch the Qwen2.5 tokenizer "
                  "(or set data.tokenizer)");
  }
  probe.close();
  return from_json(read_file(path), path);
}

namespace {

// Reading a tokenizer.json, step by step. Each step refuses what Hugging Face tokenizers refuses (its serde
// layout: unknown keys, missing fields, wrong types; Oniguruma's verdict on the regex) and what lorabench
// does not implement, with the reason; `fail` prefixes the file's name.
using Fail = std::function<IoError(const std::string&)>;

// The file's top level: only the keys tokenizers knows; truncation and padding unset (lorabench
// truncates to data.seq_len and pads itself); a post-processor that adds nothing (ByteLevel or none);
// the ByteLevel decoder (decode() is its byte-level inverse).
void check_layout(const json& j, const Fail& fail) {
  if (!j.is_object()) throw fail("not a tokenizer.json (the top level is not an object)");
  static const char* const kKeys[] = {"version", "truncation", "padding", "added_tokens", "normalizer",
                                      "pre_tokenizer", "post_processor", "decoder", "model"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return it.key() == k; }) == std::end(kKeys))
      throw fail("unknown key \"" + it.key() + "\" (Hugging Face tokenizers refuses it too)");
  }
  for (const char* k : {"truncation", "padding"}) {
    if (j.contains(k) && !j.at(k).is_null())
      throw fail(std::string("\"") + k + "\" is set: not supported (lorabench truncates to data.seq_len and pads itself)");
  }
  auto type_of = [&](const char* key) -> std::string {
    const json& v = j.at(key);
    if (!v.is_object() || !v.contains("type") || !v.at("type").is_string())
      throw fail(std::string("\"") + key + "\" has no type: " + v.dump());
    return v.at("type").get<std::string>();
  };
  if (j.contains("post_processor") && !j.at("post_processor").is_null() && type_of("post_processor") != "ByteLevel")
    throw fail("unsupported post_processor " + j.at("post_processor").dump() + " (only ByteLevel or none)");
  if (!j.contains("decoder") || j.at("decoder").is_null() || type_of("decoder") != "ByteLevel")
    throw fail("unsupported decoder " + j.value("decoder", json()).dump() + " (only ByteLevel)");
}

// Normalizer: NFC or none.
bool read_normalizer(const json& j, const Fail& fail) {
  const json& norm = j.at("normalizer");
  if (norm.is_null()) return false;
  if (norm.is_object() && norm.value("type", json()) == "NFC") return true;
  throw fail("unsupported normalizer " + norm.dump());
}

// Pre-tokenizer: Sequence[Split(Regex, Isolated), ByteLevel(use_regex = false)]; returns the regex.
std::string read_split_pattern(const json& j, const Fail& fail) {
  const json& pre = j.at("pre_tokenizer");
  std::vector<json> steps;
  if (pre.at("type") == "Sequence") {
    for (const auto& s : pre.at("pretokenizers")) steps.push_back(s);
  } else {
    steps.push_back(pre);
  }
  std::string pattern;
  bool byte_level = false;
  for (const auto& s : steps) {
    const std::string type = s.at("type");
    if (type == "Split" && pattern.empty()) {
      const std::string behavior = s.at("behavior");
      static const char* const kBehaviors[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
      if (std::find_if(std::begin(kBehaviors), std::end(kBehaviors), [&](const char* k) { return behavior == k; }) ==
          std::end(kBehaviors))
        throw fail("unknown Split behavior \"" + behavior + "\"");
      const bool invert = s.at("invert").get<bool>();
      if (behavior != "Isolated" || invert || !s.at("pattern").contains("Regex"))
        throw fail("unsupported pre-tokenizer step " + s.dump() + " (only a Regex Split, Isolated, not inverted)");
      pattern = s.at("pattern").at("Regex");
    } else if (type == "ByteLevel" && !s.value("add_prefix_space", false) && !s.value("use_regex", true)) {
      byte_level = true;
    } else {
      throw fail("unsupported pre-tokenizer step " + s.dump());
    }
  }
  if (pattern.empty() || !byte_level) throw fail("expected a Split regex and a ByteLevel pre-tokenizer");
  return pattern;
}

// Hugging Face tokenizers compiles the Split regex with Oniguruma (UTF-8, its default syntax): a regex
// Oniguruma refuses makes tokenizers refuse the file, with Oniguruma's message, and so does lorabench
// (PCRE2, which lorabench matches with, accepts some of them: branch reset (?|, (*VERB)s, (?C) callouts).
void check_with_oniguruma(const std::string& pattern, const Fail& fail) {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
  OnigErrorInfo info{};
  regex_t* reg = nullptr;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int rc = onig_new(&reg, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (rc == ONIG_NORMAL) {
    onig_free(reg);
    return;
  }
  OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
  onig_error_code_to_str(msg, rc, &info);
  throw fail(std::string("pre-tokenizer regex refused by Oniguruma (as Hugging Face tokenizers refuses it): ") +
             reinterpret_cast<const char*>(msg));
}

// Every added token is an object with all of tokenizers' AddedToken fields (serde has no defaults for
// them: a misspelled "lstrip" is a missing field there), each of its type.
void check_added_token_fields(const json& a, size_t index, const Fail& fail) {
  const std::string at = "added token " + std::to_string(index);
  if (!a.is_object()) throw fail(at + " is not an object");
  for (const char* k : {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}) {
    if (!a.contains(k)) throw fail(at + ": missing field \"" + k + "\"");
  }
  if (!a.at("id").is_number_unsigned()) throw fail(at + ": \"id\" " + a.at("id").dump() + " is not an unsigned integer");
  if (!a.at("content").is_string()) throw fail(at + ": \"content\" is not a string");
  for (const char* k : {"single_word", "lstrip", "rstrip", "normalized", "special"}) {
    if (!a.at(k).is_boolean()) throw fail(at + ": \"" + k + "\" is not a boolean");
  }
  for (auto it = a.begin(); it != a.end(); ++it) {
    static const char* const kFields[] = {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"};
    if (std::find_if(std::begin(kFields), std::end(kFields), [&](const char* k) { return it.key() == k; }) == std::end(kFields))
      throw fail(at + ": unknown field \"" + it.key() + "\"");
  }
}

}  // namespace

// The Impl's tables from the parsed file; each reader a step.
struct Tokenizer::Loader {
  const Fail& fail;
  Impl& impl;
  size_t entries = 0;  // vocabulary entries + added tokens: ids are expected near this
  std::string raw;     // scratch

  // Ids index tables of max_id + 1 entries: each must be an integer, and the largest one near the
  // number of tokens (Hugging Face numbers them densely), or one crafted id would cost gigabytes.
  TokenId id_of(const json& v) const {
    if (!v.is_number_integer()) throw fail("token id " + v.dump() + " is not an integer");
    const int64_t id = v.is_number_unsigned() ? int64_t(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX)) : v.get<int64_t>();
    if (id < 0) throw fail("negative token id");
    if (uint64_t(id) >= 2 * uint64_t(entries) + 1024)
      throw fail("token id " + std::to_string(id) + " is far beyond the " + std::to_string(entries) +
                 " tokens listed (ids are expected to be dense)");
    return TokenId(id);
  }

  // Model: byte-level BPE without the features lorabench does not implement.
  void check_model(const json& model) {
    if (model.at("type") != "BPE") throw fail("unsupported model type " + model.at("type").dump());
    if (model.value("byte_fallback", false)) throw fail("BPE byte_fallback is not supported");
    if (!model.value("dropout", json()).is_null()) throw fail("BPE dropout is not supported");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json v = model.value(k, json());
      if (!v.is_null() && !(v.is_string() && v.get<std::string>().empty())) throw fail(std::string(k) + " is not supported");
    }
    impl.ignore_merges = model.value("ignore_merges", false);
  }

  void read_vocab(const json& vocab) {
    TokenId max_id = -1;
    for (const auto& v : vocab) max_id = std::max(max_id, id_of(v));
    if (max_id < 0) throw fail("empty vocabulary");
    impl.bytes_of.assign(size_t(max_id) + 1, std::string());
    impl.known.assign(size_t(max_id) + 1, false);
    impl.index.reset(entries);
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      TokenId id = id_of(it.value());
      if (impl.known[size_t(id)]) throw fail("token id " + std::to_string(id) + " is listed twice");
      if (!byte_level_to_bytes(it.key(), &impl.bytes_of[size_t(id)])) throw fail("vocabulary entry outside the byte-level alphabet");
      impl.known[size_t(id)] = true;
      impl.index.insert(id, impl.bytes_of);
    }
    for (int b = 0; b < 256; ++b) {
      TokenId id = impl.index.find(std::string(1, char(b)), impl.bytes_of);
      if (id < 0) throw fail("byte " + std::to_string(b) + " has no token");
      impl.byte_token[size_t(b)] = id;
    }
  }

  TokenId merge_token(std::string_view s) {
    if (!byte_level_to_bytes(s, &raw)) throw fail("merge outside the byte-level alphabet: " + std::string(s));
    TokenId id = impl.index.find(raw, impl.bytes_of);
    if (id < 0) throw fail("merge names a token missing from the vocabulary: " + std::string(s));
    return id;
  }

  void read_merges(const json& merges) {
    int32_t rank = 0;
    std::string joined;
    impl.merges.reserve(merges.size());
    for (const auto& m : merges) {
      std::string_view a, b;
      if (m.is_string()) {  // "Ġ t" (the byte-level alphabet has no plain space)
        std::string_view s = m.get_ref<const std::string&>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) throw fail("bad merge \"" + std::string(s) + "\"");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["Ġ", "t"]
        a = m[0].get_ref<const std::string&>();
        b = m[1].get_ref<const std::string&>();
      } else {
        throw fail("bad merge " + m.dump());
      }
      TokenId ia = merge_token(a), ib = merge_token(b);
      joined = impl.bytes_of[size_t(ia)];
      joined += impl.bytes_of[size_t(ib)];
      TokenId merged = impl.index.find(joined, impl.bytes_of);
      if (merged < 0) throw fail("merge \"" + std::string(a) + " " + std::string(b) + "\" makes a token missing from the vocabulary");
      // A pair listed twice keeps its first (lowest) rank.
      impl.merges.emplace(Impl::pair_key(ia, ib), std::make_pair(rank++, merged));
    }
  }

  // Added tokens. Hugging Face tokenizers does not take their ids from the file: loading a
  // tokenizer.json adds them one by one, in file order, and each gets (AddedVocabulary::add_tokens)
  //   - the id it already has, when its content was added before (the same token listed twice);
  //   - else the vocabulary id, when its content is a vocabulary entry (byte-level spelling);
  //   - else the next id: the number of vocabulary entries for the first such token, then one past
  //     the largest id given to an added token so far.
  // The "id" in the file is only compared with that (a mismatch is a logged warning there). Taking
  // it as the id instead let two tokens listed with one id share it: both encoded to that id, which
  // decoded as the later one (<|im_start|> came back as <|im_end|>; fuzz_tokenizer found it).
  void read_added(const json& added, TokenId vocab_entries) {
    std::unordered_map<std::string, TokenId> added_ids;  // content -> id (Hugging Face's added_tokens_map)
    TokenId max_added = -1;
    std::vector<Impl::Added> fresh;  // added tokens that are not vocabulary entries
    for (size_t i = 0; i < added.size(); ++i) {
      const json& a = added[i];
      check_added_token_fields(a, i, fail);
      if (a.at("lstrip").get<bool>() || a.at("rstrip").get<bool>() || a.at("single_word").get<bool>())
        throw fail("added token " + a.dump() + ": lstrip/rstrip/single_word are not supported");
      std::string text = a.at("content");
      (void)id_of(a.at("id"));  // must still be a sane id, although the id is assigned as above
      if (text.empty()) throw fail("empty added token (not supported)");
      if (added_ids.count(text)) continue;
      TokenId id = byte_level_to_bytes(text, &raw) ? impl.index.find(raw, impl.bytes_of) : -1;
      if (id >= 0) {
        // A vocabulary entry: it encodes to the vocabulary token, which decodes (through the ByteLevel
        // decoder, as in Hugging Face) to the entry's bytes. Those differ from the text when it spells
        // bytes in the byte-level alphabet ("Ġx" is " x"): encode/decode would no longer round-trip
        // (decode(encode(x)) == normalize(x), the offsets), so such a file is refused.
        if (raw != text)
          throw fail("added token " + json(text).dump() +
                     " is a vocabulary entry in the byte-level alphabet, whose bytes are not its text: not supported");
      } else {
        id = max_added < vocab_entries ? vocab_entries : max_added + 1;
        if (size_t(id) < impl.known.size() && impl.known[size_t(id)])
          throw fail("added token " + json(text).dump() + " gets id " + std::to_string(id) +
                     " (added tokens are numbered from the number of vocabulary entries, " +
                     std::to_string(vocab_entries) + "), which is already a vocabulary token's id");
        fresh.push_back(Impl::Added{text, id});
      }
      added_ids.emplace(text, id);
      max_added = std::max(max_added, id);
      impl.added.push_back(Impl::Added{text, id});
      impl.added_first[static_cast<unsigned char>(text[0])] = true;
    }
    if (size_t(max_added + 1) > impl.bytes_of.size()) {
      impl.bytes_of.resize(size_t(max_added) + 1);
      impl.known.resize(size_t(max_added) + 1, false);
    }
    for (const auto& a : fresh) {
      impl.bytes_of[size_t(a.id)] = a.text;
      impl.known[size_t(a.id)] = true;
      impl.index.insert(a.id, impl.bytes_of);
    }
    std::stable_sort(impl.added.begin(), impl.added.end(),
                     [](const Impl::Added& x, const Impl::Added& y) { return x.text.size() > y.text.size(); });
  }

  // The Split regex for PCRE2 (\s rewritten; JIT where it compiles).
  void compile_regex(const std::string& pattern) {
    std::string pcre_pattern;
    if (!onig_pattern_to_pcre2(pattern, &pcre_pattern)) throw fail("unsupported \\S or \\H inside a character class");
    int err = 0;
    PCRE2_SIZE err_off = 0;
    // Oniguruma's ^ and $ are line anchors and its newline is \n alone: PCRE2's multiline mode with LF.
    std::unique_ptr<pcre2_compile_context, PcreCompileContextDeleter> ctx(pcre2_compile_context_create(nullptr));
    if (!ctx || pcre2_set_newline(ctx.get(), PCRE2_NEWLINE_LF) != 0) throw fail("cannot set up PCRE2's compile context");
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre_pattern.data()), pcre_pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &err_off, ctx.get());
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      throw fail("pre-tokenizer regex: not supported by lorabench's regex engine (PCRE2, at offset " +
                 std::to_string(err_off) + "): " + reinterpret_cast<const char*>(msg));
    }
    impl.regex.reset(code);
    impl.jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    if (impl.jit) {
      impl.jit_stack.reset(pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr));
      impl.match_context.reset(pcre2_match_context_create(nullptr));
      if (!impl.jit_stack || !impl.match_context) throw fail("out of memory for the PCRE2 JIT stack");
      pcre2_jit_stack_assign(impl.match_context.get(), nullptr, impl.jit_stack.get());
    }
    impl.match_data.reset(pcre2_match_data_create_from_pattern(code, nullptr));
  }
};

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& origin) {
  const Fail fail = [&](const std::string& what) { return IoError(origin + ": " + what); };
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw fail(std::string("not a valid tokenizer.json: ") + e.what());
  }
  auto impl = std::make_unique<Impl>();
  impl->origin = origin;
  try {
    check_layout(j, fail);
    impl->nfc = read_normalizer(j, fail);
    const std::string pattern = read_split_pattern(j, fail);
    check_with_oniguruma(pattern, fail);
    const json& model = j.at("model");
    const json& vocab = model.at("vocab");
    const json& added = j.at("added_tokens");
    Loader load{fail, *impl, vocab.size() + added.size(), {}};
    load.check_model(model);
    load.read_vocab(vocab);
    load.read_merges(model.at("merges"));
    load.read_added(added, TokenId(vocab.size()));
    load.compile_regex(pattern);
  } catch (const json::exception& e) {
    throw fail(std::string("malformed tokenizer.json: ") + e.what());
  }
  return Tokenizer(std::move(impl));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text) const { return encode(text, nullptr); }

std::vector<TokenId> Tokenizer::encode(std::string_view text, std::vector<size_t>* offsets) const {
  size_t bad = 0;
  if (!is_valid_utf8(text, &bad)) throw IoError("text to encode is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  if (offsets) offsets->clear();
  size_t out_pos = 0;  // offset in normalize(text)
  impl_->split_added(text, [&](size_t b, size_t e, const Impl::Added* a) {
    if (a) {
      ids.push_back(a->id);
      if (offsets) offsets->push_back(out_pos);
      out_pos += a->text.size();
      return;
    }
    std::string seg = impl_->nfc_of(text.substr(b, e - b));
    impl_->encode_segment(seg, out_pos, &ids, offsets);
    out_pos += seg.size();
  });
  return ids;
}

std::string Tokenizer::normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  impl_->split_added(text, [&](size_t b, size_t e, const Impl::Added* a) {
    if (a) out += a->text;
    else out += impl_->nfc_of(text.substr(b, e - b));
  });
  return out;
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
  if (id < 0 || size_t(id) >= impl_->known.size() || !impl_->known[size_t(id)])
    LB_THROW(Error, "token id " + std::to_string(id) + " is not in the vocabulary of " + impl_->origin);
  return impl_->bytes_of[size_t(id)];
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids) const {
  std::string bytes;
  for (TokenId id : ids) bytes += token_bytes(id);
  if (is_valid_utf8(bytes)) return bytes;
  std::string out;
  out.reserve(bytes.size() + 8);
  std::string_view v(bytes);
  size_t i = 0;
  while (i < v.size()) {
    size_t len = utf8_char_length(v.substr(i));
    if (len > 0) {
      out.append(v.data() + i, len);
      i += len;
    } else {
      append_replacement(&out);
      i += invalid_subpart_length(v.substr(i));
    }
  }
  return out;
}

TokenId Tokenizer::token_id(std::string_view token) const {
  return impl_->index.find(token, impl_->bytes_of);
}

int Tokenizer::vocab_size() const { return int(impl_->bytes_of.size()); }

const std::string& Tokenizer::origin() const { return impl_->origin; }

}  // namespace lorabench::data
