// Hardware / software event counters per training phase, through PAPI. Torch-free.
//
// PhaseCounters::create() tries the configured events; events that cannot be counted are recorded as
// unavailable with the reason PAPI gives. Only if *none* of the configured events can be counted are the
// fallback events tried (same rules). The result says exactly which events were counted and which were
// not, and why; it never throws because an event is missing (a benchmark without counters is still a
// benchmark, but the run file must say so).
//
// Where PAPI's perf_event component is disabled (libpfm4 finds no core PMU: e.g. AMD VMs without a
// virtual PMU, where even perf:: software events "do not exist" for PAPI), perf:: software events
// (perf::TASK-CLOCK, perf::PAGE-FAULTS, perf::CONTEXT-SWITCHES, ...) are opened directly with the
// kernel's perf_event_open, the same kernel counters PAPI would program. Such events are listed in
// counted_via() as "perf_event_open" instead of "papi" and status() says so.
//
// Which implementation is linked is decided by CMake (LORABENCH_HAVE_PAPI): without PAPI, create()
// returns a counter set that counts nothing and reports "built without PAPI".
//
// Threads: counters count the thread that called create() (PAPI's default, no PAPI_thread_init), i.e.
// the rank's main thread. Work that runs on other threads (an OpenMP or OpenBLAS pool) is not counted.
// REQUIRES: begin/end/take_step are called from the thread that called create() (checked).
// Domain: user-level counting (PAPI's default domain, PAPI_DOM_USER); the direct kernel path uses the
// same setting (exclude_kernel, exclude_hv).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lorabench/metrics/phase.hpp"

namespace lorabench::metrics {

struct UnavailableEvent {
  std::string name;
  std::string reason;  // PAPI's error string, e.g. "Event does not exist", plus context where known
};

// The counter values of one step: values[phase_index(p)][i] is counted_events()[i] summed over every
// begin(p)/end(p) pair of the step. Units are the events' own (perf::TASK-CLOCK: nanoseconds).
struct PhaseCounts {
  std::vector<std::string> events;  // = counted_events()
  std::array<std::vector<int64_t>, kPhaseCount> values;
  std::array<int, kPhaseCount> intervals{};  // how many begin/end pairs each phase had in the step

  int64_t value(Phase p, size_t event) const { return values[phase_index(p)].at(event); }
};

// A running set of counters whose cumulative totals can be read at any time. The seam between the
// phase bookkeeping (PhaseCounters) and PAPI; tests use a fake.
class CounterSource {
 public:
  virtual ~CounterSource() = default;
  virtual const std::vector<std::string>& counted_events() const = 0;
  // Parallel to counted_events(): "papi" or "perf_event_open".
  virtual const std::vector<std::string>& counted_via() const = 0;
  virtual const std::vector<UnavailableEvent>& unavailable_events() const = 0;
  // One line for logs and the run file (see PhaseCounters::status()).
  virtual std::string status() const = 0;
  // Writes the cumulative count of each counted event since the set was started into out[0..n).
  // Throws lorabench::Error when the read fails.
  virtual void read(int64_t* out) = 0;
};

// Opens and starts the counters (papi.cpp, or papi_unavailable.cpp when built without PAPI).
std::unique_ptr<CounterSource> open_counter_source(const std::vector<std::string>& events,
                                                   const std::vector<std::string>& fallback);

// "counting A,B; unavailable: C (reason), D (reason)" / "counting nothing; unavailable: ...".
std::string format_counter_status(const std::vector<std::string>& counted, const std::vector<std::string>& via,
                                  const std::vector<UnavailableEvent>& unavailable);

// True when this build links PAPI (LORABENCH_HAVE_PAPI).
bool built_with_papi();

// Per-phase accumulation of counter deltas over one running event set. Move-only; owns the event set.
class PhaseCounters {
 public:
  // events: the configured events (profile.papi_events); fallback: tried only when none of `events`
  // can be counted (profile.papi_fallback). Never throws because an event is unavailable.
  static PhaseCounters create(const std::vector<std::string>& events, const std::vector<std::string>& fallback);

  // Wraps any source (tests pass a fake).
  explicit PhaseCounters(std::unique_ptr<CounterSource> source);
  PhaseCounters(PhaseCounters&&) noexcept = default;
  PhaseCounters& operator=(PhaseCounters&&) noexcept = default;
  PhaseCounters(const PhaseCounters&) = delete;
  PhaseCounters& operator=(const PhaseCounters&) = delete;
  ~PhaseCounters();

  const std::vector<std::string>& counted_events() const { return source_->counted_events(); }
  const std::vector<std::string>& counted_via() const { return source_->counted_via(); }
  const std::vector<UnavailableEvent>& unavailable_events() const { return source_->unavailable_events(); }
  // At least one event is counted.
  bool available() const { return !source_->counted_events().empty(); }
  // "counting perf::TASK-CLOCK,perf::PAGE-FAULTS; unavailable: PAPI_TOT_INS (Event does not exist)",
  // or "built without PAPI".
  std::string status() const { return source_->status(); }

  // Phase boundaries: one counter read each (a few microseconds with PAPI; nothing when no event is
  // counted). Phases may nest (comm inside backward): each phase gets the delta between its own begin
  // and end, so an inner phase's counts are also part of the outer one's. A phase may be entered several
  // times per step (micro-batches); its deltas add up.
  // REQUIRES: begin(p) not already open for p; end(p) only after begin(p). Violations throw Error.
  void begin(Phase p);
  void end(Phase p);

  // The per-phase values since the previous take_step(), then resets them.
  // REQUIRES: no phase is open.
  PhaseCounts take_step();

 private:
  void read_now();
  void check_thread() const;

  std::unique_ptr<CounterSource> source_;
  std::thread::id owner_;
  std::vector<int64_t> now_;                                // scratch for one read
  std::array<std::vector<int64_t>, kPhaseCount> start_;     // counter values at begin(p)
  std::array<bool, kPhaseCount> open_{};
  PhaseCounts step_;
};

}  // namespace lorabench::metrics
