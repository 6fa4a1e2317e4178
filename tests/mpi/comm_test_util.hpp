// Shared by the communicator tests (MPI backend on host memory here, NCCL on device memory in
// test_comm_nccl_gpu): buffers that live where the backend wants them, and the collective checks written
// once against the Communicator interface. Every check uses rank-dependent data and compares with a
// closed form computed locally.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lorabench/comm/bench.hpp"
#include "lorabench/comm/communicator.hpp"
#include "lorabench/comm/half.hpp"
#include "lorabench/comm/nccl_communicator.hpp"

namespace lbtest {

// NVIDIA device nodes of this machine (/dev/nvidia0, /dev/nvidia1, ...): what the driver exposes, counted
// without CUDA, to check cuda_device_count() against.
inline int nvidia_device_nodes() {
  int n = 0;
  for (int i = 0; i < 64; ++i) n += ::access(("/dev/nvidia" + std::to_string(i)).c_str(), F_OK) == 0 ? 1 : 0;
  return n;
}

// Whether `counted` CUDA devices can be right on a machine with `nodes` NVIDIA device nodes and the given
// CUDA_VISIBLE_DEVICES (nullptr: unset): none without nodes, all of them when nothing hides any, at most
// the nodes otherwise.
inline bool device_count_plausible(int counted, int nodes, const char* visible_env) {
  if (nodes == 0) return counted == 0;
  if (visible_env == nullptr) return counted == nodes;
  return counted >= 0 && counted <= nodes;
}

using lorabench::comm::Communicator;
using lorabench::comm::DataType;
using lorabench::comm::ReduceOp;
using lorabench::comm::Work;

inline const std::vector<DataType>& all_dtypes() {
  static const std::vector<DataType> t = {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16,
                                          DataType::kInt32, DataType::kInt64, DataType::kFloat64};
  return t;
}

// Host memory, or device memory when `device` >= 0 (NCCL).
class Buf {
 public:
  Buf(size_t bytes, int device) : bytes_(bytes), device_(device) {
    if (device_ >= 0) {
      p_ = lorabench::comm::cuda_malloc(device_, bytes_ + 8);
    } else {
      host_.assign(bytes_ + 8, 0);
      p_ = host_.data();
    }
  }
  ~Buf() {
    if (device_ >= 0) lorabench::comm::cuda_free(p_);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void* get() { return p_; }
  char* bytes_at(size_t off) { return static_cast<char*>(p_) + off; }
  void put(const std::vector<unsigned char>& h) {
    if (device_ >= 0) {
      lorabench::comm::cuda_copy_to_device(p_, h.data(), h.size());
    } else {
      if (!h.empty()) std::memcpy(p_, h.data(), h.size());  // memcpy from an empty vector's null: UB
    }
  }
  std::vector<unsigned char> take(size_t n) {
    std::vector<unsigned char> h(n);
    if (device_ >= 0) {
      lorabench::comm::cuda_copy_to_host(h.data(), p_, n);
    } else {
      if (n > 0) std::memcpy(h.data(), p_, n);
    }
    return h;
  }

 private:
  size_t bytes_;
  int device_;
  void* p_ = nullptr;
  std::vector<unsigned char> host_;
};

inline void store(std::vector<unsigned char>& h, DataType t, size_t i, double v) {
  using namespace lorabench::comm;
  void* b = h.data();
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(b)[i] = static_cast<float>(v); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(b)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DataType::kFloat16: static_cast<uint16_t*>(b)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(b)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(b)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat64: static_cast<double*>(b)[i] = v; break;
  }
}

inline double load(const std::vector<unsigned char>& h, DataType t, size_t i) {
  using namespace lorabench::comm;
  const void* b = h.data();
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(b)[i];
    case DataType::kBFloat16: return bf16_to_f32(static_cast<const uint16_t*>(b)[i]);
    case DataType::kFloat16: return f16_to_f32(static_cast<const uint16_t*>(b)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(b)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(b)[i]);
    case DataType::kFloat64: return static_cast<const double*>(b)[i];
  }
  return 0;
}

