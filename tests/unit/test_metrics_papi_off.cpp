// The PAPI path of a build without PAPI: counts nothing, says so, and the phase calls still work.
#include <gtest/gtest.h>

#include "lorabench/metrics/papi.hpp"

using lorabench::metrics::Phase;
using lorabench::metrics::PhaseCounters;

TEST(PapiOff, ReportsBuiltWithoutPapi) {
  PhaseCounters pc = PhaseCounters::create({"PAPI_TOT_INS"}, {"perf::TASK-CLOCK"});
  EXPECT_EQ(pc.status(), "built without PAPI");
  EXPECT_FALSE(pc.available());
  EXPECT_TRUE(pc.counted_events().empty());
  ASSERT_EQ(pc.unavailable_events().size(), 2u);
  EXPECT_EQ(pc.unavailable_events()[0].name, "PAPI_TOT_INS");
  EXPECT_EQ(pc.unavailable_events()[0].reason, "built without PAPI");
  EXPECT_EQ(pc.unavailable_events()[1].name, "perf::TASK-CLOCK");
  pc.begin(Phase::kBackward);
  pc.end(Phase::kBackward);
  const auto step = pc.take_step();
  EXPECT_TRUE(step.events.empty());
  EXPECT_EQ(step.intervals[lorabench::metrics::phase_index(Phase::kBackward)], 1);
}
