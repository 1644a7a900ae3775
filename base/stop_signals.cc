#include "base/stop_signals.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>

namespace hap {
namespace {

int g_pipe[2] = {-1, -1};
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  g_signal.store(sig);
  const char byte = 1;
  const int saved = errno;
  [[maybe_unused]] ssize_t n = write(g_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

void StopSignals::Install() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    struct sigaction sa = {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
  });
}

bool StopSignals::Wait(std::chrono::milliseconds timeout) {
  if (g_signal.load() != 0) return true;
  if (g_pipe[0] < 0) return false;
  pollfd p = {g_pipe[0], POLLIN, 0};
  const int r = poll(&p, 1, static_cast<int>(timeout.count()));
  return r > 0 || g_signal.load() != 0;
}

int StopSignals::received() { return g_signal.load(); }

}  // namespace hap
