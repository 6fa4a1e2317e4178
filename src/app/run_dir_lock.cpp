#include "run_dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::app {

namespace {

std::string lock_path(const std::string& dir) { return (std::filesystem::path(dir) / ".lorabench.lock").string(); }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string this_process() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  char when[32] = {0};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return strformat("pid %d on host %s, started %s", static_cast<int>(getpid()), host, when);
}

}  // namespace

RunDirLock::RunDirLock(const std::string& dir) : path_(lock_path(dir)) {
  const std::string& path = path_;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError(path + ": cannot open: " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw IoError(dir + " is in use by a live run (" + read_text(path) + ")");
    throw IoError(path + ": cannot lock: " + std::strerror(err));
  }
  const std::string me = this_process() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    throw IoError(path + ": cannot write: " + std::strerror(errno));
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // first: a process that opens the path afterwards finds no holder
  ::close(fd_);             // releases the lock
}

std::string RunDirLock::holder(const std::string& dir) {
  const std::string path = lock_path(dir);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held ? read_text(path) : "";
}

}  // namespace lorabench::app
