#include "lorabench/comm/watchdog.hpp"

#include <chrono>
#include <utility>

#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"

namespace lorabench::comm {

Watchdog::Watchdog(double timeout_s, std::function<void()> thread_init, FailFn on_failure, double period_s)
    : timeout_s_(timeout_s), period_s_(period_s), thread_init_(std::move(thread_init)),
      on_failure_(std::move(on_failure)) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& w : watched_)
    if (w.release) w.release();
}

void Watchdog::watch(std::string what, PollFn poll, ReleaseFn release) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) {
    // Destruction has begun: nothing will poll it, so hand it back at once.
    if (release) release();
    return;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  const double deadline = timeout_s_ > 0 ? sys::now_s() + timeout_s_ : 1e300;
  watched_.push_back({std::move(what), std::move(poll), std::move(release), deadline});
}

std::size_t Watchdog::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watched_.size() + polling_;
}

void Watchdog::loop() {
  if (thread_init_) thread_init_();
  const auto period = std::chrono::duration<double>(period_s_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, period);
    if (stop_) break;
    // Poll without the lock, so that watch() from the host never waits behind a slow poll; operations
    // watched meanwhile are looked at next round.
    std::vector<Watched> round;
    round.swap(watched_);
    polling_ = round.size();
    lock.unlock();
    std::vector<Watched> keep;
    std::vector<std::pair<std::string, std::string>> failed;
    for (auto& w : round) {
      Poll p = w.poll ? w.poll() : Poll{State::kDone, {}};
      if (p.state == State::kPending && sys::now_s() > w.deadline) {
        p.state = State::kFailed;
        p.error = strformat("did not complete within %.1f s (a rank is stuck or has failed)", timeout_s_);
      }
      if (p.state == State::kPending) {
        keep.push_back(std::move(w));
        continue;
      }
      if (p.state == State::kFailed) failed.emplace_back(w.what, p.error);
      if (w.release) w.release();
    }
    for (const auto& f : failed) on_failure_(f.first, f.second);
    lock.lock();
    polling_ = 0;
    // Kept ones go first: they were watched before anything added during this round.
    keep.insert(keep.end(), std::make_move_iterator(watched_.begin()), std::make_move_iterator(watched_.end()));
    watched_.swap(keep);
  }
}

}  // namespace lorabench::comm