// The reduction test value: small integers whose partial sums are exact in every dtype (bench_value),
// plus `rank` in the max/min case so the winner depends on the rank.
inline double rvalue(DataType t, int rank, size_t i) { return lorabench::comm::bench_value(t, rank, i); }

// Data-movement test bytes: element i of rank r, any bit pattern (the collective only moves it).
inline unsigned char mbyte(int rank, size_t i, size_t b) {
  return static_cast<unsigned char>((rank * 131 + i * 7 + b * 29 + 11) & 0xff);
}
inline std::vector<unsigned char> moved(int rank, size_t first, size_t count, size_t es) {
  std::vector<unsigned char> h(count * es);
  for (size_t i = 0; i < count; ++i)
    for (size_t b = 0; b < es; ++b) h[i * es + b] = mbyte(rank, first + i, b);
  return h;
}

inline double reduce_expect(DataType t, ReduceOp op, int n, size_t i) {
  double acc = rvalue(t, 0, i);
  for (int r = 1; r < n; ++r) {
    double v = rvalue(t, r, i);
    acc = op == ReduceOp::kSum ? acc + v : op == ReduceOp::kMax ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

#define LBT_CTX(t, count) \
  ::testing::Message() << "dtype " << lorabench::comm::dtype_name(t) << " count " << (count) << " rank " << c.rank()

inline void check_all_reduce(Communicator& c, int device, DataType t, ReduceOp op, size_t count) {
  const size_t es = lorabench::comm::dtype_size(t);
  Buf buf(count * es, device);
  std::vector<unsigned char> h(count * es);
  for (size_t i = 0; i < count; ++i) store(h, t, i, rvalue(t, c.rank(), i));
  buf.put(h);
  c.all_reduce(buf.get(), count, t, op);
  auto got = buf.take(count * es);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double want = reduce_expect(t, op, c.size(), i);
    if (load(got, t, i) != want && wrong++ < 3)
      ADD_FAILURE() << "all_reduce " << lorabench::comm::reduce_op_name(op) << " " << LBT_CTX(t, count) << " element "
                    << i << ": got " << load(got, t, i) << " expected " << want;
  }
  EXPECT_EQ(wrong, 0u) << "all_reduce " << LBT_CTX(t, count);
}

inline void check_reduce_scatter(Communicator& c, int device, DataType t, ReduceOp op, size_t block) {
  const size_t es = lorabench::comm::dtype_size(t);
  const size_t n = static_cast<size_t>(c.size());
  Buf send(block * n * es, device), recv(block * es, device);
  std::vector<unsigned char> h(block * n * es);
  for (size_t i = 0; i < block * n; ++i) store(h, t, i, rvalue(t, c.rank(), i));
  send.put(h);
  c.reduce_scatter(send.get(), recv.get(), block, t, op);
  auto got = recv.take(block * es);
  size_t wrong = 0;
  for (size_t j = 0; j < block; ++j) {
    double want = reduce_expect(t, op, c.size(), static_cast<size_t>(c.rank()) * block + j);
    if (load(got, t, j) != want && wrong++ < 3)
      ADD_FAILURE() << "reduce_scatter " << LBT_CTX(t, block) << " element " << j << ": got " << load(got, t, j)
                    << " expected " << want;
  }
  EXPECT_EQ(wrong, 0u) << "reduce_scatter " << LBT_CTX(t, block);
}

inline void check_all_gather(Communicator& c, int device, DataType t, size_t block, bool in_place) {
  const size_t es = lorabench::comm::dtype_size(t);
  const size_t n = static_cast<size_t>(c.size());
  Buf send(block * es, device), recv(block * n * es, device);
  std::vector<unsigned char> fill(block * n * es, 0xEE);
  recv.put(fill);
  auto mine = moved(c.rank(), 0, block, es);
  const size_t my_off = static_cast<size_t>(c.rank()) * block * es;
  if (in_place) {
    std::copy(mine.begin(), mine.end(), fill.begin() + static_cast<long>(my_off));
    recv.put(fill);
    c.all_gather(recv.bytes_at(my_off), recv.get(), block, t);
  } else {
    send.put(mine);
    c.all_gather(send.get(), recv.get(), block, t);
  }
  auto got = recv.take(block * n * es);
  for (size_t r = 0; r < n; ++r) {
    auto want = moved(static_cast<int>(r), 0, block, es);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + static_cast<long>(r * block * es)))
        << "all_gather" << (in_place ? " (in place)" : "") << " block from rank " << r << " " << LBT_CTX(t, block);
  }
}

