// Builds the pruning method a request asks for from its budget and the model's dimensions.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/prune/model_dims.h"
#include "runtime/prune/planner.h"
#include "runtime/prune/pruner.h"
#include "runtime/prune/visionzip.h"

namespace hap {

struct PruneRequest {
  // One of PruneMethods(): "none", "hap", "uniform", "fastv", "pdrop", "sparsevlm",
  // "visionzip", "random", "hap-flat", "uniform-flat", "dart",
  // "divprune", "cdpruner-llm".
  std::string method = "hap";
  // Exactly one budget (none needed for "none"): the average visual tokens per decoder layer,
  // or a fraction of the unpruned prefill FLOPs (full convention).
  std::optional<double> retain;
  std::optional<double> flops;
  uint64_t seed = 0;  // "random"
  // PAQ-softmax temperature τ of "hap" and "hap-flat" (head and layer weights both):
  // w_c = softmax((PAQ_c − mean PAQ) / τ). 1 = the paper's definition (docs/design.md §3); any
  // other value must lie in [kMinPaqTemperature, kMaxPaqTemperature] and is rejected for the
  // methods that do not use PAQ-softmax.
  double paq_temperature = 1.0;
  // Prompt tokens besides the image; the full FLOPs convention depends on it.
  int text_tokens = kDefaultTextTokens;
};

const std::vector<std::string>& PruneMethods();

// The range a request's PAQ-softmax temperature may take (inclusive). With PAQ ∈ [0, 1], τ = 1
// lets weights differ by at most a factor e; τ bounds that factor by e^(1/τ).
inline constexpr double kMinPaqTemperature = 0.01;
inline constexpr double kMaxPaqTemperature = 100.0;

// Whether the method weights heads and layers by PAQ-softmax ("hap", "hap-flat"), i.e. takes a
// PAQ-softmax temperature.
bool UsesPaqSoftmax(const std::string& method);

// InvalidArgument, naming `field` (the caller's spelling: "paq_temperature",
// "--paq-temperature", "hap.paq_temperature") and the range, when τ is not a finite number in
// [kMinPaqTemperature, kMaxPaqTemperature], or when τ ≠ 1 and the method does not use
// PAQ-softmax (UsesPaqSoftmax). τ = 1 is accepted for every method.
absl::Status ValidatePaqTemperature(const std::string& method, double temperature,
                                    const std::string& field = "paq_temperature");

// The request's budget as a Budget (InvalidArgument when both or neither are set).
absl::StatusOr<Budget> RequestBudget(const PruneRequest& req);

// The average visual tokens per layer the baselines aim at: the retain target itself, or for a
// FLOPs budget the average of HAP's plan for it (so every method runs at the same token budget,
// the shared convention of docs/design.md §4).
absl::StatusOr<double> TargetAverageTokens(const PruneRequest& req, const ModelDims& dims);

// InvalidArgument for an unknown method (listing the valid ones), a missing/extra budget, a
// non-positive budget, or one below what the method can reach (hap/uniform/random and
// hap-flat/uniform-flat: HAP's M = L minimum; dart: 2 of 32 layers at all V, then 1 token).
// fastv/pdrop/sparsevlm clamp at 1 token per stage and report the achieved average in stats().
// hap-flat/uniform-flat run HAP's weightings over MakePlan(..., TokenSchedule::kFlat).
// A paq_temperature that ValidatePaqTemperature rejects is InvalidArgument too.
// divprune/cdpruner-llm keep K = round(target) tokens before layer 0 (K ≥ 1, target ≤ V).
// "visionzip" returns a pruner that keeps every token and expects
// VisionZipCountsFor(...).total() visual tokens at layer 0 (compression happens in the vision
// tower).
absl::StatusOr<std::unique_ptr<Pruner>> MakePruner(const PruneRequest& req, const ModelDims& dims);

// The dominant/contextual split the vision tower uses for a "visionzip" request.
absl::StatusOr<VisionZipCounts> VisionZipCountsFor(const PruneRequest& req, const ModelDims& dims);

}  // namespace hap
