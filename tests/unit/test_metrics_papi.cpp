// PhaseCounters bookkeeping over a fake counter source, and the status format. The real PAPI path of
// this build is tested in test_metrics_papi_on.cpp / test_metrics_papi_off.cpp.
#include <gtest/gtest.h>

#include <thread>

#include "lorabench/core/error.hpp"
#include "lorabench/metrics/papi.hpp"

using lorabench::metrics::CounterSource;
using lorabench::metrics::Phase;
using lorabench::metrics::PhaseCounters;
using lorabench::metrics::UnavailableEvent;

namespace {

// Counters whose cumulative totals the test sets by hand.
class FakeSource final : public CounterSource {
 public:
  explicit FakeSource(std::vector<int64_t>* totals) : totals_(totals) {
    for (size_t i = 0; i < totals->size(); ++i) {
      names_.push_back("fake" + std::to_string(i));
      via_.push_back("papi");
    }
    unavailable_.push_back(UnavailableEvent{"PAPI_TOT_INS", "Event does not exist"});
  }
  const std::vector<std::string>& counted_events() const override { return names_; }
  const std::vector<std::string>& counted_via() const override { return via_; }
  const std::vector<UnavailableEvent>& unavailable_events() const override { return unavailable_; }
  std::string status() const override {
    return lorabench::metrics::format_counter_status(names_, via_, unavailable_);
  }
  void read(int64_t* out) override {
    ++reads;
    for (size_t i = 0; i < totals_->size(); ++i) out[i] = (*totals_)[i];
  }
  int reads = 0;

 private:
  std::vector<int64_t>* totals_;
  std::vector<std::string> names_, via_;
  std::vector<UnavailableEvent> unavailable_;
};

}  // namespace

TEST(PapiPhases, BuildMatchesTheTestsCompileDefinition) {
  EXPECT_EQ(lorabench::metrics::built_with_papi(), LORABENCH_TEST_HAVE_PAPI == 1);
}

TEST(PapiPhases, StatusFormat) {
  using lorabench::metrics::format_counter_status;
  EXPECT_EQ(format_counter_status({"perf::TASK-CLOCK", "perf::PAGE-FAULTS"}, {"papi", "papi"},
                                  {{"PAPI_TOT_INS", "Event does not exist"}}),
            "counting perf::TASK-CLOCK,perf::PAGE-FAULTS; unavailable: PAPI_TOT_INS (Event does not exist)");
  EXPECT_EQ(format_counter_status({"perf::TASK-CLOCK"}, {"perf_event_open"}, {}),
            "counting perf::TASK-CLOCK [perf_event_open]");
  EXPECT_EQ(format_counter_status({}, {}, {{"A", "x"}, {"B", "y"}}), "counting nothing; unavailable: A (x), B (y)");
}

TEST(PapiPhases, DeltasAccumulatePerPhaseAndResetPerStep) {
  std::vector<int64_t> totals = {100, 1000};
  auto fake = std::make_unique<FakeSource>(&totals);
  FakeSource* src = fake.get();
  PhaseCounters pc(std::move(fake));
  EXPECT_TRUE(pc.available());
  EXPECT_EQ(pc.counted_events(), (std::vector<std::string>{"fake0", "fake1"}));
  ASSERT_EQ(pc.unavailable_events().size(), 1u);
  EXPECT_EQ(pc.status(), "counting fake0,fake1; unavailable: PAPI_TOT_INS (Event does not exist)");

  pc.begin(Phase::kData);
  totals = {103, 1010};
  pc.end(Phase::kData);  // data += {3, 10}
  pc.begin(Phase::kForward);
  totals = {110, 1100};
  pc.end(Phase::kForward);  // forward += {7, 90}
  pc.begin(Phase::kBackward);
  totals = {120, 1200};
  pc.begin(Phase::kComm);  // comm nested inside backward
  totals = {125, 1250};
  pc.end(Phase::kComm);  // comm += {5, 50}
  totals = {130, 1300};
  pc.end(Phase::kBackward);  // backward += {20, 200} (includes the nested comm)
  pc.begin(Phase::kForward);  // a second micro-batch
  totals = {131, 1301};
  pc.end(Phase::kForward);  // forward += {1, 1}
  EXPECT_EQ(src->reads, 10);  // one read per boundary: 5 begin/end pairs

  auto s = pc.take_step();
  EXPECT_EQ(s.events, (std::vector<std::string>{"fake0", "fake1"}));
  EXPECT_EQ(s.value(Phase::kData, 0), 3);
  EXPECT_EQ(s.value(Phase::kData, 1), 10);
  EXPECT_EQ(s.value(Phase::kForward, 0), 8);
  EXPECT_EQ(s.value(Phase::kForward, 1), 91);
  EXPECT_EQ(s.value(Phase::kBackward, 0), 20);
  EXPECT_EQ(s.value(Phase::kBackward, 1), 200);
  EXPECT_EQ(s.value(Phase::kComm, 0), 5);
  EXPECT_EQ(s.value(Phase::kComm, 1), 50);
  EXPECT_EQ(s.value(Phase::kOptimizer, 0), 0);
  EXPECT_EQ(s.intervals[lorabench::metrics::phase_index(Phase::kForward)], 2);
  EXPECT_EQ(s.intervals[lorabench::metrics::phase_index(Phase::kOptimizer)], 0);

  pc.begin(Phase::kOptimizer);
  totals = {140, 1400};
  pc.end(Phase::kOptimizer);
  auto s2 = pc.take_step();
  EXPECT_EQ(s2.value(Phase::kForward, 0), 0);  // reset by the previous take_step
  EXPECT_EQ(s2.value(Phase::kOptimizer, 0), 9);
  EXPECT_EQ(s2.value(Phase::kOptimizer, 1), 99);
}

TEST(PapiPhases, MisuseThrows) {
  std::vector<int64_t> totals = {0};
  PhaseCounters pc(std::make_unique<FakeSource>(&totals));
  EXPECT_THROW(pc.end(Phase::kForward), lorabench::Error);
  pc.begin(Phase::kForward);
  EXPECT_THROW(pc.begin(Phase::kForward), lorabench::Error);
  EXPECT_THROW(pc.take_step(), lorabench::Error);
  bool threw = false;
  std::thread other([&] {
    try {
      pc.end(Phase::kForward);
    } catch (const lorabench::Error&) {
      threw = true;
    }
  });
  other.join();
  EXPECT_TRUE(threw) << "use from another thread must be refused";
  pc.end(Phase::kForward);
  EXPECT_NO_THROW(pc.take_step());
}
