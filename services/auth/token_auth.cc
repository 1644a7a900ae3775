#include "services/auth/token_auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <unordered_map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "telemetry/metrics.h"

namespace hap::svc {
namespace {

// SIGHUP → one byte on this pipe and a new generation; every watcher compares the generation
// on each wake (the first to wake drains the pipe).
int g_hup_pipe[2] = {-1, -1};
std::atomic<uint64_t> g_hup_generation{0};

void OnSighup(int) {
  g_hup_generation.fetch_add(1);
  const char byte = 1;
  const int saved = errno;
  [[maybe_unused]] ssize_t n = write(g_hup_pipe[1], &byte, 1);
  errno = saved;
}

void InstallSighupHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (pipe2(g_hup_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    struct sigaction sa = {};
    sa.sa_handler = OnSighup;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGHUP, &sa, nullptr);
  });
}

void Drain(int fd) {
  char buf[64];
  while (fd >= 0 && read(fd, buf, sizeof buf) > 0) {
  }
}

bool ValidClientId(absl::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '@' && c != '-') return false;
  }
  return true;
}

// What an HTTP header value and a gRPC ASCII metadata value can carry, without spaces.
bool ValidTokenChars(absl::string_view token) {
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

struct AuthMetrics {
  telemetry::CounterFamily* requests;  // {client}
  telemetry::GaugeFamily* in_flight;   // {client}
  telemetry::CounterFamily* limited;   // {client}
  telemetry::Counter* failures;
  telemetry::CounterFamily* reloads;  // {result}
  telemetry::Gauge* tokens;

  static AuthMetrics& Get() {
    static AuthMetrics* m = [] {
      telemetry::Registry& r = telemetry::Registry::Default();
      auto* out = new AuthMetrics;
      out->requests =
          &r.AddCounter("hap_client_requests_total",
                        "Generate calls admitted per authenticated client.", {"client"});
      out->in_flight =
          &r.AddGauge("hap_client_requests_in_flight",
                      "Generate calls in flight per authenticated client.", {"client"});
      out->limited = &r.AddCounter(
          "hap_client_requests_limited_total",
          "Generate calls refused: the client had --auth-max-concurrent-per-client in flight.",
          {"client"});
      out->failures = &r.AddCounter("hap_auth_failures_total",
                                    "Calls refused for a missing or invalid bearer token.")
                           .Get();
      out->reloads =
          &r.AddCounter("hap_auth_reloads_total",
                        "Reads of the tokens file after startup, by result.", {"result"});
      out->tokens = &r.AddGauge("hap_auth_tokens", "Bearer tokens in force.").Get();
      return out;
    }();
    return *m;
  }
};

}  // namespace

TokenDigest DigestToken(absl::string_view token) {
  TokenDigest d{};
  unsigned int len = 0;
  EVP_Digest(token.data(), token.size(), d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

absl::StatusOr<std::vector<ClientToken>> ParseTokens(absl::string_view text,
                                                     const std::string& path) {
  std::vector<ClientToken> out;
  std::unordered_map<std::string, int> line_of;  // digest bytes → line, for duplicates
  int line_no = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view line = absl::StripAsciiWhitespace(text.substr(at, end - at));
    at = end + 1;
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": ", what));
    };
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) {
      return error("expected 'client-id:token'");
    }
    const absl::string_view id = absl::StripAsciiWhitespace(line.substr(0, colon));
    const absl::string_view token = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (!ValidClientId(id)) {
      return error("the client id must be 1-128 characters of A-Z a-z 0-9 . _ @ -");
    }
    if (token.size() < kMinTokenLength) {
      return error(absl::StrCat("the token of client '", id, "' is shorter than ", kMinTokenLength,
                                " characters"));
    }
    if (token.size() > kMaxTokenLength) {
      return error(absl::StrCat("the token of client '", id, "' is longer than ", kMaxTokenLength,
                                " characters"));
    }
    if (!ValidTokenChars(token)) {
      return error(absl::StrCat("the token of client '", id,
                                "' has a character other than printable ASCII without spaces "
                                "(what an HTTP header carries)"));
    }
    ClientToken t{std::string(id), DigestToken(token)};
    const std::string key(reinterpret_cast<const char*>(t.digest.data()), t.digest.size());
    if (auto [it, fresh] = line_of.emplace(key, line_no); !fresh) {
      return error(absl::StrCat("the token of client '", id, "' is the one on line ", it->second,
                                ": give every token to one client only"));
    }
    out.push_back(std::move(t));
  }
  return out;
}

ClientSlot::ClientSlot(ClientSlot&& other) noexcept
    : auth_(other.auth_), client_(std::move(other.client_)) {
  other.auth_ = nullptr;
}

ClientSlot& ClientSlot::operator=(ClientSlot&& other) noexcept {
  if (this != &other) {
    Release();
    auth_ = other.auth_;
    client_ = std::move(other.client_);
    other.auth_ = nullptr;
  }
  return *this;
}

void ClientSlot::Release() {
  if (auth_ == nullptr) return;
  auth_->Release(client_);
  auth_ = nullptr;
}

