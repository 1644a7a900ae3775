#include "sdk/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace hap::sdk {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::vector<std::string>& argv, const std::string& echo_prefix) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to run");
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot execute '", argv[0], "'"));
  }
  // Everything the child needs is prepared before fork: only async-signal-safe calls after.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe() failed");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError("fork() failed");
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);
    // Signals blocked in the parent (services block SIGTERM for their signal thread) would
    // stay blocked across exec.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  auto child = std::unique_ptr<ChildProcess>(new ChildProcess());
  child->pid_ = pid;
  child->echo_prefix_ = echo_prefix;
  const int read_fd = fds[0];
  child->reader_ = std::thread([c = child.get(), read_fd] { c->ReadLoop(read_fd); });
  return child;
}

ChildProcess::~ChildProcess() {
  if (running()) Terminate(std::chrono::seconds(5));
  if (reader_.joinable()) reader_.join();
}

void ChildProcess::ReadLoop(int fd) {
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, n);
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!echo_prefix_.empty())
        std::fprintf(stderr, "%s %s\n", echo_prefix_.c_str(), line.c_str());
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(std::move(line));
      cv_.notify_all();
    }
  }
  close(fd);
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending.empty()) lines_.push_back(pending);
  eof_ = true;
  cv_.notify_all();
}

absl::StatusOr<std::string> ChildProcess::WaitForLine(
    const std::function<bool(const std::string&)>& match, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  size_t seen = 0;
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    for (; seen < lines_.size(); ++seen) {
      if (match(lines_[seen])) return lines_[seen];
    }
    if (eof_) {
      return absl::UnavailableError(absl::StrCat("process ", pid_, " closed its output (exited?)"));
    }
    if (cv_.wait_until(lock, end) == std::cv_status::timeout && seen == lines_.size()) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid_, " printed no such line within ", timeout.count(), " ms"));
    }
  }
}

absl::StatusOr<std::vector<std::string>> ChildProcess::ReadAll(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return eof_; })) {
    return absl::DeadlineExceededError(
        absl::StrCat("process ", pid_, " kept its output open for ", timeout.count(), " ms"));
  }
  return lines_;
}

void ChildProcess::Signal(int sig) {
  if (!exit_code_) kill(pid_, sig);
}

std::optional<int> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (r < 0) {
      exit_code_ = -1;
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int ChildProcess::Terminate(std::chrono::milliseconds grace) {
  Signal(SIGTERM);
  if (auto code = Wait(grace)) return *code;
  Signal(SIGKILL);
  return Wait(std::chrono::seconds(10)).value_or(-1);
}

bool ChildProcess::running() { return !Wait(std::chrono::milliseconds(0)).has_value(); }

int ParseListeningPort(const std::string& line) {
  const size_t at = line.find(" listening on ");
  if (at == std::string::npos) return 0;
  const size_t colon = line.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon < at ||
      !absl::SimpleAtoi(line.substr(colon + 1), &port)) {
    return 0;
  }
  return port;
}

}  // namespace hap::sdk
