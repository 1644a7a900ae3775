#include "services/prefill/prefill_telemetry.h"

#include <algorithm>

#include "services/server/service_metrics.h"
#include "services/wire/proto_convert.h"
#include "telemetry/tracer.h"

namespace hap::svc {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration Ms(double ms) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

}  // namespace

std::vector<LayerGroup> LayerGroups(const PrefillStats& stats, const PrefillTrace& trace) {
  const int n_layers = static_cast<int>(trace.layer_ms.size());
  std::vector<LayerGroup> groups;
  if (n_layers == 0) return groups;
  std::vector<PruneStage> stages = stats.stages;
  std::sort(stages.begin(), stages.end(),
            [](const PruneStage& a, const PruneStage& b) { return a.after_layer < b.after_layer; });
  auto tokens_at = [&](int layer) {
    return layer < static_cast<int>(trace.visual_tokens_per_layer.size())
               ? trace.visual_tokens_per_layer[layer]
               : 0;
  };
  int first = 0;
  auto close_group = [&](int last, std::optional<int> kept) {
    LayerGroup g;
    g.index = static_cast<int>(groups.size());
    g.first_layer = first;
    g.n_layers = last - first + 1;
    g.visual_tokens_in = tokens_at(first);
    g.visual_tokens_out = kept.value_or(tokens_at(last));
    double paq_sum = 0, eff_sum = 0;
    int paq_n = 0, eff_n = 0;
    for (int l = first; l <= last; ++l) {
      g.time_ms += trace.layer_ms[l];
      if (l < static_cast<int>(trace.prune_ms.size())) g.prune_ms += trace.prune_ms[l];
    }
    for (const HapLayerExplain& lx : stats.prune.hap_layers) {
      if (lx.layer < first || lx.layer > last) continue;
      for (float p : lx.head_paq) paq_sum += p;
      paq_n += static_cast<int>(lx.head_paq.size());
      double w2 = 0;
      for (float w : lx.head_weights) w2 += static_cast<double>(w) * w;
      if (w2 > 0) {
        eff_sum += 1.0 / w2;
        ++eff_n;
      }
    }
    if (paq_n > 0) g.mean_head_paq = paq_sum / paq_n;
    if (eff_n > 0) g.effective_heads = eff_sum / eff_n;
    groups.push_back(g);
    first = last + 1;
  };
  for (const PruneStage& s : stages) {
    if (s.after_layer < first || s.after_layer >= n_layers) continue;
    close_group(s.after_layer, s.tokens_kept);
  }
  if (first < n_layers) close_group(n_layers - 1, std::nullopt);
  return groups;
}

