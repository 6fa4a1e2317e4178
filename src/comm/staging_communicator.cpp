#include "lorabench/comm/staging_communicator.hpp"

#include <map>
#include <numeric>
#include <vector>

#include "lorabench/core/error.hpp"
#include "forwarding_communicator.hpp"

namespace lorabench::comm {

namespace {

// Pinned host buffers by size, reused: pinning costs far more than a copy of a gradient bucket.
class HostPool {
 public:
  explicit HostPool(DeviceCopier c) : c_(std::move(c)) {}
  ~HostPool() {
    for (auto& [bytes, p] : free_) c_.free_host(p);
  }
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  void* take(size_t bytes) {
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first <= 2 * bytes + 4096) {
      void* p = it->second;
      sizes_[p] = it->first;
      free_.erase(it);
      return p;
    }
    void* p = c_.alloc_host(bytes > 0 ? bytes : 1);
    LB_CHECK(p != nullptr, "staging communicator: pinned host allocation failed");
    sizes_[p] = bytes;
    return p;
  }
  void give(void* p) {
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    free_.emplace(it->second, p);
    sizes_.erase(it);
  }
  const DeviceCopier& copier() const { return c_; }

 private:
  DeviceCopier c_;
  std::multimap<size_t, void*> free_;
  std::map<void*, size_t> sizes_;
};

// One staged buffer: the host copy of a device range (or the host range itself when it is host memory).
struct Staged {
  void* dev = nullptr;   // the caller's buffer when it is device memory, else nullptr
  void* host = nullptr;  // what the inner backend sees
  size_t bytes = 0;
  bool copy_back = false;
};

class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<HostPool> pool, std::vector<Staged> bufs, std::unique_ptr<Work> inner)
      : pool_(std::move(pool)), bufs_(std::move(bufs)), inner_(std::move(inner)) {}
  ~StagedWork() override {
    if (!finished_) {
      try {
        wait();
      } catch (...) {  // destructors do not throw; the failure was or will be reported by another rank's wait
      }
    }
    for (auto& b : bufs_)
      if (b.dev != nullptr) pool_->give(b.host);
  }
  StagedWork(const StagedWork&) = delete;
  StagedWork& operator=(const StagedWork&) = delete;

  void wait() override {
    if (finished_) return;
    inner_->wait();
    finish();
  }
  bool test() override {
    if (finished_) return true;
    if (!inner_->test()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    for (auto& b : bufs_)
      if (b.dev != nullptr && b.copy_back) pool_->copier().to_device(b.dev, b.host, b.bytes);
    finished_ = true;
  }
  std::shared_ptr<HostPool> pool_;
  std::vector<Staged> bufs_;
  std::unique_ptr<Work> inner_;
  bool finished_ = false;
};

