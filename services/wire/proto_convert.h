// Conversions between hap.v1 messages and the runtime's request structs, with the range checks
// the services apply on receipt.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "hap/v1/common.pb.h"
#include "runtime/model/generate.h"
#include "runtime/model/sampler.h"
#include "runtime/prune/factory.h"

namespace hap::svc {

// Unset top_p means 1. InvalidArgument for values ValidateSamplingParams rejects.
absl::StatusOr<SamplingParams> SamplingFromProto(const hap::v1::Sampling& proto);
hap::v1::Sampling SamplingToProto(const SamplingParams& params);

// 0 → 64 tokens; InvalidArgument outside [1, 1048576] or for too many / too long stop strings.
absl::StatusOr<StopCriteria> StopFromProto(
    int32_t max_new_tokens, const google::protobuf::RepeatedPtrField<std::string>& stop);

// The request's pruning over the server's defaults (an empty method or an unset budget takes
// the default's); a "retain" percentage is of `n_visual_tokens`. Method "none" takes no budget.
// Errors (InvalidArgument) name the field; MakePruner's own checks run later (ValidateRequest).
// An unset paq_temperature is 1; a set one must pass ValidatePaqTemperature (in [0.01, 100], and
// 1 unless the resolved method is "hap" or "hap-flat").
absl::StatusOr<PruneRequest> PruneFromProto(const hap::v1::Pruning& request,
                                            const hap::v1::Pruning& defaults, int n_visual_tokens);
// "retain 64" / "flops 0.25" / "" for display.
std::string BudgetString(const PruneRequest& prune);

hap::v1::FinishReason FinishToProto(FinishReason reason);

inline constexpr int kMaxNewTokensLimit = 1 << 20;
inline constexpr int kDefaultMaxNewTokens = 64;

}  // namespace hap::svc
