// Shared by the libFuzzer targets of tests/fuzz (docs/testing.md, "Fuzzing the readers").
//
// What a target checks beyond the sanitizers: a reader given hostile bytes may only fail with one of
// lorabench's own errors (lorabench::Error and its subclasses), and, when `must_name` is given, the
// message must name it (the file, as every reader error of the project does). Any other exception
// (nlohmann::json's type_error, std::out_of_range, std::bad_alloc, ...) escapes LLVMFuzzerTestOneInput,
// which libFuzzer reports as a crash: in main() it would have printed a message naming no file.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "lorabench/core/error.hpp"

namespace lbfuzz {

// One temporary directory per fuzzer process (several fuzzers may run at once), removed at exit.
inline const std::filesystem::path& temp_dir() {
  static const std::filesystem::path dir = [] {
    std::string t = (std::filesystem::temp_directory_path() / "lorabench-fuzz-XXXXXX").string();
    if (mkdtemp(t.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(temp_dir(), ec);
    });
    return std::filesystem::path(t);
  }();
  return dir;
}

// Writes the input to temp_dir()/name (replacing it) and returns the path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::filesystem::path p = temp_dir() / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", p.c_str());
    std::abort();
  }
  return p.string();
}

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs f(); a lorabench::Error is an accepted outcome when its message contains `must_name`.
template <class F>
void expect_clean(const std::string& must_name, F&& f) {
  try {
    f();
  } catch (const lorabench::Error& e) {
    const std::string msg = e.what();
    if (!must_name.empty() && msg.find(must_name) == std::string::npos)
      finding("error message does not name " + must_name + ": " + msg);
  }
}

}  // namespace lbfuzz
