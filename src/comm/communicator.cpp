#include "lorabench/comm/communicator.hpp"

#include "lorabench/core/error.hpp"
#include "lorabench/core/sysinfo.hpp"

namespace lorabench::comm {

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kBFloat16: return 2;
    case DataType::kFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kFloat64: return 8;
  }
  return 0;
}

const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "fp32";
    case DataType::kBFloat16: return "bf16";
    case DataType::kFloat16: return "fp16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat64: return "fp64";
  }
  return "?";
}

DataType dtype_from_name(const std::string& n) {
  if (n == "fp32" || n == "float32" || n == "float") return DataType::kFloat32;
  if (n == "bf16" || n == "bfloat16") return DataType::kBFloat16;
  if (n == "fp16" || n == "float16" || n == "half") return DataType::kFloat16;
  if (n == "int32") return DataType::kInt32;
  if (n == "int64") return DataType::kInt64;
  if (n == "fp64" || n == "float64" || n == "double") return DataType::kFloat64;
  throw ConfigError("unknown data type \"" + n + "\" (expected fp32, bf16, fp16, int32, int64 or fp64)");
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "?";
}

void Communicator::account(CollectiveKind kind, size_t bytes) {
  stats_.calls[static_cast<int>(kind)] += 1;
  stats_.bytes[static_cast<int>(kind)] += static_cast<int64_t>(bytes);
}

std::unique_ptr<Work> Communicator::all_reduce_async(void* buf, size_t count, DataType t, ReduceOp op) {
  auto w = do_all_reduce(buf, count, t, op);
  account(CollectiveKind::kAllReduce, count * dtype_size(t));
  return w;
}

std::unique_ptr<Work> Communicator::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                                         DataType t, ReduceOp op) {
  auto w = do_reduce_scatter(send, recv, recv_count, t, op);
  account(CollectiveKind::kReduceScatter, recv_count * size() * dtype_size(t));
  return w;
}

std::unique_ptr<Work> Communicator::all_gather_async(const void* send, void* recv, size_t send_count, DataType t) {
  auto w = do_all_gather(send, recv, send_count, t);
  account(CollectiveKind::kAllGather, send_count * dtype_size(t));
  return w;
}

std::unique_ptr<Work> Communicator::broadcast_async(void* buf, size_t count, DataType t, int root) {
  LB_CHECK(root >= 0 && root < size(), "broadcast root out of range");
  auto w = do_broadcast(buf, count, t, root);
  account(CollectiveKind::kBroadcast, count * dtype_size(t));
  return w;
}

std::unique_ptr<Work> Communicator::all_to_all_async(const void* send, void* recv, size_t count, DataType t) {
  auto w = do_all_to_all(send, recv, count, t);
  account(CollectiveKind::kAllToAll, count * size() * dtype_size(t));
  return w;
}

std::unique_ptr<Work> Communicator::all_to_allv_async(const void* send, const std::vector<size_t>& send_counts,
                                                      void* recv, const std::vector<size_t>& recv_counts,
                                                      DataType t) {
  LB_CHECK(send_counts.size() == static_cast<size_t>(size()) && recv_counts.size() == static_cast<size_t>(size()),
           "all_to_allv needs one count per rank");
  size_t total = 0;
  for (auto c : send_counts) total += c;
  auto w = do_all_to_allv(send, send_counts, recv, recv_counts, t);
  account(CollectiveKind::kAllToAll, total * dtype_size(t));
  return w;
}

std::unique_ptr<Work> Communicator::barrier_async() {
  auto w = do_barrier();
  account(CollectiveKind::kBarrier, 0);
  return w;
}

std::unique_ptr<Work> Communicator::do_all_to_all(const void* send, void* recv, size_t count, DataType t) {
  std::vector<size_t> counts(static_cast<size_t>(size()), count);
  return do_all_to_allv(send, counts, recv, counts, t);
}

void Communicator::wait(const std::unique_ptr<Work>& w) {
  LB_CHECK(w != nullptr, "wait on a null Work");
  double t0 = sys::now_s();
  w->wait();
  stats_.wait_s += sys::now_s() - t0;
}

}  // namespace lorabench::comm
