#include "lorabench/core/log.hpp"

#include <cstdio>

#include "lorabench/core/mpi_session.hpp"

namespace lorabench::log {

namespace {
int g_rank = 0;
bool g_quiet = false;
}  // namespace

void init(int rank, bool quiet) {
  g_rank = rank;
  g_quiet = quiet;
}
void set_quiet(bool quiet) { g_quiet = quiet; }

void info(const std::string& line) {
  if (g_rank != 0 || g_quiet) return;
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void warn(const std::string& line) {
  std::fprintf(stderr, "%s warning: %s\n", rank_tag().c_str(), line.c_str());
  std::fflush(stderr);
}

void error(const std::string& line) {
  std::fprintf(stderr, "%s error: %s\n", rank_tag().c_str(), line.c_str());
  std::fflush(stderr);
}

void any(const std::string& line) {
  std::fprintf(stdout, "%s %s\n", rank_tag().c_str(), line.c_str());
  std::fflush(stdout);
}

}  // namespace lorabench::log
