// lorabench-bench-tokenizer: tokenizer throughput on one core.
//
//   lorabench-bench-tokenizer [--tokenizer FILE] [--file TEXT] [--mb 4] [--repeat 3]
//
// Without --file it encodes a generated mixture (seeded, so every run sees the same text): English-like
// prose with many distinct words, source code with indentation, Chinese, numbers, emoji and whitespace
// runs. The first pass starts with an empty BPE cache (cold); later passes reuse the cache (warm), which is
// what a long dataset sees once the frequent words have been met. MB = 10^6 bytes of UTF-8 input.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lorabench/core/hash.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/data/sft_source.hpp"
#include "lorabench/data/tokenizer.hpp"

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() { return lorabench::splitmix64_next(s); }
  size_t below(size_t n) { return size_t(next() % n); }
};

// Splits a UTF-8 string into its characters.
std::vector<std::string> chars_of(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = lorabench::data::utf8_char_length(std::string_view(s).substr(i));
    if (n == 0) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string generate_mixture(size_t bytes, uint64_t seed) {
  Rng r{seed};
  const char* syll[] = {"ta", "re", "con", "ing", "tion", "pro", "ver", "al", "de", "ment", "ex", "ly", "com",
                        "per", "the", "in", "est", "ous", "ab", "im", "ble", "ter", "ca", "pre", "sta", "ic"};
  const char* common[] = {"the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "with", "was",
                          "on", "be", "by", "this", "are", "model", "data", "training", "rank", "step"};
  const char* code[] = {"def ", "return ", "if (", "for i in range(", "std::vector<int64_t> ", "x += 1;",
                        "}\n", "{\n", "self.", " == ", " != ", "->", "# comment\n", "// TODO\n", "int main() ",
                        "print(f\"{x}\")", "[]", "()", ":\n", "  ", "\t", "import torch\n", "const auto& "};
  const std::vector<std::string> cjk = chars_of(
      "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过"
      "家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从知全问训练模型数据");
  const char* misc[] = {"😀", "👍🏽", "🇺🇸", "é", "ü", "ß", "Ω", "½", "—", "“", "”", "…", "→", "café", "naïve",
                        "こんにちは", "한국어", "Привет", "мир", "１２３"};
  std::string out;
  out.reserve(bytes + 256);
  while (out.size() < bytes) {
    size_t kind = r.below(10);
    size_t words = 20 + r.below(60);
    if (kind < 5) {  // English-like prose
      for (size_t w = 0; w < words; ++w) {
        if (r.below(3) == 0) {
          out += common[r.below(sizeof(common) / sizeof(*common))];
        } else {
          size_t n = 1 + r.below(4);
          std::string word;
          for (size_t k = 0; k < n; ++k) word += syll[r.below(sizeof(syll) / sizeof(*syll))];
          if (r.below(8) == 0) word[0] = char(word[0] - 'a' + 'A');
          out += word;
        }
        size_t p = r.below(20);
        out += p == 0 ? ", " : p == 1 ? ". " : p == 2 ? "'s " : " ";
      }
      out += "\n\n";
    } else if (kind < 7) {  // code
      for (size_t w = 0; w < words; ++w) {
        out += code[r.below(sizeof(code) / sizeof(*code))];
        if (r.below(4) == 0) out += "var_" + std::to_string(r.below(1000));
        if (r.below(6) == 0) out += "\n    ";
      }
      out += "\n";
    } else if (kind < 9) {  // Chinese
      for (size_t w = 0; w < words; ++w) {
        size_t n = 2 + r.below(12);
        for (size_t k = 0; k < n; ++k) out += cjk[r.below(cjk.size())];
        out += r.below(3) == 0 ? "。" : "，";
      }
      out += "\n";
    } else {  // numbers, symbols, emoji, whitespace runs
      for (size_t w = 0; w < words; ++w) {
        size_t p = r.below(4);
        if (p == 0) out += std::to_string(r.next() % 1000000);
        else if (p == 1) out += misc[r.below(sizeof(misc) / sizeof(*misc))];
        else if (p == 2) out += std::string(1 + r.below(6), ' ');
        else out += std::to_string(r.below(100)) + "." + std::to_string(r.below(1000));
        out += ' ';
      }
      out += "\r\n";
    }
  }
  return out;
}

void usage() {
  std::printf("usage: lorabench-bench-tokenizer [--tokenizer FILE] [--file TEXT] [--mb N] [--repeat N]\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path, file;
  double mb = 4;
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tokenizer") tokenizer_path = value();
    else if (a == "--file") file = value();
    else if (a == "--mb") mb = std::atof(value().c_str());
    else if (a == "--repeat") repeat = std::atoi(value().c_str());
    else if (a == "-h" || a == "--help") { usage(); return 0; }
    else { usage(); return 2; }
  }
  if (repeat < 1 || mb <= 0) {
    usage();
    return 2;
  }
  try {
    if (tokenizer_path.empty()) tokenizer_path = lorabench::data::resolve_tokenizer_path("", "");
    auto t0 = std::chrono::steady_clock::now();
    auto tok = lorabench::data::Tokenizer::from_file(tokenizer_path);
    double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string text = file.empty() ? generate_mixture(size_t(mb * 1e6), 1234) : lorabench::read_file(file);

    // Encode in chunks of about 4 KB (a dataset record's size), cut at line ends.
    std::vector<std::string_view> chunks;
    for (size_t b = 0; b < text.size();) {
      size_t e = text.find('\n', std::min(text.size(), b + 4096));
      e = e == std::string::npos ? text.size() : e + 1;
      chunks.emplace_back(text.data() + b, e - b);
      b = e;
    }
    std::printf("tokenizer %s (loaded in %.2f s)\ninput %s: %.2f MB in %zu chunks\n", tokenizer_path.c_str(), load_s,
                file.empty() ? "generated mixture" : file.c_str(), double(text.size()) / 1e6, chunks.size());
    size_t tokens = 0;
    for (int pass = 0; pass < repeat; ++pass) {
      tokens = 0;
      auto s = std::chrono::steady_clock::now();
      for (auto c : chunks) tokens += tok.encode(c).size();
      double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
      std::printf("pass %d (%s cache): %.3f s, %.2f MB/s, %.0f tokens/s, %zu tokens (%.2f bytes/token)\n", pass + 1,
                  pass == 0 ? "cold" : "warm", sec, double(text.size()) / 1e6 / sec, double(tokens) / sec, tokens,
                  double(text.size()) / double(tokens));
    }
    // Decode check on the whole text: the round trip is exact for NFC input.
    auto s = std::chrono::steady_clock::now();
    std::string back;
    for (auto c : chunks) back += tok.decode(tok.encode(c));
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
    bool same = back == tok.normalize(text);
    std::printf("round trip encode+decode: %.2f MB/s, decode(encode(x)) == NFC(x): %s\n", double(text.size()) / 1e6 / sec,
                same ? "yes" : "NO");
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lorabench-bench-tokenizer: %s\n", e.what());
    return 1;
  }
}
