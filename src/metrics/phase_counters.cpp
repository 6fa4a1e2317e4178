// Phase bookkeeping over any CounterSource; the PAPI specifics live in papi.cpp / papi_unavailable.cpp.
#include <algorithm>

#include "lorabench/core/error.hpp"
#include "lorabench/metrics/papi.hpp"

namespace lorabench::metrics {

std::string format_counter_status(const std::vector<std::string>& counted, const std::vector<std::string>& via,
                                  const std::vector<UnavailableEvent>& unavailable) {
  std::string s = "counting ";
  if (counted.empty()) {
    s += "nothing";
  } else {
    for (size_t i = 0; i < counted.size(); ++i) {
      if (i > 0) s += ",";
      s += counted[i];
      if (i < via.size() && via[i] != "papi") s += " [" + via[i] + "]";
    }
  }
  if (!unavailable.empty()) {
    s += "; unavailable: ";
    for (size_t i = 0; i < unavailable.size(); ++i) {
      if (i > 0) s += ", ";
      s += unavailable[i].name + " (" + unavailable[i].reason + ")";
    }
  }
  return s;
}

PhaseCounters PhaseCounters::create(const std::vector<std::string>& events, const std::vector<std::string>& fallback) {
  return PhaseCounters(open_counter_source(events, fallback));
}

PhaseCounters::PhaseCounters(std::unique_ptr<CounterSource> source)
    : source_(std::move(source)), owner_(std::this_thread::get_id()) {
  LB_CHECK(source_ != nullptr, "PhaseCounters needs a counter source");
  const size_t n = source_->counted_events().size();
  LB_CHECK(source_->counted_via().size() == n, "counted_via() must parallel counted_events()");
  now_.assign(n, 0);
  for (auto& s : start_) s.assign(n, 0);
  step_.events = source_->counted_events();
  for (auto& v : step_.values) v.assign(n, 0);
}

PhaseCounters::~PhaseCounters() = default;

void PhaseCounters::check_thread() const {
  if (std::this_thread::get_id() != owner_) {
    LB_THROW(Error, "PhaseCounters used from a thread other than the one that created it (counters count "
                    "only the creating thread)");
  }
}

void PhaseCounters::read_now() {
  if (!now_.empty()) source_->read(now_.data());
}

void PhaseCounters::begin(Phase p) {
  check_thread();
  const int i = phase_index(p);
  if (open_[i]) LB_THROW(Error, std::string("PhaseCounters::begin(") + phase_name(p) + "): phase already open");
  read_now();
  start_[i] = now_;
  open_[i] = true;
}

void PhaseCounters::end(Phase p) {
  check_thread();
  const int i = phase_index(p);
  if (!open_[i]) LB_THROW(Error, std::string("PhaseCounters::end(") + phase_name(p) + "): phase not open");
  read_now();
  auto& acc = step_.values[i];
  for (size_t e = 0; e < now_.size(); ++e) acc[e] += now_[e] - start_[i][e];
  step_.intervals[i] += 1;
  open_[i] = false;
}

PhaseCounts PhaseCounters::take_step() {
  check_thread();
  for (Phase p : kAllPhases) {
    if (open_[phase_index(p)]) {
      LB_THROW(Error, std::string("PhaseCounters::take_step(): phase ") + phase_name(p) + " is still open");
    }
  }
  PhaseCounts out = step_;
  for (auto& v : step_.values) std::fill(v.begin(), v.end(), 0);
  step_.intervals.fill(0);
  return out;
}

}  // namespace lorabench::metrics
