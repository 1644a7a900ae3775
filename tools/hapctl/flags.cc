#include "tools/hapctl/flags.h"

#include <cstdio>
#include <cstdlib>

namespace hap::cli {

std::string DeviceFlag(const Flags& flags) {
  if (auto v = flags.Get("device")) return *v;
  const char* env = std::getenv("HAP_DEVICE");
  return env != nullptr && *env != '\0' ? env : "cpu";
}

int Fail(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "hapctl %s: %s\n", command.c_str(), std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace hap::cli