inline void check_broadcast(Communicator& c, int device, DataType t, size_t count, int root) {
  const size_t es = lorabench::comm::dtype_size(t);
  Buf buf(count * es, device);
  buf.put(c.rank() == root ? moved(root, 0, count, es) : std::vector<unsigned char>(count * es, 0xEE));
  c.broadcast(buf.get(), count, t, root);
  auto got = buf.take(count * es);
  EXPECT_EQ(got, moved(root, 0, count, es)) << "broadcast root " << root << " " << LBT_CTX(t, count);
}

inline void check_all_to_all(Communicator& c, int device, DataType t, size_t block) {
  const size_t es = lorabench::comm::dtype_size(t);
  const size_t n = static_cast<size_t>(c.size());
  const size_t me = static_cast<size_t>(c.rank());
  Buf send(block * n * es, device), recv(block * n * es, device);
  // Block j of rank i's send buffer = elements [j*block, (j+1)*block) of rank i's pattern.
  send.put(moved(c.rank(), 0, block * n, es));
  recv.put(std::vector<unsigned char>(block * n * es, 0xEE));
  c.all_to_all(send.get(), recv.get(), block, t);
  auto got = recv.take(block * n * es);
  for (size_t r = 0; r < n; ++r) {
    auto want = moved(static_cast<int>(r), me * block, block, es);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + static_cast<long>(r * block * es)))
        << "all_to_all block from rank " << r << " " << LBT_CTX(t, block);
  }
}

// Elements rank i sends to rank j in the uneven test: 0..4, zero for some pairs.
inline size_t uneven_count(int i, int j, size_t scale) { return static_cast<size_t>((i * 3 + j * 5 + 1) % 5) * scale; }

inline void check_all_to_allv(Communicator& c, int device, DataType t, size_t scale) {
  const size_t es = lorabench::comm::dtype_size(t);
  const int n = c.size(), me = c.rank();
  std::vector<size_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
  size_t stot = 0, rtot = 0;
  for (int j = 0; j < n; ++j) {
    sc[static_cast<size_t>(j)] = uneven_count(me, j, scale);
    rc[static_cast<size_t>(j)] = uneven_count(j, me, scale);
    stot += sc[static_cast<size_t>(j)];
    rtot += rc[static_cast<size_t>(j)];
  }
  // Rank i's block for rank j holds pattern elements starting at 1000*j (distinct per destination).
  std::vector<unsigned char> h;
  for (int j = 0; j < n; ++j) {
    auto b = moved(me, 1000 * static_cast<size_t>(j), sc[static_cast<size_t>(j)], es);
    h.insert(h.end(), b.begin(), b.end());
  }
  Buf send(stot * es, device), recv(rtot * es, device);
  send.put(h);
  recv.put(std::vector<unsigned char>(rtot * es, 0xEE));
  c.all_to_allv(send.get(), sc, recv.get(), rc, t);
  auto got = recv.take(rtot * es);
  size_t off = 0;
  for (int r = 0; r < n; ++r) {
    auto want = moved(r, 1000 * static_cast<size_t>(me), rc[static_cast<size_t>(r)], es);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + static_cast<long>(off)))
        << "all_to_allv block from rank " << r << " (" << rc[static_cast<size_t>(r)] << " elements) "
        << LBT_CTX(t, scale);
    off += want.size();
  }
}

