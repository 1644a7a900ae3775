// What a service holds, from its hap.v1.Debug/GetState answer (Client::GetState): requests in
// flight, KV caches, their transfer leases and KV pool blocks. Once every call has ended all of
// them must be back at zero; the end-to-end tests and the soak bench check that here.
#pragma once

#include <string>

#include "hap/v1/debug.pb.h"

namespace hap::sdk {

// True when `state` shows nothing held: no request in flight, no KV cache, lease or pool block.
bool HoldsNothing(const hap::v1::ServerState& state);

// "in flight 0, KV caches 0, leases 0, pool blocks in use 0".
std::string HeldSummary(const hap::v1::ServerState& state);

}  // namespace hap::sdk