TokenAuth::TokenAuth(TokenAuthOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<TokenAuth>> TokenAuth::Start(TokenAuthOptions options) {
  if (options.max_concurrent_per_client < 0) {
    return absl::InvalidArgumentError("--auth-max-concurrent-per-client must be >= 0");
  }
  std::unique_ptr<TokenAuth> auth(new TokenAuth(std::move(options)));
  AuthMetrics& metrics = AuthMetrics::Get();
  FileStamp stamp;
  absl::StatusOr<std::shared_ptr<const Tokens>> tokens = auth->ReadFile(&stamp);
  if (!tokens.ok()) return tokens.status();
  if ((*tokens)->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(auth->options_.tokens_file, " holds no tokens (lines of 'client-id:token')"));
  }
  auth->tokens_ = *tokens;
  auth->stamp_ = stamp;
  metrics.tokens->Set(static_cast<double>((*tokens)->size()));
  InstallSighupHandler();
  auth->hup_seen_ = g_hup_generation.load();
  if (pipe2(auth->stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  auth->watcher_ = std::thread([a = auth.get()] { a->Watch(); });
  return auth;
}

TokenAuth::~TokenAuth() {
  if (watcher_.joinable()) {
    const char byte = 1;
    [[maybe_unused]] ssize_t n = write(stop_pipe_[1], &byte, 1);
    watcher_.join();
  }
  for (int fd : stop_pipe_) {
    if (fd >= 0) close(fd);
  }
}

absl::StatusOr<std::shared_ptr<const TokenAuth::Tokens>> TokenAuth::ReadFile(
    FileStamp* stamp) const {
  const std::string& path = options_.tokens_file;
  // The stamp first: a write after it changes the stamp again, so it is read once more.
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the tokens file ", path, ": ", std::strerror(errno)));
  }
  stamp->dev = st.st_dev;
  stamp->ino = st.st_ino;
  stamp->size = st.st_size;
  stamp->mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("cannot read the tokens file ", text.status().message()));
  }
  absl::StatusOr<std::vector<ClientToken>> parsed = ParseTokens(*text, path);
  if (!parsed.ok()) return parsed.status();
  return std::make_shared<const Tokens>(std::move(*parsed));
}

absl::Status TokenAuth::Reload() {
  std::lock_guard<std::mutex> lock(reload_mu_);
  return ReloadLocked();
}

absl::Status TokenAuth::ReloadLocked() {
  AuthMetrics& metrics = AuthMetrics::Get();
  FileStamp stamp;
  absl::StatusOr<std::shared_ptr<const Tokens>> read = ReadFile(&stamp);
  if (!read.ok()) {
    // Remember the stamp of what failed, so the same bad file is not reported every second.
    if (stamp.size >= 0) stamp_ = stamp;
    metrics.reloads->Labels({"error"}).Inc();
    std::fprintf(stderr, "%s: auth: %s; the %zu tokens read before stay in force\n",
                 options_.program.c_str(), std::string(read.status().message()).c_str(),
                 token_count());
    return read.status();
  }
  stamp_ = stamp;
  std::set<std::string> clients;
  for (const ClientToken& t : **read) clients.insert(t.client_id);
  {
    std::lock_guard<std::mutex> lock(tokens_mu_);
    tokens_ = *read;
  }
  metrics.reloads->Labels({"ok"}).Inc();
  metrics.tokens->Set(static_cast<double>((*read)->size()));
  std::fprintf(stderr, "%s: auth: read %zu tokens of %zu clients from %s%s\n",
               options_.program.c_str(), (*read)->size(), clients.size(),
               options_.tokens_file.c_str(),
               (*read)->empty() ? " (none: every call is refused)" : "");
  return absl::OkStatus();
}

void TokenAuth::Watch() {
  const int timeout_ms = static_cast<int>(options_.check_interval.count());
  for (;;) {
    pollfd fds[2] = {{stop_pipe_[0], POLLIN, 0}, {g_hup_pipe[0], POLLIN, 0}};
    const int r = poll(fds, g_hup_pipe[0] >= 0 ? 2 : 1, timeout_ms);
    if (r > 0 && (fds[0].revents & POLLIN)) return;
    if (r > 0 && (fds[1].revents & POLLIN)) Drain(g_hup_pipe[0]);
    std::lock_guard<std::mutex> lock(reload_mu_);
    const uint64_t hup = g_hup_generation.load();
    if (hup != hup_seen_) {
      hup_seen_ = hup;
      std::fprintf(stderr, "%s: auth: SIGHUP: reading %s again\n", options_.program.c_str(),
                   options_.tokens_file.c_str());
      ReloadLocked().IgnoreError();  // logged
      continue;
    }
    struct stat st;
    if (stat(options_.tokens_file.c_str(), &st) != 0) {
      if (!stat_failed_) {
        stat_failed_ = true;
        std::fprintf(stderr,
                     "%s: auth: cannot stat %s (%s); the %zu tokens read before stay in "
                     "force\n",
                     options_.program.c_str(), options_.tokens_file.c_str(), std::strerror(errno),
                     token_count());
      }
      continue;
    }
    stat_failed_ = false;
    FileStamp now;
    now.dev = st.st_dev;
    now.ino = st.st_ino;
    now.size = st.st_size;
    now.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    if (!(now == stamp_)) ReloadLocked().IgnoreError();  // logged
  }
}

