// comm::Watchdog, the thread that watches collectives the host does not wait for (the NCCL backend's
// device waits). CUDA-free, so its thread logic runs here, and under ThreadSanitizer in
// `scripts/sanitize.sh tsan`.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lorabench/comm/watchdog.hpp"

using lorabench::comm::Watchdog;

namespace {

// Waits (at most 10 s) until `pred` holds; true when it did.
template <class Pred>
bool eventually(Pred pred) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

struct Failures {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> seen;
  Watchdog::FailFn fn() {
    return [this](const std::string& what, const std::string& reason) {
      std::lock_guard<std::mutex> lock(mu);
      seen.emplace_back(what, reason);
    };
  }
  std::vector<std::pair<std::string, std::string>> get() {
    std::lock_guard<std::mutex> lock(mu);
    return seen;
  }
};

// An operation that completes after `polls_left` more polls (never when negative).
struct FakeOp {
  std::atomic<int> polls_left;
  std::atomic<int> polls{0};
  std::atomic<int> releases{0};
  explicit FakeOp(int n) : polls_left(n) {}
  Watchdog::PollFn poll() {
    return [this]() -> Watchdog::Poll {
      ++polls;
      if (polls_left.load() < 0) return {};
      if (polls_left.fetch_sub(1) <= 1) return {Watchdog::State::kDone, {}};
      return {};
    };
  }
  Watchdog::ReleaseFn release() {
    return [this] { ++releases; };
  }
};

}  // namespace

TEST(Watchdog, ReleasesCompletedOperationsOnceWithoutFailure) {
  Failures f;
  FakeOp a(3), b(1);
  std::atomic<int> inits{0};
  std::thread::id init_thread;
  {
    Watchdog wd(5.0, [&] { ++inits; init_thread = std::this_thread::get_id(); }, f.fn(), 0.001);
    wd.watch("allreduce a", a.poll(), a.release());
    wd.watch("allreduce b", b.poll(), b.release());
    ASSERT_TRUE(eventually([&] { return wd.pending() == 0; }));
    EXPECT_EQ(f.get().size(), 0u);
  }
  EXPECT_EQ(a.releases, 1);
  EXPECT_EQ(b.releases, 1);
  EXPECT_EQ(a.polls, 3);  // polled until done, never again
  EXPECT_EQ(b.polls, 1);
  EXPECT_EQ(inits, 1);
  EXPECT_NE(init_thread, std::this_thread::get_id());  // thread_init ran on the watchdog's thread
  EXPECT_TRUE(f.get().empty());
}

TEST(Watchdog, AnOperationPastItsDeadlineFailsOnceWithItsName) {
  Failures f;
  FakeOp stuck(-1), fine(2);
  Watchdog wd(0.2, nullptr, f.fn(), 0.001);
  wd.watch("reduce_scatter bucket 3", stuck.poll(), stuck.release());
  wd.watch("all_gather layer 1", fine.poll(), fine.release());
  ASSERT_TRUE(eventually([&] { return f.get().size() == 1 && wd.pending() == 0; }));
  const auto seen = f.get();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, "reduce_scatter bucket 3");
  EXPECT_EQ(seen[0].second, "did not complete within 0.2 s (a rank is stuck or has failed)");
  EXPECT_EQ(stuck.releases, 1);
  EXPECT_EQ(fine.releases, 1);
  const int polls = stuck.polls;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(stuck.polls, polls);  // released: never polled again
  EXPECT_EQ(f.get().size(), 1u);
}

TEST(Watchdog, APollErrorIsReportedAsItsFailure) {
  Failures f;
  std::atomic<int> released{0};
  Watchdog wd(0, nullptr, f.fn(), 0.001);
  wd.watch("broadcast", [] { return Watchdog::Poll{Watchdog::State::kFailed, "CUDA error cudaErrorLaunchFailure"}; },
           [&] { ++released; });
  ASSERT_TRUE(eventually([&] { return f.get().size() == 1; }));
  const auto seen = f.get();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, "broadcast");
  EXPECT_EQ(seen[0].second, "CUDA error cudaErrorLaunchFailure");
  EXPECT_TRUE(eventually([&] { return released == 1; }));
}

TEST(Watchdog, NoDeadlineWithoutATimeout) {
  Failures f;
  FakeOp stuck(-1);
  Watchdog wd(0, nullptr, f.fn(), 0.001);
  wd.watch("allreduce", stuck.poll(), stuck.release());
  ASSERT_TRUE(eventually([&] { return stuck.polls >= 50; }));
  EXPECT_EQ(f.get().size(), 0u);
  EXPECT_EQ(wd.pending(), 1u);
  EXPECT_EQ(stuck.releases, 0);
}

TEST(Watchdog, DestructionReleasesWhatIsStillWatchedWithoutPollingIt) {
  Failures f;
  FakeOp stuck(-1), never_polled(-1);
  {
    Watchdog wd(0, nullptr, f.fn(), 0.001);
    wd.watch("allreduce", stuck.poll(), stuck.release());
    ASSERT_TRUE(eventually([&] { return stuck.polls > 0; }));
  }
  EXPECT_EQ(stuck.releases, 1);
  EXPECT_TRUE(f.get().empty());
  {
    Watchdog wd(0, nullptr, f.fn(), 10.0);  // the thread is waiting its 10 s period when it is stopped
    wd.watch("allreduce", never_polled.poll(), never_polled.release());
  }
  EXPECT_EQ(never_polled.polls, 0);
  EXPECT_EQ(never_polled.releases, 1);
}

TEST(Watchdog, TheFailureCallbackMayWatchAgain) {
  // The NCCL backend's callback aborts the communicator; nothing may deadlock if it (or what it calls)
  // hands the watchdog another operation.
  std::atomic<int> follow_up_released{0};
  std::unique_ptr<Watchdog> wd;
  std::atomic<int> calls{0};
  wd = std::make_unique<Watchdog>(
      0, nullptr,
      [&](const std::string&, const std::string&) {
        if (calls++ == 0)
          wd->watch("follow-up", [] { return Watchdog::Poll{Watchdog::State::kDone, {}}; },
                    [&] { ++follow_up_released; });
      },
      0.001);
  wd->watch("first", [] { return Watchdog::Poll{Watchdog::State::kFailed, "NCCL error"}; }, nullptr);
  ASSERT_TRUE(eventually([&] { return follow_up_released == 1; }));
  EXPECT_EQ(calls, 1);
  wd.reset();
}

TEST(Watchdog, ManyThreadsWatchConcurrently) {
  Failures f;
  constexpr int kThreads = 4, kOps = 200;
  std::vector<std::unique_ptr<FakeOp>> ops;
  for (int i = 0; i < kThreads * kOps; ++i) ops.push_back(std::make_unique<FakeOp>(1 + i % 3));
  {
    Watchdog wd(30.0, nullptr, f.fn(), 0.0005);
    std::vector<std::thread> hosts;
    for (int t = 0; t < kThreads; ++t)
      hosts.emplace_back([&, t] {
        for (int i = 0; i < kOps; ++i) {
          FakeOp& op = *ops[size_t(t * kOps + i)];
          wd.watch("op " + std::to_string(t * kOps + i), op.poll(), op.release());
          (void)wd.pending();
        }
      });
    for (auto& h : hosts) h.join();
    ASSERT_TRUE(eventually([&] { return wd.pending() == 0; }));
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(ops[i]->releases, 1) << "op " << i;
    EXPECT_EQ(ops[i]->polls, 1 + int(i % 3)) << "op " << i;  // polled until done, never after
  }
  EXPECT_TRUE(f.get().empty());
}
