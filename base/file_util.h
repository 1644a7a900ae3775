// Reading a whole file, with errors that name it.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace hap {

// The file's bytes. NotFound "<path>: cannot open: <reason>" when it does not exist, Unavailable
// (same form) for other open failures and "<path>: read failed" for read errors.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace hap
