#include "perf_software.hpp"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "lorabench/core/error.hpp"

namespace lorabench::metrics::detail {

namespace {

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool software_event_config(const std::string& name, uint64_t* config) {
  struct Entry {
    const char* name;
    uint64_t config;
  };
  static const Entry kEvents[] = {
      {"PERF::TASK-CLOCK", PERF_COUNT_SW_TASK_CLOCK},
      {"PERF::CPU-CLOCK", PERF_COUNT_SW_CPU_CLOCK},
      {"PERF::PAGE-FAULTS", PERF_COUNT_SW_PAGE_FAULTS},
      {"PERF::FAULTS", PERF_COUNT_SW_PAGE_FAULTS},
      {"PERF::MINOR-FAULTS", PERF_COUNT_SW_PAGE_FAULTS_MIN},
      {"PERF::MAJOR-FAULTS", PERF_COUNT_SW_PAGE_FAULTS_MAJ},
      {"PERF::CONTEXT-SWITCHES", PERF_COUNT_SW_CONTEXT_SWITCHES},
      {"PERF::CS", PERF_COUNT_SW_CONTEXT_SWITCHES},
      {"PERF::CPU-MIGRATIONS", PERF_COUNT_SW_CPU_MIGRATIONS},
      {"PERF::MIGRATIONS", PERF_COUNT_SW_CPU_MIGRATIONS},
  };
  const std::string u = upper(name);
  for (const Entry& e : kEvents) {
    if (u == e.name) {
      *config = e.config;
      return true;
    }
  }
  return false;
}

SoftwareCounter::~SoftwareCounter() {
  if (fd_ >= 0) ::close(fd_);
}

SoftwareCounter& SoftwareCounter::operator=(SoftwareCounter&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

SoftwareCounter SoftwareCounter::open(const std::string& name, std::string* reason) {
  uint64_t config = 0;
  if (!software_event_config(name, &config)) {
    *reason = "not a perf:: software event";
    return SoftwareCounter();
  }
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = config;
  attr.disabled = 1;
  attr.exclude_kernel = 1;  // PAPI_DOM_USER, PAPI's default domain
  attr.exclude_hv = 1;
  const long fd = ::syscall(SYS_perf_event_open, &attr, 0 /* this thread */, -1 /* any CPU */, -1 /* no group */,
                            PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) {
    *reason = std::string("perf_event_open: ") + std::strerror(errno);
    return SoftwareCounter();
  }
  return SoftwareCounter(static_cast<int>(fd));
}

void SoftwareCounter::enable() {
  LB_CHECK(fd_ >= 0, "enable() on a closed counter");
  if (::ioctl(fd_, PERF_EVENT_IOC_RESET, 0) != 0 || ::ioctl(fd_, PERF_EVENT_IOC_ENABLE, 0) != 0) {
    LB_THROW(Error, std::string("perf_event ioctl(ENABLE): ") + std::strerror(errno));
  }
}

int64_t SoftwareCounter::read() const {
  LB_CHECK(fd_ >= 0, "read() on a closed counter");
  uint64_t value = 0;
  const ssize_t n = ::read(fd_, &value, sizeof(value));
  if (n != static_cast<ssize_t>(sizeof(value))) {
    LB_THROW(Error, std::string("perf_event read: ") + (n < 0 ? std::strerror(errno) : "short read"));
  }
  return static_cast<int64_t>(value);
}

}  // namespace lorabench::metrics::detail
