// Kernel software counters (perf_event_open with PERF_TYPE_SOFTWARE) for the perf:: event names.
// papi.cpp uses them when PAPI's perf_event component cannot provide these events (it disables itself
// when libpfm4 finds no core PMU, software events included). Private to src/metrics.
#pragma once

#include <cstdint>
#include <string>

namespace lorabench::metrics::detail {

// True when `name` is one of the perf:: software events this path knows (libpfm4's names and aliases,
// case-insensitive, no modifiers): TASK-CLOCK, CPU-CLOCK, PAGE-FAULTS|FAULTS, MINOR-FAULTS,
// MAJOR-FAULTS, CONTEXT-SWITCHES|CS, CPU-MIGRATIONS|MIGRATIONS. Sets *config to PERF_COUNT_SW_*.
bool software_event_config(const std::string& name, uint64_t* config);

// One kernel counter on the calling thread (pid 0, any CPU, user domain like PAPI_DOM_USER), created
// disabled. Owns its file descriptor.
class SoftwareCounter {
 public:
  SoftwareCounter() = default;
  ~SoftwareCounter();
  SoftwareCounter(SoftwareCounter&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  SoftwareCounter& operator=(SoftwareCounter&& o) noexcept;
  SoftwareCounter(const SoftwareCounter&) = delete;
  SoftwareCounter& operator=(const SoftwareCounter&) = delete;

  // Opens `name`; on failure returns a closed counter and sets *reason (never throws for that).
  static SoftwareCounter open(const std::string& name, std::string* reason);
  bool is_open() const { return fd_ >= 0; }
  void enable();          // throws Error
  int64_t read() const;   // cumulative count since enable(); throws Error

 private:
  explicit SoftwareCounter(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace lorabench::metrics::detail
