// MakePruner: method name + budget → a Pruner.
#include "runtime/prune/factory.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "runtime/prune/cdpruner_llm_pruner.h"
#include "runtime/prune/dart_pruner.h"
#include "runtime/prune/divprune_pruner.h"
#include "runtime/prune/hap_pruner.h"
#include "runtime/prune/last_token_pruner.h"
#include "runtime/prune/pruner_base.h"
#include "runtime/prune/random_pruner.h"
#include "runtime/prune/sparsevlm_pruner.h"

namespace hap {

const std::vector<std::string>& PruneMethods() {
  static const auto* methods = new std::vector<std::string>{
      "none", "hap", "uniform", "fastv", "pdrop", "sparsevlm", "visionzip", "random",
      "hap-flat", "uniform-flat",  // the paper's factorial ablation: HAP's weightings, flat budget
      "dart",
      "divprune", "cdpruner-llm"};  // visual tokens chosen before the LLM
  return *methods;
}

bool UsesPaqSoftmax(const std::string& method) {
  return method == "hap" || method == "hap-flat";
}

absl::Status ValidatePaqTemperature(const std::string& method, double temperature,
                                    const std::string& field) {
  if (!(temperature >= kMinPaqTemperature && temperature <= kMaxPaqTemperature)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", temperature, " is out of range: ",
                                                   "the PAQ-softmax temperature must lie in [",
                                                   kMinPaqTemperature, ", ", kMaxPaqTemperature,
                                                   "] (1 = the paper's definition)"));
  }
  if (temperature != 1.0 && !UsesPaqSoftmax(method)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", temperature, ": method '", method,
        "' does not weight by PAQ-softmax; only 'hap' and 'hap-flat' take a temperature other "
        "than 1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Budget> RequestBudget(const PruneRequest& req) {
  if (req.retain.has_value() == req.flops.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.method,
                     ": give exactly one budget, retain (average visual tokens per layer) or "
                     "flops (fraction of the unpruned prefill)"));
  }
  const Budget b = req.retain ? Budget::Retain(*req.retain) : Budget::Flops(*req.flops);
  if (!std::isfinite(b.value) || b.value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.method, ": ", b.ToString(), ": the budget must be a positive number"));
  }
  return b;
}

absl::StatusOr<double> TargetAverageTokens(const PruneRequest& req, const ModelDims& dims) {
  HAP_ASSIGN_OR_RETURN(Budget b, RequestBudget(req));
  if (b.kind == Budget::Kind::kRetain) return b.value;
  HAP_ASSIGN_OR_RETURN(Plan plan, MakePlan(dims, b, req.text_tokens));
  return plan.average_visual_tokens;
}

absl::StatusOr<VisionZipCounts> VisionZipCountsFor(const PruneRequest& req, const ModelDims& dims) {
  HAP_ASSIGN_OR_RETURN(double target, TargetAverageTokens(req, dims));
  return VisionZipSplit(target, dims.n_visual_tokens);
}

absl::StatusOr<std::unique_ptr<Pruner>> MakePruner(const PruneRequest& req, const ModelDims& dims) {
  HAP_RETURN_IF_ERROR(dims.Validate());
  const std::string& m = req.method;
  if (std::find(PruneMethods().begin(), PruneMethods().end(), m) == PruneMethods().end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown pruning method '", m, "'; valid: ", absl::StrJoin(PruneMethods(), ", ")));
  }
  if (req.text_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("text tokens ", req.text_tokens, " < 0"));
  }
  HAP_RETURN_IF_ERROR(ValidatePaqTemperature(m, req.paq_temperature));
  if (m == "none") return std::make_unique<KeepAllPruner>("none", dims);
  if (m == "hap" || m == "uniform" || m == "random") {
    HAP_ASSIGN_OR_RETURN(Budget b, RequestBudget(req));
    HAP_ASSIGN_OR_RETURN(Plan plan, MakePlan(dims, b, req.text_tokens));
    if (m == "random") return std::make_unique<RandomPruner>(plan, dims, req.seed);
    return std::make_unique<HapPruner>(
        plan, dims,
        m == "hap" ? HapPruner::Weighting::kPaqSoftmax : HapPruner::Weighting::kUniform,
        req.paq_temperature);
  }
  if (m == "hap-flat" || m == "uniform-flat") {
    HAP_ASSIGN_OR_RETURN(Budget b, RequestBudget(req));
    HAP_ASSIGN_OR_RETURN(Plan plan, MakePlan(dims, b, req.text_tokens, TokenSchedule::kFlat));
    return std::make_unique<HapPruner>(
        plan, dims,
        m == "hap-flat" ? HapPruner::Weighting::kPaqSoftmax : HapPruner::Weighting::kUniform,
        req.paq_temperature);
  }
  HAP_ASSIGN_OR_RETURN(double target, TargetAverageTokens(req, dims));
  if (m == "fastv") {
    HAP_ASSIGN_OR_RETURN(StageSchedule s, FastvSchedule(dims, target));
    return std::make_unique<LastTokenPruner>("fastv", dims, std::move(s));
  }
  if (m == "pdrop") {
    HAP_ASSIGN_OR_RETURN(StageSchedule s, PdropSchedule(dims, target));
    return std::make_unique<LastTokenPruner>("pdrop", dims, std::move(s));
  }
  if (m == "dart") {
    HAP_ASSIGN_OR_RETURN(StageSchedule s, DartSchedule(dims, target));
    return std::make_unique<DartPruner>(dims, std::move(s));
  }
  if (m == "sparsevlm") {
    HAP_ASSIGN_OR_RETURN(StageSchedule s, SparseVlmSchedule(dims, target));
    return std::make_unique<SparseVlmPruner>(dims, std::move(s));
  }
  // Selection before the LLM: every layer sees the K kept tokens.
  if (m == "divprune") {
    HAP_ASSIGN_OR_RETURN(int keep, BeforeLlmKeepCount(m, target, dims.n_visual_tokens));
    return std::make_unique<DivPrunePruner>(dims, keep);
  }
  if (m == "cdpruner-llm") {
    HAP_ASSIGN_OR_RETURN(int keep, BeforeLlmKeepCount(m, target, dims.n_visual_tokens));
    return std::make_unique<CdPrunerLlmPruner>(dims, keep);
  }
  // visionzip: the LLM sees the compressed tokens, unpruned.
  HAP_ASSIGN_OR_RETURN(VisionZipCounts counts, VisionZipSplit(target, dims.n_visual_tokens));
  ModelDims llm = dims;
  if (counts.enabled()) llm.n_visual_tokens = counts.total();
  return std::make_unique<KeepAllPruner>("visionzip", llm);
}

}  // namespace hap
