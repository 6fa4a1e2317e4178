// PAPI implementation of the counter source (compiled when LORABENCH_HAVE_PAPI is ON).
#include "lorabench/metrics/papi.hpp"

#include <papi.h>

#include <set>
#include <utility>

#include "lorabench/core/error.hpp"
#include "perf_software.hpp"

// LB_PAPI_CHECK(call): throws lorabench::Error naming the call, PAPI's error string and file:line.
#define LB_PAPI_CHECK(call)                                                                 \
  do {                                                                                      \
    const int lb_papi_rc_ = (call);                                                         \
    if (lb_papi_rc_ != PAPI_OK) LB_THROW(::lorabench::Error, std::string(#call) + ": " +    \
                                                                 papi_error(lb_papi_rc_)); \
  } while (0)

namespace lorabench::metrics {

namespace {

std::string papi_error(int rc) {
  const char* s = PAPI_strerror(rc);
  return s != nullptr ? std::string(s) : "PAPI error " + std::to_string(rc);
}

// Owns one PAPI event set: stops it if running, then cleans up and destroys it.
class EventSet {
 public:
  EventSet() = default;
  ~EventSet() { reset(); }
  EventSet(EventSet&& o) noexcept : id_(std::exchange(o.id_, PAPI_NULL)), running_(std::exchange(o.running_, false)) {}
  EventSet& operator=(EventSet&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, PAPI_NULL);
      running_ = std::exchange(o.running_, false);
    }
    return *this;
  }
  EventSet(const EventSet&) = delete;
  EventSet& operator=(const EventSet&) = delete;

  // PAPI_OK or PAPI's error code.
  int create() { return PAPI_create_eventset(&id_); }
  int start() {
    const int rc = PAPI_start(id_);
    running_ = rc == PAPI_OK;
    return rc;
  }
  int id() const { return id_; }

 private:
  void reset() {
    if (id_ == PAPI_NULL) return;
    if (running_) PAPI_stop(id_, nullptr);
    PAPI_cleanup_eventset(id_);
    PAPI_destroy_eventset(&id_);
    id_ = PAPI_NULL;
    running_ = false;
  }

  int id_ = PAPI_NULL;
  bool running_ = false;
};

// "" when PAPI's perf_event component is enabled (or absent), else why it is disabled.
std::string perf_event_component_note() {
  const int cid = PAPI_get_component_index("perf_event");
  if (cid < 0) return "";
  const PAPI_component_info_t* info = PAPI_get_component_info(cid);
  if (info == nullptr || !info->disabled) return "";
  return std::string("PAPI perf_event component disabled: ") + info->disabled_reason;
}

class PapiSource final : public CounterSource {
 public:
  PapiSource(const std::vector<std::string>& events, const std::vector<std::string>& fallback) {
    if (PAPI_is_initialized() == PAPI_NOT_INITED) {
      const int rc = PAPI_library_init(PAPI_VER_CURRENT);
      if (rc != PAPI_VER_CURRENT) {
        library_error_ = rc < 0 ? "PAPI_library_init: " + papi_error(rc)
                                : "PAPI_library_init: header/library version mismatch";
      }
    }
    if (library_error_.empty()) component_note_ = perf_event_component_note();
    if (!attempt(events)) attempt(fallback);
  }

  const std::vector<std::string>& counted_events() const override { return counted_; }
  const std::vector<std::string>& counted_via() const override { return via_; }
  const std::vector<UnavailableEvent>& unavailable_events() const override { return unavailable_; }

  std::string status() const override {
    std::string s = format_counter_status(counted_, via_, unavailable_);
    if (!kernel_.empty()) {
      s += "; [perf_event_open]: read with the kernel's perf_event_open because PAPI could not add the event";
      if (!component_note_.empty() && s.find(component_note_) == std::string::npos) s += " (" + component_note_ + ")";
    }
    return s;
  }

  void read(int64_t* out) override {
    if (!papi_values_.empty()) LB_PAPI_CHECK(PAPI_read(set_.id(), papi_values_.data()));
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      out[i] = s.papi >= 0 ? static_cast<int64_t>(papi_values_[static_cast<size_t>(s.papi)])
                           : kernel_[static_cast<size_t>(s.kernel)].read();
    }
  }

 private:
  struct Slot {
    int papi = -1;    // index into the PAPI read array
    int kernel = -1;  // index into kernel_
  };

  // Tries to count `names` as one running set; keeps it when at least one event counts.
  bool attempt(const std::vector<std::string>& names) {
    EventSet set;
    std::vector<std::string> counted, via;
    std::vector<Slot> slots;
    std::vector<detail::SoftwareCounter> kernel;
    std::vector<UnavailableEvent> unavailable;
    int papi_count = 0;

    std::string set_error = library_error_;
    if (set_error.empty()) {
      const int rc = set.create();
      if (rc != PAPI_OK) set_error = "PAPI_create_eventset: " + papi_error(rc);
    }

    for (const std::string& name : names) {
      if (!tried_.insert(name).second) continue;  // listed twice, or configured and fallback
      std::string reason = set_error;
      if (reason.empty()) {
        const int rc = PAPI_add_named_event(set.id(), name.c_str());
        if (rc == PAPI_OK) {
          counted.push_back(name);
          via.push_back("papi");
          slots.push_back(Slot{papi_count++, -1});
          continue;
        }
        reason = papi_error(rc);
        if ((rc == PAPI_ENOEVNT || rc == PAPI_ECMP_DISABLED) && !component_note_.empty()) {
          reason += " [" + component_note_ + "]";
        }
      }
      uint64_t config = 0;
      if (detail::software_event_config(name, &config)) {
        std::string kernel_reason;
        detail::SoftwareCounter c = detail::SoftwareCounter::open(name, &kernel_reason);
        if (c.is_open()) {
          counted.push_back(name);
          via.push_back("perf_event_open");
          slots.push_back(Slot{-1, static_cast<int>(kernel.size())});
          kernel.push_back(std::move(c));
          continue;
        }
        reason += "; " + kernel_reason;
      }
      unavailable.push_back(UnavailableEvent{name, reason});
    }

    if (papi_count > 0) {
      const int rc = set.start();
      if (rc != PAPI_OK) {
        // The whole PAPI part of this set is unusable: report each of its events.
        std::vector<std::string> kept_counted, kept_via;
        std::vector<Slot> kept_slots;
        for (size_t i = 0; i < counted.size(); ++i) {
          if (slots[i].papi >= 0) {
            unavailable.push_back(UnavailableEvent{counted[i], "PAPI_start: " + papi_error(rc)});
          } else {
            kept_counted.push_back(counted[i]);
            kept_via.push_back(via[i]);
            kept_slots.push_back(slots[i]);
          }
        }
        counted = std::move(kept_counted);
        via = std::move(kept_via);
        slots = std::move(kept_slots);
        papi_count = 0;
      }
    }
    for (auto& c : kernel) c.enable();

    unavailable_.insert(unavailable_.end(), unavailable.begin(), unavailable.end());
    if (counted.empty()) return false;
    set_ = std::move(set);
    counted_ = std::move(counted);
    via_ = std::move(via);
    slots_ = std::move(slots);
    kernel_ = std::move(kernel);
    papi_values_.assign(static_cast<size_t>(papi_count), 0);
    return true;
  }

  std::string library_error_;
  std::string component_note_;
  std::set<std::string> tried_;
  EventSet set_;
  std::vector<std::string> counted_;
  std::vector<std::string> via_;
  std::vector<Slot> slots_;
  std::vector<detail::SoftwareCounter> kernel_;
  std::vector<long long> papi_values_;
  std::vector<UnavailableEvent> unavailable_;
};

}  // namespace

bool built_with_papi() { return true; }

std::unique_ptr<CounterSource> open_counter_source(const std::vector<std::string>& events,
                                                   const std::vector<std::string>& fallback) {
  return std::make_unique<PapiSource>(events, fallback);
}

}  // namespace lorabench::metrics
