#include "services/wire/proto_convert.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "runtime/prune/factory.h"
#include "runtime/prune/planner.h"

namespace hap::svc {

absl::StatusOr<SamplingParams> SamplingFromProto(const hap::v1::Sampling& proto) {
  SamplingParams p;
  p.temperature = proto.temperature();
  p.top_p = proto.has_top_p() ? proto.top_p() : 1.f;
  p.top_k = proto.top_k();
  p.seed = proto.seed();
  HAP_RETURN_IF_ERROR(ValidateSamplingParams(p));
  return p;
}

hap::v1::Sampling SamplingToProto(const SamplingParams& params) {
  hap::v1::Sampling s;
  s.set_temperature(params.temperature);
  s.set_top_p(params.top_p);
  s.set_top_k(params.top_k);
  s.set_seed(params.seed);
  return s;
}

absl::StatusOr<StopCriteria> StopFromProto(
    int32_t max_new_tokens, const google::protobuf::RepeatedPtrField<std::string>& stop) {
  StopCriteria c;
  c.max_new_tokens = max_new_tokens == 0 ? kDefaultMaxNewTokens : max_new_tokens;
  if (c.max_new_tokens < 1 || c.max_new_tokens > kMaxNewTokensLimit) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens must be in [1, ",
                                                   kMaxNewTokensLimit, "], got ", max_new_tokens));
  }
  if (stop.size() > 16) {
    return absl::InvalidArgumentError(absl::StrCat("at most 16 stop strings, got ", stop.size()));
  }
  for (const std::string& s : stop) {
    if (s.size() > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop strings are at most 256 bytes, got ", s.size()));
    }
    c.stop_strings.push_back(s);
  }
  return c;
}

absl::StatusOr<PruneRequest> PruneFromProto(const hap::v1::Pruning& request,
                                            const hap::v1::Pruning& defaults, int n_visual_tokens) {
  PruneRequest p;
  p.method = request.method().empty() ? defaults.method() : request.method();
  if (p.method.empty()) p.method = "none";
  p.seed = request.seed();
  if (request.has_paq_temperature()) p.paq_temperature = request.paq_temperature();
  HAP_RETURN_IF_ERROR(ValidatePaqTemperature(p.method, p.paq_temperature));
  if (p.method == "none") return p;
  const hap::v1::Pruning& budget =
      request.budget_case() != hap::v1::Pruning::BUDGET_NOT_SET ? request : defaults;
  switch (budget.budget_case()) {
    case hap::v1::Pruning::kRetain: {
      HAP_ASSIGN_OR_RETURN(Budget b, ParseRetain(budget.retain(), n_visual_tokens));
      p.retain = b.value;
      break;
    }
    case hap::v1::Pruning::kFlops:
      if (!(budget.flops() > 0) || !std::isfinite(budget.flops())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("flops %g is not a positive fraction (e.g. 0.25)", budget.flops()));
      }
      p.flops = budget.flops();
      break;
    case hap::v1::Pruning::BUDGET_NOT_SET:
      return absl::InvalidArgumentError(
          absl::StrCat("pruning method '", p.method,
                       "' needs a budget (retain or flops) and the server has "
                       "no default budget"));
  }
  return p;
}

std::string BudgetString(const PruneRequest& prune) {
  if (prune.retain) return absl::StrFormat("retain %g", *prune.retain);
  if (prune.flops) return absl::StrFormat("flops %g", *prune.flops);
  return "";
}

hap::v1::FinishReason FinishToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return hap::v1::FINISH_REASON_EOS;
    case FinishReason::kStop:
      return hap::v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return hap::v1::FINISH_REASON_LENGTH;
    case FinishReason::kCancelled:
      return hap::v1::FINISH_REASON_CANCELLED;
  }
  return hap::v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace hap::svc
