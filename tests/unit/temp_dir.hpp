// A temporary directory for a test, removed with everything in it at scope exit.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace lbtest {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "lorabench-test-XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace lbtest
