// The collective benchmark behind `lorabench comm`, in the manner of nccl-tests: one driver (BenchRunner)
// owns buffers, timing and checking; each collective contributes its buffer layout, its bus-bandwidth
// factor and its closed-form expected result. The app prints the table and writes the run file
// (docs/comm.md, docs/hdf5-schema-comm.md). Torch-free, HDF5-free.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lorabench/comm/communicator.hpp"

namespace lorabench::comm {

// The benchmarked collectives. The integer values are the `op` codes of /comm/results (stable).
enum class BenchOp { kAllReduce = 0, kAllGather = 1, kReduceScatter = 2, kBroadcast = 3, kAllToAll = 4 };
constexpr int kNumBenchOps = 5;
const char* bench_op_name(BenchOp op);                 // "all_reduce", "all_gather", ...
BenchOp bench_op_from_name(const std::string& name);   // throws ConfigError on an unknown name
std::vector<std::string> bench_op_names();             // indexed by op code

// nccl-tests' bus-bandwidth factor: busbw = algbw * factor, so busbw is comparable with the link speed
// whatever the rank count. all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
// broadcast 1.
double bus_factor(BenchOp op, int ranks);

// How a requested size maps onto one call. `bytes` is nccl-tests' "size": the larger buffer of the call
// (all_gather: the gathered output; reduce_scatter: the input; all_to_all: the send buffer; all_reduce,
// broadcast: the buffer). Sizes are rounded down to whole elements (and to a multiple of ranks for the
// ops that split the buffer into per-rank blocks); `bytes` is 0 when the requested size is too small.
struct BenchLayout {
  size_t bytes = 0;
  size_t count = 0;       // elements of the larger buffer (bytes / element size)
  size_t send_count = 0;  // elements this rank sends
  size_t recv_count = 0;  // elements this rank receives
  size_t block = 0;       // the count argument of the call (per-rank block; the buffer for all_reduce/broadcast)
};
BenchLayout bench_layout(BenchOp op, size_t requested_bytes, DataType t, int ranks);

// min, min*factor, min*factor^2, ... up to and including max (each rounded down to a whole byte).
// REQUIRES: 0 < min <= max; factor > 1 unless min == max.
std::vector<size_t> size_sweep(size_t min_bytes, size_t max_bytes, double factor);
// "4096", "4K", "64M", "1G" (K/M/G are powers of 1024, as in nccl-tests). Throws std::invalid_argument.
size_t parse_bytes(const std::string& text);

struct BenchOptions {
  std::vector<BenchOp> ops = {BenchOp::kAllReduce, BenchOp::kAllGather, BenchOp::kReduceScatter,
                              BenchOp::kBroadcast, BenchOp::kAllToAll};
  size_t min_bytes = 1024;            // Default: 1K
  size_t max_bytes = 16u << 20;       // Default: 16M
  double factor = 4;                  // Default: 4 (size multiplier between rows)
  DataType dtype = DataType::kFloat32;
  int warmup = 5;                     // untimed iterations per row
  int iters = 20;                     // timed iterations per row
  bool check = true;                  // verify every row's result against its closed form
  std::string backend = "mpi";        // mpi | nccl | auto (nccl when built and a GPU is visible)
  std::string output;                 // run file; "" = outputs/<name>/run.h5
  std::string name;                   // run name; empty = comm-<backend>-n<ranks>, numbered when taken
};

// The [comm] keys (ini) and their flags (--min-bytes for min_bytes): one table drives both parsers,
// --help and docs/comm.md.
struct BenchKey {
  const char* key;
  const char* default_value;
  const char* help;
};
const std::vector<BenchKey>& bench_keys();
// Sets one key from text; throws std::invalid_argument with a message for the user (unknown key, bad
// value).
void set_bench_option(BenchOptions& opt, const std::string& key, const std::string& value);
// The resolved value of every key, in table order (for the printed header and /config).
std::vector<std::pair<std::string, std::string>> bench_resolved_values(const BenchOptions& opt);
// Parses an ini text (path for messages) whose only section is [comm]. Unknown keys, other sections,
// duplicate keys, syntax errors and bad values are collected into one ConfigError, one
// "path:line: key: message" per problem. Keys absent from the file keep their value in `opt`.
void parse_bench_ini(const std::string& path, const std::string& text, BenchOptions& opt);
// Cross-key checks (min <= max, factor, iters >= 1, ...). Throws ConfigError listing every problem.
void validate_bench_options(const BenchOptions& opt);

// One row of the result table. Times are seconds per call: the per-rank mean over the timed iterations,
// then min/mean/max over ranks. Identical on every rank.
struct BenchRow {
  BenchOp op = BenchOp::kAllReduce;
  DataType dtype = DataType::kFloat32;
  size_t bytes = 0;
  size_t count = 0;
  int root = -1;                 // broadcast: 0; others: -1
  double time_avg_s = 0, time_min_s = 0, time_max_s = 0;
  double algbw_GBps = 0, busbw_GBps = 0;  // from time_avg_s; GB = 1e9 bytes
  double raw_mpi_time_s = 0, raw_mpi_busbw_GBps = 0;  // the same operation as one blocking MPI call on host memory
  double memcpy_time_s = 0, memcpy_GBps = 0;          // memcpy (device: cudaMemcpy D2D) of `bytes`
  int check_passed = -1;         // 1 passed, 0 failed, -1 not checked
  int64_t wrong = 0;             // elements that differ from the closed form, summed over ranks
  std::string check_detail;      // the first mismatch (rank, element, got, expected), or ""
};

// Owns the buffers (host, or device memory on `cuda_device` when comm.device_buffers()) for sizes up to
// opt.max_bytes: a send and a receive buffer of max_bytes each (device backends: the same on the device,
// plus three host buffers of max_bytes for raw MPI and staging). Every method is collective over `comm`
// and `raw` (the same ranks).
class BenchRunner {
 public:
  BenchRunner(Communicator& comm, MPI_Comm raw, const BenchOptions& opt, int cuda_device = -1);
  ~BenchRunner();
  BenchRunner(const BenchRunner&) = delete;
  BenchRunner& operator=(const BenchRunner&) = delete;

  // Times `op` at `layout` through the communicator (warm-up, then opt.iters calls; a device backend
  // queues all calls and waits once, as nccl-tests does), as raw MPI and as a memcpy, then checks the
  // result with fresh rank-dependent data when opt.check.
  BenchRow run(BenchOp op, const BenchLayout& layout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The rank-dependent test value of element i on rank r for dtype t: small integers, so every partial sum
// of any reduction order is exact (bf16 up to 128 ranks, fp16 up to 512, fp32/int32/int64 far beyond).
double bench_value(DataType t, int rank, size_t i);

}  // namespace lorabench::comm
