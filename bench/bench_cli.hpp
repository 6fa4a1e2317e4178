// Command lines of the C++ bench tools. Every flag takes one value; --help prints the usage and exits 0;
// an unknown flag, a flag without its value, a number that is not a positive integer or a value outside a
// flag's choices prints what was wrong and the usage and exits 2, so that a mistyped flag never runs a
// long measurement of something else than what was asked for.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace lorabench::bench {

struct Flag {
  const char* name;                  // e.g. "--dtype"
  std::string* text = nullptr;       // a text flag's value
  int* number = nullptr;             // or a positive integer's
  std::vector<std::string> choices;  // a text flag's allowed values (empty: any)
};

[[noreturn]] inline void usage_exit(const char* usage, int code, const std::string& error = "") {
  if (!error.empty()) std::fprintf(stderr, "error: %s\n", error.c_str());
  std::fprintf(code == 0 ? stdout : stderr, "usage: %s\n", usage);
  std::exit(code);
}

inline void parse_flags(int argc, char** argv, const char* usage, const std::vector<Flag>& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") usage_exit(usage, 0);
    const Flag* flag = nullptr;
    for (const Flag& f : flags)
      if (arg == f.name) flag = &f;
    if (!flag) usage_exit(usage, 2, "unknown argument \"" + arg + "\"");
    if (i + 1 >= argc) usage_exit(usage, 2, arg + " needs a value");
    const std::string value = argv[++i];
    if (flag->number) {
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1 || n > 1000000)
        usage_exit(usage, 2, arg + " takes a positive integer, not \"" + value + "\"");
      *flag->number = int(n);
      continue;
    }
    if (!flag->choices.empty()) {
      bool ok = false;
      std::string all;
      for (const std::string& c : flag->choices) {
        ok = ok || c == value;
        all += (all.empty() ? "" : ", ") + c;
      }
      if (!ok) usage_exit(usage, 2, arg + " takes one of " + all + ", not \"" + value + "\"");
    }
    *flag->text = value;
  }
}

}  // namespace lorabench::bench
