// The baseline for the KV transfer benchmark: the same bytes over a plain loopback TCP socket
// (one write loop, one read loop, a 1-byte acknowledgement), no framing or checks.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace hap::bench {

// Sends every buffer in `parts` (in order) to a receiver thread over 127.0.0.1 and waits for its
// acknowledgement of the last byte. Returns the seconds from the first write to the ack.
absl::StatusOr<double> TcpCopySeconds(const std::vector<std::string_view>& parts);

}  // namespace hap::bench
