// The frame of the end-to-end checker programs: expectations that print what is wrong and count, and a
// main() that maps the outcome to the exit code the test scripts test.
#pragma once

#include <cstdio>
#include <exception>
#include <string>

namespace lbcheck {

inline int failures = 0;

inline void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    ++failures;
  }
}

// Runs `check`, which performs the checks of the mode named on the command line and returns false when
// it knows no such mode (or arguments): then prints `usage` and returns 2. An exception or a failed
// expectation returns 1; otherwise prints "ok" and returns 0.
template <class Check>
int checker_main(const char* usage, Check check) {
  try {
    if (!check()) {
      std::fprintf(stderr, "usage: %s\n", usage);
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
  if (failures == 0) std::printf("ok\n");
  return failures == 0 ? 0 : 1;
}

}  // namespace lbcheck