std::shared_ptr<const TokenAuth::Tokens> TokenAuth::tokens() const {
  std::lock_guard<std::mutex> lock(tokens_mu_);
  return tokens_;
}

size_t TokenAuth::token_count() const {
  std::shared_ptr<const Tokens> t = tokens();
  return t == nullptr ? 0 : t->size();
}

void TokenAuth::LogRefusal(const std::string& line) const {
  const auto now = std::chrono::steady_clock::now();
  int64_t left_out = 0;
  {
    std::lock_guard<std::mutex> lock(log_mu_);
    if (now - last_log_ < std::chrono::seconds(1)) {
      ++unlogged_;
      return;
    }
    last_log_ = now;
    left_out = unlogged_;
    unlogged_ = 0;
  }
  std::fprintf(
      stderr, "%s: auth: %s%s\n", options_.program.c_str(), line.c_str(),
      left_out > 0 ? absl::StrCat(" (", left_out, " refusals before it not logged)").c_str() : "");
}

absl::Status TokenAuth::Refuse(absl::string_view why, absl::string_view peer) const {
  AuthMetrics::Get().failures->Inc();
  LogRefusal(absl::StrCat("refused a call from ", peer.empty() ? "?" : peer, ": ", why));
  return absl::UnauthenticatedError(kUnauthenticatedMessage);
}

absl::StatusOr<std::string> TokenAuth::Authenticate(absl::string_view authorization,
                                                    absl::string_view peer) const {
  auto refuse = [&](absl::string_view why) { return Refuse(why, peer); };
  if (authorization.empty()) return refuse("no authorization");
  // RFC 6750: "Bearer" (any case), one or more spaces, the token.
  constexpr absl::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme) ||
      authorization[kScheme.size()] != ' ') {
    return refuse("not a Bearer authorization");
  }
  const absl::string_view token =
      absl::StripAsciiWhitespace(authorization.substr(kScheme.size() + 1));
  if (token.empty() || token.size() > kMaxTokenLength || !ValidTokenChars(token)) {
    return refuse("a malformed bearer token");
  }
  const TokenDigest digest = DigestToken(token);
  const std::shared_ptr<const Tokens> tokens = this->tokens();
  // Every token is compared, each in constant time, with no early exit; the match is selected
  // without a branch on it.
  size_t match = SIZE_MAX;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const size_t equal = static_cast<size_t>(
        CRYPTO_memcmp(digest.data(), (*tokens)[i].digest.data(), digest.size()) == 0);
    match = (match & (equal - 1)) | (i & (0 - equal));
  }
  if (match == SIZE_MAX) return refuse("an unknown token");
  return (*tokens)[match].client_id;
}

absl::StatusOr<std::string> TokenAuth::Authenticate(const grpc::ServerContextBase& ctx) const {
  const auto& md = ctx.client_metadata();
  const auto [begin, end] = md.equal_range("authorization");
  absl::string_view value;
  int count = 0;
  for (auto it = begin; it != end; ++it, ++count) {
    value = absl::string_view(it->second.data(), it->second.size());
  }
  if (count > 1) return Refuse("several authorization entries", ctx.peer());
  return Authenticate(value, ctx.peer());
}

absl::StatusOr<ClientSlot> TokenAuth::Admit(const std::string& client_id) {
  AuthMetrics& metrics = AuthMetrics::Get();
  const int limit = options_.max_concurrent_per_client;
  int n = 0;
  {
    std::lock_guard<std::mutex> lock(clients_mu_);
    int& held = in_flight_[client_id];
    if (limit > 0 && held >= limit) {
      n = held;
    } else {
      n = ++held;
      metrics.in_flight->Labels({client_id}).Set(n);
      metrics.requests->Labels({client_id}).Inc();
      return ClientSlot(this, client_id);
    }
  }
  metrics.limited->Labels({client_id}).Inc();
  LogRefusal(
      absl::StrCat("refused a call of client '", client_id, "': ", n, " in flight, its limit"));
  return absl::ResourceExhaustedError(
      absl::StrCat("client '", client_id, "' is at its limit of ", limit,
                   " requests in flight (--auth-max-concurrent-per-client)"));
}

void TokenAuth::Release(const std::string& client_id) {
  std::lock_guard<std::mutex> lock(clients_mu_);
  auto it = in_flight_.find(client_id);
  if (it == in_flight_.end()) return;
  AuthMetrics::Get().in_flight->Labels({client_id}).Set(--it->second);
  if (it->second <= 0) in_flight_.erase(it);
}

int TokenAuth::in_flight(const std::string& client_id) const {
  std::lock_guard<std::mutex> lock(clients_mu_);
  auto it = in_flight_.find(client_id);
  return it == in_flight_.end() ? 0 : it->second;
}

}  // namespace hap::svc
