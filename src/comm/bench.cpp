#include "lorabench/comm/bench.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

#include "lorabench/comm/half.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/comm/nccl_communicator.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/mpi_session.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"

namespace lorabench::comm {

// ---- the collectives: names, bus factors, layouts -------------------------------------------------------

const char* bench_op_name(BenchOp op) {
  switch (op) {
    case BenchOp::kAllReduce: return "all_reduce";
    case BenchOp::kAllGather: return "all_gather";
    case BenchOp::kReduceScatter: return "reduce_scatter";
    case BenchOp::kBroadcast: return "broadcast";
    case BenchOp::kAllToAll: return "all_to_all";
  }
  return "?";
}

std::vector<std::string> bench_op_names() {
  std::vector<std::string> out;
  for (int i = 0; i < kNumBenchOps; ++i) out.emplace_back(bench_op_name(static_cast<BenchOp>(i)));
  return out;
}

BenchOp bench_op_from_name(const std::string& name) {
  for (int i = 0; i < kNumBenchOps; ++i)
    if (name == bench_op_name(static_cast<BenchOp>(i))) return static_cast<BenchOp>(i);
  throw ConfigError("unknown collective \"" + name + "\" (expected " + join(bench_op_names(), ", ") + ")");
}

double bus_factor(BenchOp op, int ranks) {
  const double n = ranks;
  switch (op) {
    case BenchOp::kAllReduce: return 2.0 * (n - 1) / n;
    case BenchOp::kAllGather:
    case BenchOp::kReduceScatter:
    case BenchOp::kAllToAll: return (n - 1) / n;
    case BenchOp::kBroadcast: return 1.0;
  }
  return 1.0;
}

BenchLayout bench_layout(BenchOp op, size_t requested_bytes, DataType t, int ranks) {
  const size_t es = dtype_size(t);
  const size_t n = static_cast<size_t>(ranks);
  BenchLayout l;
  switch (op) {
    case BenchOp::kAllReduce:
    case BenchOp::kBroadcast:
      l.count = requested_bytes / es;
      l.send_count = l.recv_count = l.block = l.count;
      break;
    case BenchOp::kAllGather:
      l.block = requested_bytes / (es * n);
      l.count = l.block * n;
      l.send_count = l.block;
      l.recv_count = l.count;
      break;
    case BenchOp::kReduceScatter:
      l.block = requested_bytes / (es * n);
      l.count = l.block * n;
      l.send_count = l.count;
      l.recv_count = l.block;
      break;
    case BenchOp::kAllToAll:
      l.block = requested_bytes / (es * n);
      l.count = l.block * n;
      l.send_count = l.recv_count = l.count;
      break;
  }
  l.bytes = l.count * es;
  return l;
}

std::vector<size_t> size_sweep(size_t min_bytes, size_t max_bytes, double factor) {
  LB_CHECK(min_bytes > 0 && min_bytes <= max_bytes, "size sweep needs 0 < min <= max");
  LB_CHECK(factor > 1.0 || min_bytes == max_bytes, "size sweep needs factor > 1");
  std::vector<size_t> out;
  double s = static_cast<double>(min_bytes);
  while (s <= static_cast<double>(max_bytes) * (1 + 1e-12)) {
    size_t b = static_cast<size_t>(std::floor(s + 1e-9));
    if (out.empty() || b != out.back()) out.push_back(b);
    if (min_bytes == max_bytes) break;
    s *= factor;
  }
  return out;
}

size_t parse_bytes(const std::string& text) {
  std::string s = trim(text);
  if (s.empty()) throw std::invalid_argument("expected a size such as 4096, 64K, 16M or 1G");
  size_t mult = 1;
  char last = s.back();
  if (last == 'K' || last == 'k') mult = size_t(1) << 10;
  if (last == 'M' || last == 'm') mult = size_t(1) << 20;
  if (last == 'G' || last == 'g') mult = size_t(1) << 30;
  if (mult != 1) s.pop_back();
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument("\"" + text + "\" is not a size (expected e.g. 4096, 64K, 16M or 1G)");
  unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (v > (~size_t(0)) / mult) throw std::invalid_argument("\"" + text + "\" is too large");
  return static_cast<size_t>(v) * mult;
}

// ---- options ------------------------------------------------------------------------------------------

const std::vector<BenchKey>& bench_keys() {
  static const std::vector<BenchKey> keys = {
      {"ops", "all_reduce,all_gather,reduce_scatter,broadcast,all_to_all", "collectives to run, comma-separated"},
      {"min_bytes", "1K", "smallest size (bytes; K/M/G suffixes are powers of 1024)"},
      {"max_bytes", "16M", "largest size"},
      {"factor", "4", "size multiplier between rows (> 1)"},
      {"dtype", "fp32", "element type: fp32, bf16, fp16, int32, int64, fp64"},
      {"warmup", "5", "untimed calls per row"},
      {"iters", "20", "timed calls per row"},
      {"check", "1", "verify each row against its closed form (1/0)"},
      {"backend", "mpi", "communicator: mpi, nccl, auto (nccl when built and a GPU is visible)"},
      {"output", "", "run file to write (default outputs/<name>/run.h5; never overwritten)"},
      {"name", "", "run name (default comm-<backend>-n<ranks>, numbered when taken: -2, -3, ...)"},
  };
  return keys;
}

namespace {

int parse_int(const std::string& v, int lo, int hi) {
  std::string s = trim(v);
  char* end = nullptr;
  long x = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0') throw std::invalid_argument("\"" + v + "\" is not an integer");
  if (x < lo || x > hi)
    throw std::invalid_argument(strformat("%ld is out of range [%d, %d]", x, lo, hi));
  return static_cast<int>(x);
}

bool parse_bool(const std::string& v) {
  std::string s = trim(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  throw std::invalid_argument("\"" + v + "\" is not a boolean (1/0, true/false)");
}

std::string bytes_text(size_t b) {
  if (b >= (size_t(1) << 30) && b % (size_t(1) << 30) == 0) return std::to_string(b >> 30) + "G";
  if (b >= (size_t(1) << 20) && b % (size_t(1) << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b >= (size_t(1) << 10) && b % (size_t(1) << 10) == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

}  // namespace

void set_bench_option(BenchOptions& o, const std::string& key, const std::string& value) {
  const std::string v = trim(value);
  if (key == "ops") {
    std::vector<BenchOp> ops;
    for (const auto& name : split(v, ',')) {
      try {
        BenchOp op = bench_op_from_name(name);
        if (std::find(ops.begin(), ops.end(), op) != ops.end())
          throw std::invalid_argument("\"" + name + "\" listed twice");
        ops.push_back(op);
      } catch (const ConfigError& e) {
        throw std::invalid_argument(e.what());
      }
    }
    if (ops.empty()) throw std::invalid_argument("needs at least one collective");
    o.ops = ops;
  } else if (key == "min_bytes") {
    o.min_bytes = parse_bytes(v);
  } else if (key == "max_bytes") {
    o.max_bytes = parse_bytes(v);
  } else if (key == "factor") {
    char* end = nullptr;
    double f = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(f)) throw std::invalid_argument("\"" + v + "\" is not a number");
    if (f <= 1.0) throw std::invalid_argument("must be > 1");
    o.factor = f;
  } else if (key == "dtype") {
    try {
      o.dtype = dtype_from_name(v);
    } catch (const ConfigError& e) {
      throw std::invalid_argument(e.what());
    }
  } else if (key == "warmup") {
    o.warmup = parse_int(v, 0, 1000000);
  } else if (key == "iters") {
    o.iters = parse_int(v, 1, 100000000);
  } else if (key == "check") {
    o.check = parse_bool(v);
  } else if (key == "backend") {
    if (v != "mpi" && v != "nccl" && v != "auto")
      throw std::invalid_argument("\"" + v + "\" is not a backend (expected mpi, nccl or auto)");
    o.backend = v;
  } else if (key == "output") {
    o.output = v;
  } else if (key == "name") {
    if (v.empty() || v.find('/') != std::string::npos)
      throw std::invalid_argument("must be non-empty and contain no '/'");
    o.name = v;
  } else {
    std::vector<std::string> known;
    for (const auto& k : bench_keys()) known.emplace_back(k.key);
    throw std::invalid_argument("unknown key (known: " + join(known, ", ") + ")");
  }
}

std::vector<std::pair<std::string, std::string>> bench_resolved_values(const BenchOptions& o) {
  std::vector<std::string> ops;
  for (auto op : o.ops) ops.emplace_back(bench_op_name(op));
  return {
      {"ops", join(ops, ",")},
      {"min_bytes", bytes_text(o.min_bytes)},
      {"max_bytes", bytes_text(o.max_bytes)},
      {"factor", strformat("%g", o.factor)},
      {"dtype", dtype_name(o.dtype)},
      {"warmup", std::to_string(o.warmup)},
      {"iters", std::to_string(o.iters)},
      {"check", o.check ? "1" : "0"},
      {"backend", o.backend},
      {"output", o.output},
      {"name", o.name},
  };
}

void parse_bench_ini(const std::string& path, const std::string& text, BenchOptions& opt) {
  std::vector<std::string> problems;
  std::map<std::string, int> seen;
  std::string section;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string raw = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    std::string line = raw;
    size_t hash = line.find_first_of("#;");
    if (hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    if (line.front() == '[') {
      if (line.back() != ']') {
        problems.push_back(where + "not a [section] header: \"" + trim(raw) + "\"");
        continue;
      }
      section = trim(line.substr(1, line.size() - 2));
      if (section != "comm")
        problems.push_back(where + "[" + section + "]: lorabench comm reads only a [comm] section");
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string::npos) {
      problems.push_back(where + "not a [section] header or key = value line: \"" + trim(raw) + "\"");
      continue;
    }
    std::string key = trim(line.substr(0, eq));
    std::string value = trim(line.substr(eq + 1));
    if (section.empty()) {
      problems.push_back(where + key + ": outside the [comm] section");
      continue;
    }
    if (section != "comm") continue;  // already reported once at the header
    auto [it, inserted] = seen.emplace(key, line_no);
    if (!inserted) {
      problems.push_back(where + key + ": set more than once (first on line " + std::to_string(it->second) + ")");
      continue;
    }
    try {
      set_bench_option(opt, key, value);
    } catch (const std::invalid_argument& e) {
      problems.push_back(where + key + ": " + e.what());
    }
  }
  if (!problems.empty()) throw ConfigError(join(problems, "\n"));
}

void validate_bench_options(const BenchOptions& o) {
  std::vector<std::string> problems;
  if (o.min_bytes == 0) problems.push_back("min_bytes: must be > 0");
  if (o.min_bytes > o.max_bytes)
    problems.push_back(strformat("min_bytes (%zu) is larger than max_bytes (%zu)", o.min_bytes, o.max_bytes));
  if (o.factor <= 1.0 && o.min_bytes != o.max_bytes) problems.push_back("factor: must be > 1");
  if (o.iters < 1) problems.push_back("iters: must be >= 1");
  if (o.warmup < 0) problems.push_back("warmup: must be >= 0");
  if (o.ops.empty()) problems.push_back("ops: needs at least one collective");
  if (!problems.empty()) throw ConfigError("lorabench comm: " + join(problems, "; "));
}

// ---- test data ----------------------------------------------------------------------------------------

double bench_value(DataType t, int rank, size_t i) {
  const int64_t r = rank;
  const int64_t k = static_cast<int64_t>(i % 1048573);  // keeps the arithmetic small for huge buffers
  switch (t) {
    case DataType::kBFloat16: return static_cast<double>((r + k) % 3);
    case DataType::kFloat16: return static_cast<double>((r + 2 * k) % 5);
    case DataType::kFloat32: return static_cast<double>(((r + 1) * (k % 13 + 1)) % 97 - 48);
    case DataType::kInt32: return static_cast<double>((r + 1) * (k % 13 + 1) - 7);
    case DataType::kInt64: return static_cast<double>((r + 1) * (k % 13 + 1) - 7 + r * (int64_t(1) << 33));
    case DataType::kFloat64: return static_cast<double>(((r + 1) * (k % 13 + 1)) % 97 - 48) + 0.25;
  }
  return 0;
}

namespace {

void store(void* base, DataType t, size_t i, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DataType::kFloat16: static_cast<uint16_t*>(base)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat64: static_cast<double*>(base)[i] = v; break;
  }
}

double load(const void* base, DataType t, size_t i) {
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(base)[i];
    case DataType::kBFloat16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DataType::kFloat16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DataType::kFloat64: return static_cast<const double*>(base)[i];
  }
  return 0;
}

// A value no closed form produces, written where a collective must write (NaN for floats).
double sentinel(DataType t) {
  switch (t) {
    case DataType::kFloat32:
    case DataType::kBFloat16:
    case DataType::kFloat16:
    case DataType::kFloat64: return std::nan("");
    case DataType::kInt32: return -2147483000.0;
    case DataType::kInt64: return -9.0e18;
  }
  return 0;
}

bool same(double got, double want) { return got == want; }  // NaN never equals: an unwritten element fails

// Host memory (64-byte aligned, pages touched) or device memory.
class Mem {
 public:
  Mem(size_t bytes, int device) : bytes_(bytes > 0 ? bytes : 1), device_(device) {
    if (device_ >= 0) {
      p_ = cuda_malloc(device_, bytes_);
    } else {
      size_t rounded = (bytes_ + 63) / 64 * 64;
      p_ = std::aligned_alloc(64, rounded);
      if (p_ == nullptr) throw CommError("lorabench comm: cannot allocate " + format_bytes(double(rounded)));
      std::memset(p_, 0, rounded);
    }
  }
  ~Mem() {
    if (device_ >= 0) {
      cuda_free(p_);
    } else {
      std::free(p_);
    }
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  void* get() const { return p_; }
  void upload(const void* host, size_t bytes) {
    if (device_ >= 0) {
      cuda_copy_to_device(p_, host, bytes);
    } else {
      std::memcpy(p_, host, bytes);
    }
  }
  void download(void* host, size_t bytes) const {
    if (device_ >= 0) {
      cuda_copy_to_host(host, p_, bytes);
    } else {
      std::memcpy(host, p_, bytes);
    }
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
  int device_;
};

struct Stats3 {
  double min, avg, max;
};

}  // namespace

struct BenchRunner::Impl {
  Communicator& comm;
  MPI_Comm raw = MPI_COMM_NULL;
  BenchOptions opt;
  int device = -1;  // >= 0: buffers are device memory
  int rank = 0, n = 1;
  size_t cap = 0;  // bytes per buffer
  std::unique_ptr<Mem> send, recv;              // the communicator's buffers
  std::unique_ptr<Mem> host_send, host_recv;    // raw MPI's buffers when the communicator's are on a device
  std::vector<unsigned char> staging;           // device backends: host copy for filling and checking
  std::map<size_t, double> memcpy_cache;        // bytes -> mean seconds over ranks

  Impl(Communicator& c, MPI_Comm r, const BenchOptions& o, int dev) : comm(c), opt(o) {
    LB_MPI_CHECK(MPI_Comm_dup(r, &raw));
    LB_MPI_CHECK(MPI_Comm_set_errhandler(raw, MPI_ERRORS_RETURN));
    LB_MPI_CHECK(MPI_Comm_rank(raw, &rank));
    LB_MPI_CHECK(MPI_Comm_size(raw, &n));
    LB_CHECK(rank == comm.rank() && n == comm.size(), "bench: MPI communicator and Communicator differ");
    device = comm.device_buffers() ? dev : -1;
    if (comm.device_buffers() && dev < 0) throw CommError("bench: a device backend needs a CUDA device index");
    cap = std::max<size_t>(opt.max_bytes, 64);
    send = std::make_unique<Mem>(cap, device);
    recv = std::make_unique<Mem>(cap, device);
    if (device >= 0) {
      host_send = std::make_unique<Mem>(cap, -1);
      host_recv = std::make_unique<Mem>(cap, -1);
    }
    if (device >= 0) staging.resize(cap);  // host memory is filled and checked in place
  }
  ~Impl() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && raw != MPI_COMM_NULL) MPI_Comm_free(&raw);
  }

  void* raw_send() const { return host_send ? host_send->get() : send->get(); }
  void* raw_recv() const { return host_recv ? host_recv->get() : recv->get(); }

  Stats3 over_ranks(double local) const {
    Stats3 s{};
    double sum = 0;
    LB_MPI_CHECK(MPI_Allreduce(&local, &s.min, 1, MPI_DOUBLE, MPI_MIN, raw));
    LB_MPI_CHECK(MPI_Allreduce(&local, &s.max, 1, MPI_DOUBLE, MPI_MAX, raw));
    LB_MPI_CHECK(MPI_Allreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, raw));
    s.avg = sum / n;
    return s;
  }

