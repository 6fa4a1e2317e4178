// Error types and checking macros shared by every layer.
//
// Inside a rank, failures are exceptions. main() has the only try/catch: a ConfigError exits 2 with one
// message from rank 0; anything else prints "[rank r@host] ..." and calls MPI_Abort so no rank hangs.
#pragma once

#include <stdexcept>
#include <string>

namespace lorabench {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The user's input (ini file, --set, command-line flags) is wrong. Every rank sees the same input and
// detects the same problem, so only rank 0 reports it.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A file (model weights, tokenizer, dataset, checkpoint, run file) is missing, unreadable or malformed.
class IoError : public Error {
 public:
  using Error::Error;
};

// An I/O error that every rank of the job knows about (the ranks agreed on it after the write, e.g. a
// checkpoint or run-file write that failed on rank 0): training stops on every rank together with exit
// code kExitIoError and the same message, instead of one rank aborting the job.
class AgreedIoError : public IoError {
 public:
  using IoError::IoError;
};
constexpr int kExitIoError = 4;

// A collective or communicator failed (MPI, NCCL, a mismatched collective sequence).
class CommError : public Error {
 public:
  using Error::Error;
};

// Training produced a non-finite loss or gradient norm (seen by all ranks in the same step).
class NumericsError : public Error {
 public:
  using Error::Error;
};

namespace detail {
// Builds "<what> (file:line)" and throws E. Out of line so the macros stay small.
[[noreturn]] void throw_error(const char* kind, const std::string& what, const char* file, int line);
std::string format_location(const char* file, int line);
}  // namespace detail

}  // namespace lorabench

// LB_CHECK(cond, message-expression): throws lorabench::Error naming the condition and file:line.
#define LB_CHECK(cond, msg)                                                                     \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      ::lorabench::detail::throw_error("check", std::string("check failed: " #cond ": ") + (msg), \
                                       __FILE__, __LINE__);                                     \
    }                                                                                           \
  } while (0)

// LB_THROW(Type, message-expression): throws Type with file:line appended.
#define LB_THROW(Type, msg) \
  throw Type(std::string(msg) + " (" + ::lorabench::detail::format_location(__FILE__, __LINE__) + ")")
