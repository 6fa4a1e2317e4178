#pragma once
// A thread that watches operations the host does not wait for. The NCCL backend hands it each collective
// the compute stream waits on without the host (Work::wait_on_device): the host may then block in a CUDA
// synchronisation behind a collective that never completes, and only another thread can notice and abort
// the communicator. Torch-free and CUDA-free: what "complete" means is the caller's poll function, so the
// same thread logic runs (and is tested, under ThreadSanitizer too) on a CPU build.
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lorabench::comm {

class Watchdog {
 public:
  enum class State { kPending, kDone, kFailed };
  struct Poll {
    State state = State::kPending;
    std::string error;  // with kFailed: what went wrong ("CUDA error ...")
  };
  // Called on the watchdog thread, with no lock of the caller's held.
  using PollFn = std::function<Poll()>;
  // Called once per watched operation when it leaves the list: after it completed or failed, or when the
  // watchdog is destroyed with it still pending. Frees what the operation owned (a CUDA event).
  using ReleaseFn = std::function<void()>;
  // Called on the watchdog thread for an operation that failed or outlived the timeout: `what` as given to
  // watch(), `reason` "did not complete within T s (...)" or the poll's error. Not called with the
  // watchdog's lock held, so it may call watch().
  using FailFn = std::function<void(const std::string& what, const std::string& reason)>;

  // timeout_s <= 0: no deadline. thread_init runs first on the thread (e.g. cudaSetDevice). The thread
  // starts with the first watch() and looks at every operation each period_s.
  Watchdog(double timeout_s, std::function<void()> thread_init, FailFn on_failure, double period_s = 0.02);
  // Stops and joins the thread, then releases the operations still watched (their poll is not called).
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Any thread.
  void watch(std::string what, PollFn poll, ReleaseFn release);
  std::size_t pending() const;  // operations watched, including those being polled this round

 private:
  struct Watched {
    std::string what;
    PollFn poll;
    ReleaseFn release;
    double deadline;
  };
  void loop();

  const double timeout_s_;
  const double period_s_;
  std::function<void()> thread_init_;
  FailFn on_failure_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Watched> watched_;  // guarded by mu_
  std::size_t polling_ = 0;       // operations taken out of watched_ by the thread this round (mu_)
  bool stop_ = false;             // mu_
  std::thread thread_;            // started under mu_ by the first watch()
};

}  // namespace lorabench::comm
