#include "lorabench/core/sysinfo.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

extern char** environ;

namespace lorabench::sys {

namespace {
std::string cpuinfo_field(const std::string& field) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, field.size(), field) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto v = line.substr(colon + 1);
        auto b = v.find_first_not_of(" \t");
        return b == std::string::npos ? "" : v.substr(b);
      }
    }
  }
  return "";
}

int64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  size_t n = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, n, key) == 0) return std::atoll(line.c_str() + n) * 1024;
  }
  return -1;
}
}  // namespace

std::string cpu_model() {
  auto m = cpuinfo_field("model name");
  return m.empty() ? "unknown" : m;
}

std::vector<std::string> cpu_flags() {
  std::istringstream ss(cpuinfo_field("flags"));
  std::vector<std::string> out;
  std::string f;
  while (ss >> f) out.push_back(f);
  return out;
}

int online_cpus() { return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)); }

std::string kernel_release() {
  struct utsname u;
  if (uname(&u) != 0) return "unknown";
  return std::string(u.sysname) + " " + u.release + " " + u.machine;
}

std::string utc_now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t current_rss() { return status_kib("VmRSS:"); }
int64_t peak_rss() { return status_kib("VmHWM:"); }

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

std::vector<std::pair<std::string, std::string>> relevant_environment() {
  static const char* kPrefixes[] = {"OMP_", "OPENBLAS_", "MKL_", "ATEN_", "DNNL_", "ONEDNN_", "SLURM_",
                                    "OMPI_COMM_WORLD", "PMIX_RANK", "NCCL_", "CUDA_VISIBLE", "LORABENCH_"};
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string k = kv.substr(0, eq);
    for (const char* p : kPrefixes) {
      if (k.compare(0, std::strlen(p), p) == 0) {
        out.emplace_back(k, kv.substr(eq + 1));
        break;
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string getenv_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

}  // namespace lorabench::sys