// Six collectives outstanding at once, completed in reverse order of issue.
inline void check_many_outstanding(Communicator& c, int device, DataType t, size_t count) {
  const size_t es = lorabench::comm::dtype_size(t);
  const size_t n = static_cast<size_t>(c.size());
  const int me = c.rank();
  Buf ar(count * es, device), ag_send(count * es, device), ag_recv(count * n * es, device);
  Buf bc(count * es, device), rs_send(count * n * es, device), rs_recv(count * es, device);
  Buf a2a_send(count * n * es, device), a2a_recv(count * n * es, device);
  std::vector<unsigned char> h(count * n * es);
  for (size_t i = 0; i < count; ++i) store(h, t, i, rvalue(t, me, i));
  ar.put(std::vector<unsigned char>(h.begin(), h.begin() + static_cast<long>(count * es)));
  for (size_t i = 0; i < count * n; ++i) store(h, t, i, rvalue(t, me, i));
  rs_send.put(h);
  ag_send.put(moved(me, 0, count, es));
  bc.put(me == static_cast<int>(n) - 1 ? moved(me, 0, count, es) : std::vector<unsigned char>(count * es, 0));
  a2a_send.put(moved(me, 0, count * n, es));

  std::vector<std::unique_ptr<Work>> w;
  w.push_back(c.all_reduce_async(ar.get(), count, t, ReduceOp::kSum));
  w.push_back(c.all_gather_async(ag_send.get(), ag_recv.get(), count, t));
  w.push_back(c.broadcast_async(bc.get(), count, t, static_cast<int>(n) - 1));
  w.push_back(c.reduce_scatter_async(rs_send.get(), rs_recv.get(), count, t, ReduceOp::kSum));
  w.push_back(c.all_to_all_async(a2a_send.get(), a2a_recv.get(), count, t));
  w.push_back(c.barrier_async());
  c.progress();
  // Poll a little (test() drives progress), then wait for the rest in reverse order.
  for (int spin = 0; spin < 100; ++spin) {
    c.progress();
    bool all = true;
    for (auto& x : w) all = x->test() && all;
    if (all) break;
  }
  for (auto it = w.rbegin(); it != w.rend(); ++it) c.wait(*it);
  for (auto& x : w) EXPECT_TRUE(x->test());

  auto got = ar.take(count * es);
  for (size_t i = 0; i < count; ++i)
    EXPECT_EQ(load(got, t, i), reduce_expect(t, ReduceOp::kSum, c.size(), i)) << "outstanding all_reduce " << i;
  got = rs_recv.take(count * es);
  for (size_t i = 0; i < count; ++i)
    EXPECT_EQ(load(got, t, i), reduce_expect(t, ReduceOp::kSum, c.size(), static_cast<size_t>(me) * count + i))
        << "outstanding reduce_scatter " << i;
  got = ag_recv.take(count * n * es);
  for (size_t r = 0; r < n; ++r) {
    auto want = moved(static_cast<int>(r), 0, count, es);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + static_cast<long>(r * count * es)))
        << "outstanding all_gather";
  }
  EXPECT_EQ(bc.take(count * es), moved(static_cast<int>(n) - 1, 0, count, es)) << "outstanding broadcast";
  got = a2a_recv.take(count * n * es);
  for (size_t r = 0; r < n; ++r) {
    auto want = moved(static_cast<int>(r), static_cast<size_t>(me) * count, count, es);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + static_cast<long>(r * count * es)))
        << "outstanding all_to_all";
  }
}

// Every collective x dtype x a few odd sizes.
inline void check_everything(Communicator& c, int device) {
  for (DataType t : all_dtypes()) {
    for (size_t count : {size_t(1), size_t(7), size_t(1001), size_t(4099)}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) check_all_reduce(c, device, t, op, count);
      check_reduce_scatter(c, device, t, ReduceOp::kSum, count);
      check_reduce_scatter(c, device, t, ReduceOp::kMax, count);
      check_all_gather(c, device, t, count, false);
      check_all_gather(c, device, t, count, true);
      for (int root = 0; root < c.size(); ++root) check_broadcast(c, device, t, count, root);
      check_all_to_all(c, device, t, count);
    }
    for (size_t scale : {size_t(1), size_t(13)}) check_all_to_allv(c, device, t, scale);
    check_many_outstanding(c, device, t, 333);
  }
}

}  // namespace lbtest
