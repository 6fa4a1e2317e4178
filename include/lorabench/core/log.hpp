// Rank-aware logging. info() prints on rank 0 only (once per job, not once per rank); warn() and
// error() print on the rank that calls them, prefixed with its tag so a multi-rank log stays readable.
#pragma once

#include <string>

namespace lorabench::log {

// Called once after MPI is up. quiet suppresses info() (progress lines) but never warnings or errors.
void init(int rank, bool quiet = false);
void set_quiet(bool quiet);

void info(const std::string& line);   // rank 0, stdout
void warn(const std::string& line);   // this rank, stderr, "[rank r@host] warning: ..."
void error(const std::string& line);  // this rank, stderr, "[rank r@host] error: ..."
void any(const std::string& line);    // this rank, stdout, prefixed with the rank tag

}  // namespace lorabench::log
