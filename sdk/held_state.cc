#include "sdk/held_state.h"

#include "absl/strings/str_cat.h"

namespace hap::sdk {

bool HoldsNothing(const hap::v1::ServerState& state) {
  return state.in_flight_requests() == 0 && state.kv_caches_held() == 0 && state.kv_leases() == 0 &&
         state.kv_pool_blocks_in_use() == 0;
}

std::string HeldSummary(const hap::v1::ServerState& state) {
  return absl::StrCat("in flight ", state.in_flight_requests(), ", KV caches ",
                      state.kv_caches_held(), ", leases ", state.kv_leases(),
                      ", pool blocks in use ", state.kv_pool_blocks_in_use());
}

}  // namespace hap::sdk
