#include "lorabench/core/stop_request.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace lorabench::stop {

namespace {

// Ctrl-C (SIGINT) is a stop request like the batch system's: a run started by hand keeps its work too.
constexpr int kStopSignals[] = {SIGTERM, SIGUSR1, SIGINT};

volatile std::sig_atomic_t g_first = 0;
std::atomic<int> g_count{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs a lock-free counter");

void write_err(const char* s) {
  // write(2) is async-signal-safe; what it returns does not matter here.
  ssize_t n = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)n;
}

extern "C" void on_stop_signal(int sig) {
  const int n = g_count.fetch_add(1) + 1;
  if (g_first == 0) {
    g_first = sig;
    write_err(sig == SIGTERM   ? "lorabench: SIGTERM: stopping after this step with a checkpoint\n"
              : sig == SIGINT ? "lorabench: SIGINT: stopping after this step with a checkpoint\n"
                              : "lorabench: SIGUSR1: stopping after this step with a checkpoint\n");
  } else if (n == 2) {
    write_err("lorabench: another stop signal: already stopping; the checkpoint is finished first\n");
  }
}

}  // namespace

void install_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kStopSignals) sigaddset(&sa.sa_mask, sig);  // one handler at a time
  sa.sa_flags = SA_RESTART;
  for (int sig : kStopSignals) {
    // A SIGINT the parent ignores (a job started with & from a script, nohup) stays ignored, as shells expect.
    struct sigaction old;
    if (sig == SIGINT && sigaction(SIGINT, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
  }
}

int requested() { return static_cast<int>(g_first); }

int count() { return g_count.load(); }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

void reset() {
  g_first = 0;
  g_count.store(0);
}

}  // namespace lorabench::stop
