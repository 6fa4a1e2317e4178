// Chrome trace recording (the "Trace Event Format" read by Perfetto and chrome://tracing). Torch-free.
//
// One TraceRecorder per rank records complete events ("ph":"X": name, category, start and duration in
// microseconds, pid = rank, tid = a lane number) and writes them as one JSON file:
//   {"traceEvents":[...], "displayTimeUnit":"ms", "otherData":{...}}
// A default-constructed recorder is disabled: record()/TraceScope do nothing, read no clock and allocate
// nothing, so trace points can stay in the hot loop. How to open the files: docs/metrics.md.
//
// Not thread-safe: record from one thread per recorder (the rank's main thread), or guard externally.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lorabench::metrics {

struct TraceEvent {
  std::string name;
  std::string cat;
  double ts_us = 0;   // start, microseconds since the recorder's origin
  double dur_us = 0;  // duration, microseconds
  int tid = 0;
  std::vector<std::pair<std::string, double>> args;  // shown in the viewer's details pane
};

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  // Disabled: records nothing.
  TraceRecorder() = default;

  // Enabled recorder for `rank` (written as pid). `origin` is time zero of the ts values; give every
  // rank the same instant (e.g. taken right after a barrier) so per-rank files line up when merged.
  // The wall-clock time of the origin goes into otherData as "origin_unix_us".
  static TraceRecorder enabled_for_rank(int rank, Clock::time_point origin = Clock::now(),
                                        size_t reserve_events = 4096);

  bool enabled() const { return enabled_; }
  int rank() const { return rank_; }

  // Microseconds from the origin to now (0 when disabled, without reading the clock).
  double now_us() const;
  double to_us(Clock::time_point t) const;

  // Records a complete event. No-op when disabled. REQUIRES: dur_us >= 0.
  void record(const char* name, const char* cat, double ts_us, double dur_us, int tid = 0);
  void record(TraceEvent event);

  // Names shown for the process (default "rank <r>") and for a tid lane; no-op when disabled.
  void set_process_name(const std::string& name);
  void set_thread_name(int tid, const std::string& name);
  // A string entry of "otherData" (run name, config, git commit...). No-op when disabled.
  void set_metadata(const std::string& key, const std::string& value);

  const std::vector<TraceEvent>& events() const { return events_; }

  // The whole trace as JSON text (valid JSON also when empty). Disabled recorders give an empty trace.
  std::string to_json() const;
  // Writes to_json() to `path` (through a temporary file renamed into place). Throws IoError.
  void write(const std::string& path) const;

 private:
  bool enabled_ = false;
  int rank_ = 0;
  Clock::time_point origin_{};
  int64_t origin_unix_us_ = 0;
  std::string process_name_;
  std::vector<std::pair<int, std::string>> thread_names_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<TraceEvent> events_;
};

// Records the lifetime of the scope as one complete event. `name` and `cat` must outlive the scope
// (string literals, typically); they are copied only when the recorder is enabled.
class TraceScope {
 public:
  TraceScope(TraceRecorder& recorder, const char* name, const char* cat, int tid = 0)
      : recorder_(recorder.enabled() ? &recorder : nullptr), name_(name), cat_(cat), tid_(tid) {
    if (recorder_ != nullptr) start_us_ = recorder_->now_us();
  }
  ~TraceScope() {
    if (recorder_ != nullptr) recorder_->record(name_, cat_, start_us_, recorder_->now_us() - start_us_, tid_);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  TraceRecorder* recorder_;
  const char* name_;
  const char* cat_;
  int tid_;
  double start_us_ = 0;
};

// Concatenates per-rank trace files into one: the union of their events, each file's ts shifted from its
// own origin onto the earliest origin_unix_us (wall clock: ranks on different hosts line up only as well
// as their clocks agree); otherData of the first file plus "merged_from". Perfetto then shows one
// process per rank on one time axis. Throws IoError.
void merge_trace_files(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace lorabench::metrics