  std::unique_ptr<Work> issue(BenchOp op, const BenchLayout& l) {
    const DataType t = opt.dtype;
    switch (op) {
      case BenchOp::kAllReduce: return comm.all_reduce_async(send->get(), l.block, t, ReduceOp::kSum);
      case BenchOp::kAllGather: return comm.all_gather_async(send->get(), recv->get(), l.block, t);
      case BenchOp::kReduceScatter:
        return comm.reduce_scatter_async(send->get(), recv->get(), l.block, t, ReduceOp::kSum);
      case BenchOp::kBroadcast: return comm.broadcast_async(send->get(), l.block, t, 0);
      case BenchOp::kAllToAll: return comm.all_to_all_async(send->get(), recv->get(), l.block, t);
    }
    throw CommError("bench: unknown op");
  }

  void raw_call(BenchOp op, const BenchLayout& l) {
    const MPI_Datatype dt = mpi_datatype(opt.dtype);
    const int c = static_cast<int>(l.block);
    switch (op) {
      case BenchOp::kAllReduce:
        LB_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, raw_send(), c, dt, mpi_reduce_op(opt.dtype, ReduceOp::kSum), raw));
        break;
      case BenchOp::kAllGather: LB_MPI_CHECK(MPI_Allgather(raw_send(), c, dt, raw_recv(), c, dt, raw)); break;
      case BenchOp::kReduceScatter:
        LB_MPI_CHECK(MPI_Reduce_scatter_block(raw_send(), raw_recv(), c, dt,
                                              mpi_reduce_op(opt.dtype, ReduceOp::kSum), raw));
        break;
      case BenchOp::kBroadcast: LB_MPI_CHECK(MPI_Bcast(raw_send(), c, dt, 0, raw)); break;
      case BenchOp::kAllToAll: LB_MPI_CHECK(MPI_Alltoall(raw_send(), c, dt, raw_recv(), c, dt, raw)); break;
    }
  }

  // Fills the send buffer with this rank's values (broadcast: only the root; the others get sentinels)
  // and the receive buffer with sentinels.
  void fill(BenchOp op, const BenchLayout& l) {
    const DataType t = opt.dtype;
    const bool fill_own = op != BenchOp::kBroadcast || rank == 0;
    void* h = device >= 0 ? staging.data() : send->get();
    for (size_t i = 0; i < l.send_count; ++i) store(h, t, i, fill_own ? bench_value(t, rank, i) : sentinel(t));
    if (device >= 0) send->upload(h, l.send_count * dtype_size(t));
    if (op == BenchOp::kAllReduce || op == BenchOp::kBroadcast) return;  // in place
    h = device >= 0 ? staging.data() : recv->get();
    for (size_t i = 0; i < l.recv_count; ++i) store(h, t, i, sentinel(t));
    if (device >= 0) recv->upload(h, l.recv_count * dtype_size(t));
  }

  double expected(BenchOp op, const BenchLayout& l, size_t i) const {
    const DataType t = opt.dtype;
    double s = 0;
    switch (op) {
      case BenchOp::kAllReduce:
        for (int r = 0; r < n; ++r) s += bench_value(t, r, i);
        return s;
      case BenchOp::kReduceScatter:
        for (int r = 0; r < n; ++r) s += bench_value(t, r, static_cast<size_t>(rank) * l.block + i);
        return s;
      case BenchOp::kAllGather: return bench_value(t, static_cast<int>(i / l.block), i % l.block);
      case BenchOp::kBroadcast: return bench_value(t, 0, i);
      case BenchOp::kAllToAll:
        return bench_value(t, static_cast<int>(i / l.block), static_cast<size_t>(rank) * l.block + i % l.block);
    }
    return 0;
  }

  void check(BenchOp op, const BenchLayout& l, BenchRow& row) {
    fill(op, l);
    comm.wait(issue(op, l));
    const bool in_place = op == BenchOp::kAllReduce || op == BenchOp::kBroadcast;
    const size_t count = in_place ? l.send_count : l.recv_count;
    const Mem& result = *(in_place ? send : recv);
    const void* h = result.get();
    if (device >= 0) {
      result.download(staging.data(), count * dtype_size(opt.dtype));
      h = staging.data();
    }
    int64_t wrong = 0;
    std::string first;
    for (size_t i = 0; i < count; ++i) {
      double want = expected(op, l, i);
      double got = load(h, opt.dtype, i);
      if (!same(got, want)) {
        if (wrong == 0) first = strformat("rank %d element %zu: got %.17g, expected %.17g", rank, i, got, want);
        ++wrong;
      }
    }
    int64_t total = 0;
    LB_MPI_CHECK(MPI_Allreduce(&wrong, &total, 1, MPI_INT64_T, MPI_SUM, raw));
    row.wrong = total;
    row.check_passed = total == 0 ? 1 : 0;
    if (total == 0) return;
    // The lowest failing rank describes its first mismatch to everyone.
    int me = wrong > 0 ? rank : n, lowest = n;
    LB_MPI_CHECK(MPI_Allreduce(&me, &lowest, 1, MPI_INT, MPI_MIN, raw));
    char buf[256] = {0};
    if (rank == lowest) std::snprintf(buf, sizeof(buf), "%s", first.c_str());
    LB_MPI_CHECK(MPI_Bcast(buf, sizeof(buf), MPI_CHAR, lowest, raw));
    row.check_detail = strformat("%lld wrong element(s) over all ranks; first: %s", static_cast<long long>(total), buf);
  }

  double time_layer(BenchOp op, const BenchLayout& l) {
    for (int i = 0; i < opt.warmup; ++i) issue(op, l)->wait();
    LB_MPI_CHECK(MPI_Barrier(raw));
    const double t0 = sys::now_s();
    if (device >= 0) {
      // Queue every call on the stream, then wait (nccl-tests' way; the host does not gate each call).
      std::vector<std::unique_ptr<Work>> pending;
      pending.reserve(static_cast<size_t>(opt.iters));
      for (int i = 0; i < opt.iters; ++i) pending.push_back(issue(op, l));
      for (auto& w : pending) w->wait();
    } else {
      for (int i = 0; i < opt.iters; ++i) issue(op, l)->wait();
    }
    return (sys::now_s() - t0) / opt.iters;
  }

  double time_raw(BenchOp op, const BenchLayout& l) {
    for (int i = 0; i < opt.warmup; ++i) raw_call(op, l);
    LB_MPI_CHECK(MPI_Barrier(raw));
    const double t0 = sys::now_s();
    for (int i = 0; i < opt.iters; ++i) raw_call(op, l);
    return (sys::now_s() - t0) / opt.iters;
  }

  double time_memcpy(size_t bytes) {
    auto it = memcpy_cache.find(bytes);
    if (it != memcpy_cache.end()) return it->second;
    auto copy = [&] {
      if (device >= 0) {
        cuda_copy_device_to_device(recv->get(), send->get(), bytes);
      } else {
        std::memcpy(recv->get(), send->get(), bytes);
      }
    };
    for (int i = 0; i < std::max(1, opt.warmup); ++i) copy();
    LB_MPI_CHECK(MPI_Barrier(raw));  // every rank copies at once: they share the memory system
    const double t0 = sys::now_s();
    for (int i = 0; i < opt.iters; ++i) copy();
    double mean = over_ranks((sys::now_s() - t0) / opt.iters).avg;
    memcpy_cache[bytes] = mean;
    return mean;
  }
};

