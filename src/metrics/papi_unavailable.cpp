// Counter source for builds without PAPI (LORABENCH_HAVE_PAPI OFF): counts nothing and says why.
#include <set>

#include "lorabench/metrics/papi.hpp"

namespace lorabench::metrics {

namespace {

class UnavailableSource final : public CounterSource {
 public:
  UnavailableSource(const std::vector<std::string>& events, const std::vector<std::string>& fallback) {
    std::set<std::string> seen;
    for (const auto* list : {&events, &fallback}) {
      for (const std::string& name : *list) {
        if (seen.insert(name).second) unavailable_.push_back(UnavailableEvent{name, "built without PAPI"});
      }
    }
  }
  const std::vector<std::string>& counted_events() const override { return none_; }
  const std::vector<std::string>& counted_via() const override { return none_; }
  const std::vector<UnavailableEvent>& unavailable_events() const override { return unavailable_; }
  std::string status() const override { return "built without PAPI"; }
  void read(int64_t*) override {}

 private:
  std::vector<std::string> none_;
  std::vector<UnavailableEvent> unavailable_;
};

}  // namespace

bool built_with_papi() { return false; }

std::unique_ptr<CounterSource> open_counter_source(const std::vector<std::string>& events,
                                                   const std::vector<std::string>& fallback) {
  return std::make_unique<UnavailableSource>(events, fallback);
}

}  // namespace lorabench::metrics
