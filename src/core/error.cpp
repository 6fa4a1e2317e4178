#include "lorabench/core/error.hpp"

#include <cstring>

namespace lorabench::detail {

std::string format_location(const char* file, int line) {
  // Keep paths short and free of the build machine's layout: from "src/" or "include/" on.
  const char* p = std::strstr(file, "/src/");
  if (p == nullptr) p = std::strstr(file, "/include/");
  if (p == nullptr) p = std::strstr(file, "/postprocess/");
  if (p == nullptr) p = std::strstr(file, "/tests/");
  return std::string(p != nullptr ? p + 1 : file) + ":" + std::to_string(line);
}

void throw_error(const char* kind, const std::string& what, const char* file, int line) {
  (void)kind;
  throw Error(what + " (" + format_location(file, line) + ")");
}

}  // namespace lorabench::detail