class StagingCommunicator final : public ForwardingCommunicator {
 public:
  StagingCommunicator(std::unique_ptr<Communicator> inner, DeviceCopier c)
      : ForwardingCommunicator(std::move(inner), "make_staging_communicator") {
    LB_CHECK(c.is_device && c.to_host && c.to_device && c.alloc_host && c.free_host,
             "make_staging_communicator: every DeviceCopier member must be set");
    pool_ = std::make_shared<HostPool>(std::move(c));
  }
  // A split of `inner`, staging through the same pool of host buffers.
  StagingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<HostPool> pool)
      : ForwardingCommunicator(std::move(inner), "make_staging_communicator"), pool_(std::move(pool)) {}
  bool device_buffers() const override { return true; }

 protected:
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    return std::make_unique<StagingCommunicator>(inner_->split(color, key), pool_);
  }
  std::unique_ptr<Work> do_all_reduce(void* buf, size_t count, DataType t, ReduceOp op) override {
    std::vector<Staged> s = {stage(buf, count * dtype_size(t), true, true)};
    auto w = inner_->all_reduce_async(s[0].host, count, t, op);
    return done(std::move(s), std::move(w));
  }
  std::unique_ptr<Work> do_reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t,
                                          ReduceOp op) override {
    const size_t e = dtype_size(t);
    std::vector<Staged> s = {stage(const_cast<void*>(send), size_t(size()) * recv_count * e, true, false),
                             stage(recv, recv_count * e, false, true)};
    auto w = inner_->reduce_scatter_async(s[0].host, s[1].host, recv_count, t, op);
    return done(std::move(s), std::move(w));
  }
  std::unique_ptr<Work> do_all_gather(const void* send, void* recv, size_t send_count, DataType t) override {
    const size_t e = dtype_size(t), piece = send_count * e;
    char* recv_c = static_cast<char*>(recv);
    // In place (send = recv + rank * piece): stage recv whole, with this rank's piece copied in.
    if (send == recv_c + size_t(rank()) * piece) {
      std::vector<Staged> s = {stage(recv, size_t(size()) * piece, true, true)};
      char* h = static_cast<char*>(s[0].host);
      auto w = inner_->all_gather_async(h + size_t(rank()) * piece, h, send_count, t);
      return done(std::move(s), std::move(w));
    }
    std::vector<Staged> s = {stage(const_cast<void*>(send), piece, true, false),
                             stage(recv, size_t(size()) * piece, false, true)};
    auto w = inner_->all_gather_async(s[0].host, s[1].host, send_count, t);
    return done(std::move(s), std::move(w));
  }
  std::unique_ptr<Work> do_broadcast(void* buf, size_t count, DataType t, int root) override {
    std::vector<Staged> s = {stage(buf, count * dtype_size(t), rank() == root, true)};
    auto w = inner_->broadcast_async(s[0].host, count, t, root);
    return done(std::move(s), std::move(w));
  }
  std::unique_ptr<Work> do_all_to_allv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                       const std::vector<size_t>& recv_counts, DataType t) override {
    const size_t e = dtype_size(t);
    const size_t sn = std::accumulate(send_counts.begin(), send_counts.end(), size_t(0));
    const size_t rn = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t(0));
    std::vector<Staged> s = {stage(const_cast<void*>(send), sn * e, true, false), stage(recv, rn * e, false, true)};
    auto w = inner_->all_to_allv_async(s[0].host, send_counts, s[1].host, recv_counts, t);
    return done(std::move(s), std::move(w));
  }
  std::unique_ptr<Work> do_all_to_all(const void* send, void* recv, size_t count, DataType t) override {
    const size_t bytes = size_t(size()) * count * dtype_size(t);
    std::vector<Staged> s = {stage(const_cast<void*>(send), bytes, true, false), stage(recv, bytes, false, true)};
    auto w = inner_->all_to_all_async(s[0].host, s[1].host, count, t);
    return done(std::move(s), std::move(w));
  }
  std::unique_ptr<Work> do_barrier() override { return inner_->barrier_async(); }

 private:
  // `in`: the collective reads the buffer (copy it to the host first); `out`: it writes it (copy back).
  Staged stage(void* p, size_t bytes, bool in, bool out) {
    Staged s;
    s.bytes = bytes;
    if (p == nullptr || !pool_->copier().is_device(p)) {
      s.host = p;
      return s;
    }
    s.dev = p;
    s.host = pool_->take(bytes);
    s.copy_back = out;
    if (in && bytes > 0) pool_->copier().to_host(s.host, p, bytes);
    return s;
  }
  std::unique_ptr<Work> done(std::vector<Staged> s, std::unique_ptr<Work> inner) {
    return std::make_unique<StagedWork>(pool_, std::move(s), std::move(inner));
  }

  std::shared_ptr<HostPool> pool_;
};

}  // namespace

std::unique_ptr<Communicator> make_staging_communicator(std::unique_ptr<Communicator> inner, DeviceCopier copier) {
  return std::make_unique<StagingCommunicator>(std::move(inner), std::move(copier));
}

}  // namespace lorabench::comm