BenchRunner::BenchRunner(Communicator& comm, MPI_Comm raw, const BenchOptions& opt, int cuda_device)
    : impl_(std::make_unique<Impl>(comm, raw, opt, cuda_device)) {}

BenchRunner::~BenchRunner() = default;

BenchRow BenchRunner::run(BenchOp op, const BenchLayout& l) {
  Impl& m = *impl_;
  LB_CHECK(l.bytes <= m.cap, "bench: layout larger than the buffers");
  BenchRow row;
  row.op = op;
  row.dtype = m.opt.dtype;
  row.bytes = l.bytes;
  row.count = l.count;
  row.root = op == BenchOp::kBroadcast ? 0 : -1;
  const double factor = bus_factor(op, m.n);
  const double gb = static_cast<double>(l.bytes) / 1e9;

  m.fill(op, l);
  Stats3 t = m.over_ranks(m.time_layer(op, l));
  row.time_avg_s = t.avg;
  row.time_min_s = t.min;
  row.time_max_s = t.max;
  row.algbw_GBps = t.avg > 0 ? gb / t.avg : 0;
  row.busbw_GBps = row.algbw_GBps * factor;

  Stats3 r = m.over_ranks(m.time_raw(op, l));
  row.raw_mpi_time_s = r.avg;
  row.raw_mpi_busbw_GBps = r.avg > 0 ? gb / r.avg * factor : 0;

  row.memcpy_time_s = m.time_memcpy(l.bytes);
  row.memcpy_GBps = row.memcpy_time_s > 0 ? gb / row.memcpy_time_s : 0;

  if (m.opt.check) m.check(op, l, row);
  return row;
}

}  // namespace lorabench::comm
