// What the front door reports about one prefill: the layer groups it ran (HAP's groups, or for
// any method the runs of layers between pruning steps), their hap.prefill.group spans and the
// prefill metrics.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "runtime/model/pipeline.h"
#include "telemetry/span.h"

namespace hap::svc {

// One layer group of a finished prefill.
struct LayerGroup {
  int index = 0;
  int first_layer = 0;
  int n_layers = 0;
  int visual_tokens_in = 0;   // visual tokens the group's layers processed
  int visual_tokens_out = 0;  // kept by the pruning step that ends it (= in for the last group)
  double time_ms = 0;         // Σ wall time of its layers, pruning step included
  double prune_ms = 0;        // the pruning step alone (PAQ + selection)
  // HAP/uniform only (the last group computes no attention maps): mean PAQ over the group's
  // layers and heads, and the effective number of heads 1/Σ_h w_h², averaged over its layers.
  std::optional<double> mean_head_paq;
  std::optional<double> effective_heads;
};

// Groups = consecutive layers ending at each pruning stage (stats.stages), then the rest. For
// HAP these are exactly the planner's M groups; a method that never prunes in the decoder has
// one group of all layers.
std::vector<LayerGroup> LayerGroups(const PrefillStats& stats, const PrefillTrace& trace);

// How a sliced prefill shared the compute (TurnBudget): turns handed to prefills waiting behind
// it, and the time it waited for them (inside [start, end), outside every layer's time).
struct PrefillTurns {
  int yields = 0;
  double waited_ms = 0;
};

// hap.prefill (under `parent`) with one hap.prefill.group child per group, and the prefill
// metrics. `start`/`end` bracket RunPrefill (or the batched pass it ran in, of batch_requests
// requests: the span's hap.prefill.batch_requests; 0 = not batched); `layer_starts` holds the
// start of each decoder layer when known (else groups are laid end to end from the layer times,
// ending at `end`).
void RecordPrefill(const telemetry::Span& parent, const PrefillResult& result,
                   const PruneRequest& prune, std::chrono::steady_clock::time_point start,
                   std::chrono::steady_clock::time_point end,
                   const std::vector<std::chrono::steady_clock::time_point>& layer_starts,
                   const PrefillTurns& turns = {}, int batch_requests = 0);

}  // namespace hap::svc
