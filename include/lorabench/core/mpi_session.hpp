// The MPI session: the first object in main(). RAII over MPI_Init_thread / MPI_Finalize.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "lorabench/core/error.hpp"

namespace lorabench {

class MpiSession {
 public:
  // Calls MPI_Init_thread requesting MPI_THREAD_MULTIPLE (the level actually provided is recorded).
  // Works without a launcher (singleton MPI), under mpirun and under srun --mpi=pmix.
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  int thread_level() const { return thread_level_; }
  const std::string& hostname() const { return hostname_; }

  // "Open MPI v4.1.4, ..." as MPI_Get_library_version reports it (first line).
  static std::string library_version();

  // "MPI_THREAD_MULTIPLE", ... for a thread level.
  static std::string thread_level_name(int level);

  // Runs `f` in the destructor, before MPI_Finalize (libraries that must shut down while MPI still works).
  void before_finalize(std::function<void()> f) { before_finalize_.push_back(std::move(f)); }

  // Ends every rank of the job with `code`. Use after a failure on one rank so the others do not hang.
  [[noreturn]] static void abort(int code);

 private:
  int rank_ = 0;
  int size_ = 1;
  int thread_level_ = 0;
  std::string hostname_;
  std::vector<std::function<void()>> before_finalize_;
};

// Identifies this rank in messages: "[rank 3@node07]". Set once by MpiSession.
const std::string& rank_tag();

namespace detail {
[[noreturn]] void throw_mpi_error(int rc, const char* expr, const char* file, int line);
}

}  // namespace lorabench

// Checks an MPI call; throws CommError with the call, the MPI error string, file:line, host and rank.
#define LB_MPI_CHECK(call)                                                     \
  do {                                                                         \
    int lb_mpi_rc_ = (call);                                                   \
    if (lb_mpi_rc_ != MPI_SUCCESS) {                                           \
      ::lorabench::detail::throw_mpi_error(lb_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                          \
  } while (0)
