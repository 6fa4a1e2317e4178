#include "lorabench/core/mpi_session.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace lorabench {

namespace {
std::string g_rank_tag = "[rank ?]";
}

const std::string& rank_tag() { return g_rank_tag; }

MpiSession::MpiSession(int* argc, char*** argv) {
  // Open MPI's default algorithm for non-blocking all-reduce (libnbc) is 1.5-3x slower than the blocking
  // one from 256 KiB up on shared memory; the ring algorithm matches it (docs/comm.md). DDP's overlapped
  // buckets use MPI_Iallreduce, so pick the ring unless the user chose. Read by Open MPI at init.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    LB_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
  } else {
    MPI_Query_thread(&thread_level_);
  }
  // Errors come back as return codes so LB_MPI_CHECK can turn them into exceptions with context.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  LB_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  LB_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  hostname_ = host;
  g_rank_tag = "[rank " + std::to_string(rank_) + "@" + hostname_ + "]";
}

MpiSession::~MpiSession() {
  for (auto it = before_finalize_.rbegin(); it != before_finalize_.rend(); ++it) (*it)();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string MpiSession::library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, static_cast<size_t>(len));
  auto nl = s.find_first_of("\n\r,");
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string MpiSession::thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return std::to_string(level);
}

void MpiSession::abort(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

namespace detail {
void throw_mpi_error(int rc, const char* expr, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw CommError(rank_tag() + " " + expr + " failed: " + std::string(msg, static_cast<size_t>(len)) +
                  " (" + format_location(file, line) + ")");
}
}  // namespace detail

}  // namespace lorabench