void RecordPrefill(const telemetry::Span& parent, const PrefillResult& result,
                   const PruneRequest& prune, Clock::time_point start, Clock::time_point end,
                   const std::vector<Clock::time_point>& layer_starts, const PrefillTurns& turns,
                   int batch_requests) {
  const PrefillStats& p = result.stats;
  const std::vector<LayerGroup> groups = LayerGroups(p, result.trace);
  const double kept_ratio =
      p.image_visual_tokens > 0 ? p.average_visual_tokens / p.image_visual_tokens : 1.0;

  PrefillMetrics& m = PrefillMetrics::Get();
  m.prefill_seconds->Observe(std::chrono::duration<double>(end - start).count());
  for (const LayerGroup& g : groups) {
    m.group_seconds->Observe(g.time_ms / 1e3);
    m.prune_seconds->Observe(g.prune_ms / 1e3);
  }
  m.kept_ratio->Observe(kept_ratio);
  m.input_tokens->Inc(p.prompt_tokens);
  m.flops_saved->Inc(std::max(0.0, p.unpruned_flops_full - p.flops_full));
  m.flops_unpruned->Inc(p.unpruned_flops_full);
  SampledRowsMetrics::Get().Count(result.first_token_sampling);

  const telemetry::Tracer& tracer = telemetry::GlobalTracer();
  telemetry::Span span = tracer.StartSpan("hap.prefill", parent, telemetry::SpanKind::kInternal,
                                          telemetry::ToUnixNanos(start));
  if (!span.recording()) return;
  span.SetAttribute("hap.method", p.method)
      .SetAttribute("hap.budget", BudgetString(prune))
      .SetAttribute("gen_ai.usage.input_tokens", p.prompt_tokens)
      .SetAttribute("hap.prompt_tokens", p.prompt_tokens)
      .SetAttribute("hap.text_tokens", p.text_tokens)
      .SetAttribute("hap.visual_tokens", p.visual_tokens)
      .SetAttribute("hap.image_visual_tokens", p.image_visual_tokens)
      .SetAttribute("hap.visual_tokens.average", p.average_visual_tokens)
      .SetAttribute("hap.visual_tokens.kept_ratio", kept_ratio)
      .SetAttribute("hap.layer_visual_tokens", p.layer_visual_tokens)
      .SetAttribute("hap.groups", static_cast<int>(groups.size()))
      .SetAttribute("hap.flops.full", p.flops_full)
      .SetAttribute("hap.flops.unpruned_full", p.unpruned_flops_full)
      .SetAttribute("hap.flops.paper", p.flops_paper)
      .SetAttribute("hap.flops.unpruned_paper", p.unpruned_flops_paper)
      .SetAttribute("hap.flops.saved_ratio",
                    p.unpruned_flops_full > 0 ? 1 - p.flops_full / p.unpruned_flops_full : 0.0)
      .SetAttribute("hap.kv_cache.bytes", p.kv_bytes)
      .SetAttribute("hap.kv_cache.bytes_unpruned", p.kv_bytes_unpruned)
      .SetAttribute("hap.prefill_ms", p.prefill_ms)
      .SetAttribute("hap.prefill.tokens_per_s",
                    p.prefill_ms > 0 ? p.prompt_tokens / (p.prefill_ms / 1e3) : 0.0)
      .SetAttribute("hap.prune.score_select_ms", p.score_select_ms)
      .SetAttribute("hap.prefill.yields", turns.yields)
      .SetAttribute("hap.prefill.yield_wait_ms", turns.waited_ms);
  if (batch_requests > 0) span.SetAttribute("hap.prefill.batch_requests", batch_requests);

  const bool have_starts = layer_starts.size() == result.trace.layer_ms.size();
  // Without per-layer start times the groups are laid end to end, finishing with the last layer
  // at `end` (what follows the layers — the logits of one row — is short).
  double total_ms = 0;
  for (double ms : result.trace.layer_ms) total_ms += ms;
  Clock::time_point cursor = end - Ms(total_ms);
  for (const LayerGroup& g : groups) {
    const Clock::time_point g_start = have_starts ? layer_starts[g.first_layer] : cursor;
    const Clock::time_point g_end = g_start + Ms(g.time_ms);
    cursor = g_end;
    telemetry::Span gs = tracer.StartSpan("hap.prefill.group", span, telemetry::SpanKind::kInternal,
                                          telemetry::ToUnixNanos(g_start));
    gs.SetAttribute("hap.group.index", g.index)
        .SetAttribute("hap.group.first_layer", g.first_layer)
        .SetAttribute("hap.group.last_layer", g.first_layer + g.n_layers - 1)
        .SetAttribute("hap.group.layers", g.n_layers)
        .SetAttribute("hap.visual_tokens.in", g.visual_tokens_in)
        .SetAttribute("hap.visual_tokens.out", g.visual_tokens_out)
        .SetAttribute("hap.group.time_ms", g.time_ms)
        .SetAttribute("hap.prune.time_ms", g.prune_ms);
    if (g.mean_head_paq) gs.SetAttribute("hap.paq.head_mean", *g.mean_head_paq);
    if (g.effective_heads) gs.SetAttribute("hap.heads.effective", *g.effective_heads);
    gs.End(telemetry::ToUnixNanos(g_end));
  }
  span.End(telemetry::ToUnixNanos(end));
}

}  // namespace hap::svc
