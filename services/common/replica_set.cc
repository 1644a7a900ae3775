#include "services/common/replica_set.h"

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

}  // namespace hap::svc
