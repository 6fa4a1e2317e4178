// core/stop_request: SIGTERM, SIGUSR1 and SIGINT are recorded, not acted on, and the handler stays installed.
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>

#include "lorabench/core/stop_request.hpp"

namespace stop = lorabench::stop;

TEST(StopRequest, RecordsTheFirstSignalAndCountsTheOthers) {
  std::signal(SIGINT, SIG_DFL);  // ctest may run as a background job, which inherits SIGINT ignored
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
  ASSERT_EQ(std::raise(SIGINT), 0);  // Ctrl-C: a stop request too, not the end of the process
  EXPECT_EQ(stop::requested(), SIGINT);
  EXPECT_EQ(stop::count(), 1);
  stop::reset();
}

TEST(StopRequest, InterruptedCallsRestart) {
  std::signal(SIGINT, SIG_DFL);
  stop::install_handlers();
  struct sigaction sa;
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &sa), 0);
  EXPECT_NE(sa.sa_flags & SA_RESTART, 0);  // a write interrupted by the signal resumes instead of failing
  EXPECT_EQ(sa.sa_flags & SA_RESETHAND, 0);  // a second signal must not get the default action
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &sa), 0);
  EXPECT_NE(sa.sa_flags & SA_RESTART, 0);
  ASSERT_EQ(sigaction(SIGINT, nullptr, &sa), 0);
  EXPECT_NE(sa.sa_flags & SA_RESTART, 0);
}

TEST(StopRequest, AnIgnoredSigintStaysIgnored) {
  struct sigaction ign, keep;
  std::memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGINT, &ign, &keep), 0);
  stop::install_handlers();
  struct sigaction now;
  ASSERT_EQ(sigaction(SIGINT, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  ASSERT_EQ(sigaction(SIGINT, &keep, nullptr), 0);
}

TEST(StopRequest, Names) {
  EXPECT_STREQ(stop::signal_name(SIGTERM), "SIGTERM");
  EXPECT_STREQ(stop::signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_STREQ(stop::signal_name(SIGINT), "SIGINT");
  EXPECT_EQ(stop::kExitPreempted, 75);
}
