#include "services/routing/replica_set.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace hap::svc {

absl::StatusOr<std::vector<std::string>> SplitAddresses(const std::string& list,
                                                        const std::string& flag) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " '", list, "' has an empty address (want host:port[,host:port...])"));
    }
    out.emplace_back(part);
  }
  return out;
}

namespace {

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool IsIpLiteral(const std::string& host) {
  in6_addr v6;
  in_addr v4;
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolvePeerAddress(const std::string& address) {
  // Only "name:port": a bracketed IPv6 literal, a scheme ("dns:", "unix:", "ipv4:" ...) or a
  // path goes to gRPC as it is.
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::vector<std::string>{address};
  const std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (!AllDigits(port) || host.find_first_of(":/[]") != std::string::npos || IsIpLiteral(host)) {
    return std::vector<std::string>{address};
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    const std::string why = rc == EAI_SYSTEM ? "system error" : gai_strerror(rc);
    if (rc == EAI_NONAME) {
      return absl::NotFoundError(absl::StrCat("peer address '", address, "': ", why));
    }
    return absl::UnavailableError(absl::StrCat("peer address '", address, "': ", why));
  }
  std::set<std::string> out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr, text,
                sizeof(text));
      out.insert(absl::StrCat(text, ":", port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr, text,
                sizeof(text));
      out.insert(absl::StrCat("[", text, "]:", port));
    }
  }
  freeaddrinfo(found);
  if (out.empty()) {
    return absl::NotFoundError(absl::StrCat("peer address '", address, "': no IP addresses"));
  }
  return std::vector<std::string>(out.begin(), out.end());
}

std::vector<std::pair<std::string, std::string>> ExpandAddresses(
    const std::vector<std::string>& configured, const AddressResolver& resolve,
    const std::vector<std::pair<std::string, std::string>>& previous) {
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::pair<std::string, std::string>> seen;
  for (const std::string& c : configured) {
    std::vector<std::string> addresses;
    absl::StatusOr<std::vector<std::string>> resolved = resolve(c);
    if (resolved.ok() && !resolved->empty()) {
      addresses = *std::move(resolved);
    } else {
      for (const auto& [from, address] : previous) {
        if (from == c) addresses.push_back(address);
      }
      if (addresses.empty()) addresses.push_back(c);
    }
    for (std::string& a : addresses) {
      if (seen.insert({c, a}).second) out.emplace_back(c, std::move(a));
    }
  }
  return out;
}

int FewestInFlight(const std::vector<int>& in_flight, const std::vector<int>& candidates,
                   int start) {
  const int n = static_cast<int>(in_flight.size());
  std::vector<bool> allowed(n, false);
  for (int i : candidates) allowed[i] = true;
  int best = -1;
  for (int k = 0; k < n; ++k) {
    const int i = (start + k) % n;
    if (allowed[i] && (best < 0 || in_flight[i] < in_flight[best])) best = i;
  }
  return best;
}

KvReports::KvReports(int replicas, std::chrono::milliseconds stale_after)
    : stale_after_(stale_after), entries_(replicas) {}

bool KvReports::FreshLocked(const Entry& e, Clock::time_point now) const {
  return e.known && now - e.asked_at < stale_after_;
}

void KvReports::Report(int i, int64_t free_bytes, Clock::time_point asked_at) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[i];
  if (e.known && asked_at < e.asked_at) return;  // an older poll answered late
  e.known = true;
  e.free_bytes = free_bytes;
  e.asked_at = asked_at;
  // Calls picked before the report was asked for are in it (or finished); later ones are not.
  while (!e.claims.empty() && e.claims.front().first < asked_at) {
    e.claimed -= e.claims.front().second;
    e.claims.pop_front();
  }
}

void KvReports::Unknown(int i) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[i];
  e.known = false;
  e.claims.clear();
  e.claimed = 0;
}

bool KvReports::Estimate(int i, Clock::time_point now, int64_t* free_bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = entries_[i];
  if (!FreshLocked(e, now)) return false;
  *free_bytes = e.free_bytes - e.claimed;
  return true;
}

void KvReports::Adopt(int i, const KvReports& from, int j) {
  std::scoped_lock lock(mu_, from.mu_);
  entries_[i] = from.entries_[j];
}

int KvReports::Choose(const std::vector<int>& in_flight, int start, int64_t bytes,
                      Clock::time_point now) {
  std::vector<int> all(in_flight.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return Choose(in_flight, all, start, bytes, now);
}

int KvReports::Choose(const std::vector<int>& in_flight, const std::vector<int>& eligible,
                      int start, int64_t bytes, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> candidates;
  bool all_fresh = true;
  int64_t most = 0;
  for (int i : eligible) {
    const Entry& e = entries_[i];
    if (!FreshLocked(e, now)) {
      all_fresh = false;
      break;
    }
    const int64_t estimate = e.free_bytes - e.claimed;
    if (candidates.empty() || estimate > most) {
      most = estimate;
      candidates.assign(1, i);
    } else if (estimate == most) {
      candidates.push_back(i);
    }
  }
  if (!all_fresh) candidates = eligible;
  const int best = FewestInFlight(in_flight, candidates, start);
  Entry& chosen = entries_[best];
  // A claim only matters against a fresh report (a stale one is not used, and the next report
  // is asked for after it), so none is kept otherwise: the list stays short.
  if (bytes > 0 && FreshLocked(chosen, now)) {
    chosen.claims.emplace_back(now, bytes);
    chosen.claimed += bytes;
  }
  return best;
}

}  // namespace hap::svc
