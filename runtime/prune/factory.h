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
  // Prompt tokens besides the image; the full FLOPs convention depends on it.
  int text_tokens = kDefaultTextTokens;
};

const std::vector<std::string>& PruneMethods();

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
// divprune/cdpruner-llm keep K = round(target) tokens before layer 0 (K ≥ 1, target ≤ V).
// "visionzip" returns a pruner that keeps every token and expects
// VisionZipCountsFor(...).total() visual tokens at layer 0 (compression happens in the vision
// tower).
absl::StatusOr<std::unique_ptr<Pruner>> MakePruner(const PruneRequest& req, const ModelDims& dims);

// The dominant/contextual split the vision tower uses for a "visionzip" request.
absl::StatusOr<VisionZipCounts> VisionZipCountsFor(const PruneRequest& req, const ModelDims& dims);

}  // namespace hap
