// hapctl's flags (base/flags.h's parser) and the helpers every command shares.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "base/flags.h"

namespace hap::cli {

using ::hap::Flags;

// --device, else $HAP_DEVICE, else "cpu": the compute backend (runtime/device).
std::string DeviceFlag(const Flags& flags);

// Prints "hapctl <cmd>: <status message>" to stderr and returns the exit code for it (2 for
// invalid arguments, 1 otherwise).
int Fail(const std::string& command, const absl::Status& status);

}  // namespace hap::cli
