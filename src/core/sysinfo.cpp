#include "lorabench/core/sysinfo.hpp"

#include <dlfcn.h>
#include <link.h>
#include <malloc.h>
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
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

namespace {

int64_t read_int_file(const char* path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s == "max") return -1;
  try {
    return std::stoll(s);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

int64_t memory_available_bytes() {
  int64_t avail = -1;
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      avail = kib * 1024;
      break;
    }
  }
  int64_t limit = read_int_file("/sys/fs/cgroup/memory.max"), used = read_int_file("/sys/fs/cgroup/memory.current");
  if (limit < 0) {
    limit = read_int_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = read_int_file("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (limit > 0 && limit < (int64_t(1) << 60) && used >= 0) {
    const int64_t left = std::max<int64_t>(0, limit - used);
    avail = avail < 0 ? left : std::min(avail, left);
  }
  return avail;
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, online_cpus());
}

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
                                    "OMPI_COMM_WORLD", "OMPI_MCA_", "UCX_", "PMIX_RANK", "NCCL_", "CUDA_VISIBLE",
                                    "LORABENCH_"};
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

namespace {
int collect_objects(struct dl_phdr_info* info, size_t, void* out) {
  if (info->dlpi_name != nullptr && *info->dlpi_name != '\0')
    static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name);
  return 0;
}

std::string real_path(const std::string& p) {
  std::error_code ec;
  std::filesystem::path r = std::filesystem::canonical(p, ec);
  return ec ? p : r.string();
}

std::string classify_blas(const std::string& real) {
  const std::string base = std::filesystem::path(real).filename().string();
  if (real.find("openblas") != std::string::npos) return "OpenBLAS";
  if (real.find("mkl") != std::string::npos) return "Intel MKL";
  if (real.find("blis") != std::string::npos) return "BLIS";
  if (real.find("atlas") != std::string::npos) return "ATLAS";
  if (real.find("flexiblas") != std::string::npos) return "FlexiBLAS";
  if (base.rfind("libblas.so", 0) == 0 || real.find("/blas/") != std::string::npos) return "reference BLAS";
  return "unknown";
}
}  // namespace

BlasInfo blas_info() {
  BlasInfo b;
  std::vector<std::string> objects;
  dl_iterate_phdr(&collect_objects, &objects);
  for (const auto& o : objects) {
    const std::string base = std::filesystem::path(o).filename().string();
    if (base.find("blas") != std::string::npos || base.find("mkl") != std::string::npos ||
        base.find("blis") != std::string::npos || base.find("lapack") != std::string::npos)
      b.loaded.emplace_back(o, real_path(o));
  }
  if (void* sym = dlsym(RTLD_DEFAULT, "sgemm_")) {
    Dl_info info{};
    if (dladdr(sym, &info) != 0 && info.dli_fname != nullptr) {
      b.provider = info.dli_fname;
      b.resolved = real_path(b.provider);
    }
  }
  b.kind = b.provider.empty() ? "none" : classify_blas(b.resolved);
  // The official libtorch links MKL statically into libtorch_cpu.so and exports its sgemm_: recognise MKL
  // by one of its own entry points living in the same object.
  if (b.kind == "unknown") {
    if (void* mkl = dlsym(RTLD_DEFAULT, "mkl_blas__sgemm")) {
      Dl_info info{};
      if (dladdr(mkl, &info) != 0 && info.dli_fname != nullptr && real_path(info.dli_fname) == b.resolved)
        b.kind = "Intel MKL";
    }
  }
  return b;
}

std::vector<std::string> loaded_objects(const std::string& prefix) {
  std::vector<std::string> objects, out;
  dl_iterate_phdr(&collect_objects, &objects);
  for (const auto& o : objects)
    if (std::filesystem::path(o).filename().string().rfind(prefix, 0) == 0) out.push_back(real_path(o));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

void keep_freed_memory_in_heap() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

}  // namespace lorabench::sys
