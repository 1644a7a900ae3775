// Debian's Abseil is built with its own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0),
// which does not convert from std::string_view; our APIs use std::string_view throughout.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace hap {

inline absl::string_view AsAbsl(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace hap
