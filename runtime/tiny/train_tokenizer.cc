// TrainTokenizer: runs spm_train as a child process (argv, no shell) in a temporary directory.
#include "runtime/tiny/train_tokenizer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

extern char** environ;

namespace hap {

namespace {

namespace fs = std::filesystem;

// spm_train logs a few hundred lines; errors show only the tail, where its reason is.
constexpr size_t kOutputTail = 4000;

std::string Tail(const std::string& s) {
  return s.size() <= kOutputTail ? s : "..." + s.substr(s.size() - kOutputTail);
}

// Removes the temporary training directory on every return path.
class TempDir {
 public:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

absl::Status CopyFile(const std::string& from, const std::string& to) {
  std::error_code ec;
  if (!fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec)) {
    return absl::InternalError(absl::StrCat("cannot copy ", from, " to ", to, ": ", ec.message()));
  }
  return absl::OkStatus();
}

struct ChildResult {
  int exit_status = 0;  // as from waitpid
  std::string output;   // stdout and stderr interleaved
};

// Spawns argv[0] (looked up on PATH) in `cwd` with stdin from /dev/null and stdout+stderr
// captured. posix_spawnp, unlike fork in a threaded server, runs no code in the child before
// exec, and it reports a missing executable as ENOENT directly.
absl::StatusOr<ChildResult> RunCaptured(const std::vector<std::string>& args,
                                        const std::string& cwd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);

  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    if (rc == ENOENT) {
      return absl::FailedPreconditionError(
          absl::StrCat(args[0],
                       " not found on PATH; install Debian's sentencepiece package "
                       "(tools/install-deps.sh)"));
    }
    return absl::InternalError(absl::StrCat("cannot run ", args[0], ": ", std::strerror(rc)));
  }

  ChildResult result;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      result.output.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  while (waitpid(pid, &result.exit_status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
    }
  }
  return result;
}

}  // namespace

absl::Status TrainTokenizer(const std::string& corpus_path, const std::string& out_model_path,
                            int vocab_size) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size must be > 0, got ", vocab_size));
  }
  std::error_code ec;
  if (!fs::is_regular_file(corpus_path, ec)) {
    return absl::NotFoundError(absl::StrCat("tokenizer corpus not found: ", corpus_path));
  }
  fs::path out_dir = fs::path(out_model_path).parent_path();
  if (out_dir.empty()) out_dir = ".";
  if (!fs::is_directory(out_dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat("output directory for ", out_model_path, " does not exist"));
  }

  // The temporary directory sits beside the output so the final rename stays on one filesystem.
  std::string tmpl = (out_dir / ".hap-spm-train-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a temporary directory in ",
                                            out_dir.string(), ": ", std::strerror(errno)));
  }
  const TempDir tmp(tmpl);
  HAP_RETURN_IF_ERROR(CopyFile(corpus_path, tmp.path() + "/corpus.txt"));

  std::vector<std::string> args = {"spm_train", "--input=corpus.txt", "--model_prefix=tokenizer",
                                   absl::StrCat("--vocab_size=", vocab_size)};
  for (const char* opt : kSpmTrainOptions) args.emplace_back(opt);
  HAP_ASSIGN_OR_RETURN(const ChildResult run, RunCaptured(args, tmp.path()));
  if (!WIFEXITED(run.exit_status) || WEXITSTATUS(run.exit_status) != 0) {
    const std::string how = WIFEXITED(run.exit_status)
                                ? absl::StrCat("exited with status ", WEXITSTATUS(run.exit_status))
                                : absl::StrCat("was killed by signal ", WTERMSIG(run.exit_status));
    return absl::InternalError(absl::StrCat("spm_train on ", corpus_path, " (vocab_size ",
                                            vocab_size, ") ", how, ":\n", Tail(run.output)));
  }

  const std::string model = tmp.path() + "/tokenizer.model";
  if (!fs::is_regular_file(model, ec)) {
    return absl::InternalError(
        absl::StrCat("spm_train succeeded but wrote no model:\n", Tail(run.output)));
  }
  fs::rename(model, out_model_path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot move the trained model to ", out_model_path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace hap
