// The control plane: small host-side MPI collectives for metrics, flags, configuration and agreement on
// errors, used by every layer above comm and by the subcommands (the data plane, gradients and weights,
// goes through the Communicator, which may be NCCL on device memory). Every function is collective over
// `comm`.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lorabench::comm {

double allreduce_sum(MPI_Comm comm, double x);
double allreduce_max(MPI_Comm comm, double x);
double allreduce_min(MPI_Comm comm, double x);
int64_t allreduce_sum(MPI_Comm comm, int64_t x);
// Element-wise sum of a small vector.
void allreduce_sum(MPI_Comm comm, std::vector<double>& v);
// Rank 0 receives every rank's `values` (all ranks pass the same count), in rank order; others get {}.
std::vector<double> gather_to_root(MPI_Comm comm, const std::vector<double>& values);
// Rank 0 receives every rank's `values` (the counts may differ), one vector per rank in rank order;
// others get {}.
std::vector<std::vector<double>> gatherv_to_root(MPI_Comm comm, const std::vector<double>& values);
// Rank `root`'s string on every rank.
std::string broadcast_string(MPI_Comm comm, const std::string& s, int root = 0);
// Rank 0 reads the file at `path` and every rank gets its text; when it cannot be read, every rank throws
// IoError with rank 0's message (which names the path).
std::string read_on_root(MPI_Comm comm, const std::string& path);

// A barrier that sleeps instead of spinning (MPI_Ibarrier tested every millisecond): ranks that wait while
// one rank measures something (the planner's probe) must not take the CPUs it measures on.
void quiet_barrier(MPI_Comm comm);
// Rank 0 decides (ok, message); every rank gets it.
bool broadcast_status(MPI_Comm comm, bool ok, std::string& message);
// Every rank decides: false on every rank when any rank passes false, with the message of the lowest such
// rank (prefixed "rank R: " when it is not rank 0's) in `message` everywhere.
bool agree_status(MPI_Comm comm, bool ok, std::string& message);
// Collective. `error` is this rank's failure of a write it just made ("" = none; in practice rank 0's
// run-file writes): when any rank has one, every rank throws AgreedIoError with the lowest such rank's
// message, so that all ranks stop together (exit code kExitIoError) instead of one aborting the job.
void agree_io(MPI_Comm comm, const std::string& error);
// Runs `f` (this rank's writes, may be a no-op), catching what it throws, then agree_io.
void agreed_writes(MPI_Comm comm, const std::function<void()>& f);

// Every rank's string, in rank order, on every rank.
std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& s);

}  // namespace lorabench::comm
