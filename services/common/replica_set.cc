#include "services/common/replica_set.h"

#include <algorithm>

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
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " '", list, "' has an empty address (want host:port[,host:port...])"));
    }
    out.emplace_back(part);
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

int KvReports::Choose(const std::vector<int>& in_flight, int start, int64_t bytes,
                      Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const int n = static_cast<int>(entries_.size());
  std::vector<int> candidates;
  bool all_fresh = true;
  int64_t most = 0;
  for (int i = 0; i < n && all_fresh; ++i) {
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
  if (!all_fresh) {
    candidates.resize(n);
    for (int i = 0; i < n; ++i) candidates[i] = i;
  }
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
