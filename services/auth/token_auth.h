// Bearer-token authentication of the front door (services/README.md, "Authentication"): a file of
// `client-id:token` lines, re-read on SIGHUP or when it changes; tokens checked in constant time
// against their SHA-256; a limit on the requests each client has in flight. Tokens are never kept
// in memory as text, logged or put in an error message.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace hap::svc {

inline constexpr size_t kMinTokenLength = 16;
inline constexpr size_t kMaxTokenLength = 4096;
// The one answer to a missing, malformed, unknown or revoked token: it says nothing about which.
inline constexpr char kUnauthenticatedMessage[] =
    "missing or invalid bearer token: send the header 'authorization: Bearer <token>' with a "
    "token this server was given";

using TokenDigest = std::array<unsigned char, 32>;  // SHA-256
TokenDigest DigestToken(absl::string_view token);

// One line of the tokens file as kept in memory.
struct ClientToken {
  std::string client_id;
  TokenDigest digest;
};

// The tokens file: one `client-id:token` per line, blank lines and lines starting with '#'
// skipped, whitespace around each part trimmed. A client id is 1-128 of [A-Za-z0-9._@-]; a token
// is 16-4096 printable ASCII characters without spaces (what an HTTP header and gRPC metadata
// carry). A client may have several tokens (rotation); a token may not appear twice.
// InvalidArgument "PATH:LINE: ..." for the first bad line; the message never holds a token.
absl::StatusOr<std::vector<ClientToken>> ParseTokens(absl::string_view text,
                                                     const std::string& path);

class TokenAuth;

// One request of one client in flight (TokenAuth::Admit); released on destruction or Release().
class ClientSlot {
 public:
  ClientSlot() = default;
  ClientSlot(ClientSlot&& other) noexcept;
  ClientSlot& operator=(ClientSlot&& other) noexcept;
  ~ClientSlot() { Release(); }
  void Release();

 private:
  friend class TokenAuth;
  ClientSlot(TokenAuth* auth, std::string client) : auth_(auth), client_(std::move(client)) {}
  TokenAuth* auth_ = nullptr;
  std::string client_;
};

struct TokenAuthOptions {
  std::string tokens_file;
  int max_concurrent_per_client = 0;  // 0 = no per-client limit
  // How often the file's modification time, size and inode are compared with the last read.
  std::chrono::milliseconds check_interval{1000};
  std::string program = "hap-prefill";  // prefix of the log lines (stderr)
};

class TokenAuth {
 public:
  // Reads the tokens file (an error names it and the line; an empty file is refused), installs
  // the SIGHUP handler and starts the thread that re-reads the file on SIGHUP or when it changed.
  static absl::StatusOr<std::unique_ptr<TokenAuth>> Start(TokenAuthOptions options);
  ~TokenAuth();
  TokenAuth(const TokenAuth&) = delete;
  TokenAuth& operator=(const TokenAuth&) = delete;

  // The client whose token an `Authorization` value carries ("Bearer <token>", the scheme in any
  // case). Unauthenticated with kUnauthenticatedMessage otherwise; `peer` only goes to the log.
  absl::StatusOr<std::string> Authenticate(absl::string_view authorization,
                                           absl::string_view peer) const;
  // The same for a call: exactly one `authorization` metadata entry.
  absl::StatusOr<std::string> Authenticate(const grpc::ServerContextBase& ctx) const;

  // A slot for one request of `client_id`, counted against --auth-max-concurrent-per-client;
  // ResourceExhausted naming the client and its limit when it has that many in flight.
  absl::StatusOr<ClientSlot> Admit(const std::string& client_id);

  // Re-reads the file now. On an error the tokens read before stay in force (and the error is
  // logged); a file that is valid but empty is taken (every call is then refused).
  absl::Status Reload();

  size_t token_count() const;
  int max_concurrent_per_client() const { return options_.max_concurrent_per_client; }
  int in_flight(const std::string& client_id) const;

 private:
  struct FileStamp {
    uint64_t dev = 0, ino = 0;
    int64_t size = -1, mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
  };
  using Tokens = std::vector<ClientToken>;

  explicit TokenAuth(TokenAuthOptions options);
  absl::StatusOr<std::shared_ptr<const Tokens>> ReadFile(FileStamp* stamp) const;
  absl::Status ReloadLocked();  // holds reload_mu_
  void Watch();
  void Release(const std::string& client_id);
  std::shared_ptr<const Tokens> tokens() const;
  // Unauthenticated with kUnauthenticatedMessage; `why` and `peer` go to the log only.
  absl::Status Refuse(absl::string_view why, absl::string_view peer) const;
  void LogRefusal(const std::string& line) const;

  friend class ClientSlot;

  const TokenAuthOptions options_;
  mutable std::mutex tokens_mu_;
  std::shared_ptr<const Tokens> tokens_;  // swapped whole on reload
  std::mutex reload_mu_;                  // one reload at a time; guards stamp_
  FileStamp stamp_;
  bool stat_failed_ = false;  // logged once until the file is back
  uint64_t hup_seen_ = 0;

  mutable std::mutex clients_mu_;
  std::map<std::string, int> in_flight_;  // client id → requests admitted and not released

  // Refusals are logged at most once a second, with how many were left out.
  mutable std::mutex log_mu_;
  mutable std::chrono::steady_clock::time_point last_log_{};
  mutable int64_t unlogged_ = 0;

  int stop_pipe_[2] = {-1, -1};
  std::thread watcher_;
};

}  // namespace hap::svc
