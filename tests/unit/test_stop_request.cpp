// core/stop_request: SIGTERM and SIGUSR1 are recorded, not acted on, and the handler stays installed.
#include <gtest/gtest.h>

#include <csignal>

#include "lorabench/core/stop_request.hpp"

namespace stop = lorabench::stop;

TEST(StopRequest, RecordsTheFirstSignalAndCountsTheOthers) {
  stop::install_handlers();
  stop::reset();
  EXPECT_EQ(stop::requested(), 0);
  EXPECT_EQ(stop::count(), 0);
  ASSERT_EQ(std::raise(SIGUSR1), 0);  // the default action would end this process
  EXPECT_EQ(stop::requested(), SIGUSR1);
  EXPECT_EQ(stop::count(), 1);
  ASSERT_EQ(std::raise(SIGTERM), 0);  // a second signal: counted, the first one stays the request
  ASSERT_EQ(std::raise(SIGUSR1), 0);
  EXPECT_EQ(stop::requested(), SIGUSR1);
  EXPECT_EQ(stop::count(), 3);
  stop::reset();
  EXPECT_EQ(stop::requested(), 0);
  ASSERT_EQ(std::raise(SIGTERM), 0);
  EXPECT_EQ(stop::requested(), SIGTERM);
  stop::reset();
}

TEST(StopRequest, InterruptedCallsRestart) {
  stop::install_handlers();
  struct sigaction sa;
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &sa), 0);
  EXPECT_NE(sa.sa_flags & SA_RESTART, 0);  // a write interrupted by the signal resumes instead of failing
  EXPECT_EQ(sa.sa_flags & SA_RESETHAND, 0);  // a second signal must not get the default action
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &sa), 0);
  EXPECT_NE(sa.sa_flags & SA_RESTART, 0);
}

TEST(StopRequest, Names) {
  EXPECT_STREQ(stop::signal_name(SIGTERM), "SIGTERM");
  EXPECT_STREQ(stop::signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(stop::kExitPreempted, 75);
}
