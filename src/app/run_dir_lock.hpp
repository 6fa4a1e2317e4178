// A run directory in use: rank 0 of a live run holds an exclusive flock(2) on <run dir>/.lorabench.lock,
// whose text says which process it is ("pid 1234 on host n01, started 2026-12-05T18:00:00Z"); the file is
// removed when the run ends. The kernel releases the lock when the process ends, however it ends (SIGKILL
// included), so a file left behind by a killed run never blocks.
// A second run that would delete the directory (run.overwrite = true) or continue it (checkpoint.resume)
// asks holder() first and is refused while the first run lives.
#pragma once

#include <string>

namespace lorabench::app {

class RunDirLock {
 public:
  // Takes the lock of `dir` (which exists) and writes this process into the file; throws IoError naming
  // the holder when another process has it.
  explicit RunDirLock(const std::string& dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // The live process that holds the lock of `dir` ("pid 1234 on host n01, started ..."), "" when none does
  // (no lock file, or nobody holds it).
  static std::string holder(const std::string& dir);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace lorabench::app
