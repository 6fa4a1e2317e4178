#include "lorabench/comm/delayed_communicator.hpp"

#include <chrono>
#include <thread>

#include "lorabench/core/error.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "forwarding_communicator.hpp"

namespace lorabench::comm {

namespace {

void sleep_until(double t) {
  const double left = t - sys::now_s();
  if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
}

// Complete `delay_s` after the inner Work completed (as first seen by wait() or test()).
class DelayedWork final : public Work {
 public:
  DelayedWork(std::unique_ptr<Work> inner, double delay_s) : inner_(std::move(inner)), delay_s_(delay_s) {}
  void wait() override {
    inner_->wait();
    if (done_at_ < 0) done_at_ = sys::now_s() + delay_s_;
    sleep_until(done_at_);
  }
  bool test() override {
    if (!inner_->test()) return false;
    if (done_at_ < 0) done_at_ = sys::now_s() + delay_s_;
    return sys::now_s() >= done_at_;
  }

 private:
  std::unique_ptr<Work> inner_;
  double delay_s_;
  double done_at_ = -1;
};

class DelayedCommunicator final : public ForwardingCommunicator {
 public:
  DelayedCommunicator(std::unique_ptr<Communicator> inner, double delay_s)
      : ForwardingCommunicator(std::move(inner), "make_delayed_communicator"), delay_s_(delay_s) {
    LB_CHECK(delay_s >= 0, "a negative communication delay");
  }

 protected:
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    return std::make_unique<DelayedCommunicator>(inner_->split(color, key), delay_s_);
  }
  std::unique_ptr<Work> do_all_reduce(void* buf, size_t count, DataType t, ReduceOp op) override {
    return delayed(inner_->all_reduce_async(buf, count, t, op));
  }
  std::unique_ptr<Work> do_reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t,
                                          ReduceOp op) override {
    return delayed(inner_->reduce_scatter_async(send, recv, recv_count, t, op));
  }
  std::unique_ptr<Work> do_all_gather(const void* send, void* recv, size_t send_count, DataType t) override {
    return delayed(inner_->all_gather_async(send, recv, send_count, t));
  }
  std::unique_ptr<Work> do_broadcast(void* buf, size_t count, DataType t, int root) override {
    return delayed(inner_->broadcast_async(buf, count, t, root));
  }
  std::unique_ptr<Work> do_all_to_all(const void* send, void* recv, size_t count, DataType t) override {
    return delayed(inner_->all_to_all_async(send, recv, count, t));
  }
  std::unique_ptr<Work> do_all_to_allv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                       const std::vector<size_t>& recv_counts, DataType t) override {
    return delayed(inner_->all_to_allv_async(send, send_counts, recv, recv_counts, t));
  }
  std::unique_ptr<Work> do_barrier() override { return delayed(inner_->barrier_async()); }

 private:
  std::unique_ptr<Work> delayed(std::unique_ptr<Work> w) { return std::make_unique<DelayedWork>(std::move(w), delay_s_); }

  double delay_s_;
};

}  // namespace

std::unique_ptr<Communicator> make_delayed_communicator(std::unique_ptr<Communicator> inner, double delay_s) {
  return std::make_unique<DelayedCommunicator>(std::move(inner), delay_s);
}

}  // namespace lorabench::comm
