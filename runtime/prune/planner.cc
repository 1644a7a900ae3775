// Budget planner: group layout, token pyramid, FLOPs in both conventions, M from the budget.
#include "runtime/prune/planner.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace hap {
namespace {

// Budgets compare against sums of doubles; a relative slack of 1e-9 keeps "retain 29.125" at
// exactly the M = L average from failing on the last bit.
constexpr double kSlack = 1e-9;

}  // namespace

std::string Budget::ToString() const {
  return kind == Kind::kRetain ? absl::StrFormat("retain %g", value)
                               : absl::StrFormat("flops %g", value);
}

absl::StatusOr<Budget> ParseRetain(const std::string& text, int n_visual_tokens) {
  std::string t(absl::StripAsciiWhitespace(text));
  const bool percent = !t.empty() && t.back() == '%';
  if (percent) t.pop_back();
  double v = 0;
  if (!absl::SimpleAtod(t, &v) || !std::isfinite(v) || v <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "retain '", text, "' is not a positive token count (e.g. 64) or percentage (e.g. 5.6%)"));
  }
  return Budget::Retain(percent ? v / 100.0 * n_visual_tokens : v);
}

absl::StatusOr<Budget> ParseFlops(const std::string& text) {
  double v = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &v) || !std::isfinite(v) || v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("flops '", text, "' is not a positive fraction (e.g. 0.25)"));
  }
  return Budget::Flops(v);
}

int Plan::GroupOfLayer(int layer) const {
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    if (layer >= groups[g].first_layer && layer <= groups[g].last_layer()) return g;
  }
  return -1;
}

double LayerFlops(double n, double d, double f) {
  return 4.0 * n * d * d + 2.0 * n * n * d + 3.0 * n * d * f;
}

int GroupVisualTokens(int v, int g) {
  const double n = static_cast<double>(v) / ((1.0 + g) * (1.0 + g));
  return std::max(1, static_cast<int>(std::lround(n)));
}

double ClosedFormFlops(const ModelDims& dims, int m) {
  const double v = dims.n_visual_tokens, d = dims.d_model, f = dims.d_ffn;
  const double a = 4.0 * v * d * d + 3.0 * v * d * f;
  const double b = 2.0 * v * v * d;
  const double u = 1.0 + m;
  return static_cast<double>(dims.n_layers) / m *
         (a * (1.0 - 1.0 / u) + b / 3.0 * (1.0 - 1.0 / (u * u * u)));
}

namespace {

// Fills p's per-layer tokens, average, FLOPs and KV fraction from its groups and inputs.
void FillCosts(Plan* p) {
  p->layer_visual_tokens.clear();
  for (const PlanGroup& pg : p->groups) {
    for (int i = 0; i < pg.n_layers; ++i) p->layer_visual_tokens.push_back(pg.visual_tokens);
  }
  const int L = p->n_layers;
  const double d = p->d_model, f = p->d_ffn, nt = p->text_tokens, v = p->n_visual_tokens;
  double sum_tokens = 0, kv = 0;
  p->flops_paper = p->flops_full = 0;
  for (int nv : p->layer_visual_tokens) {
    sum_tokens += nv;
    p->flops_paper += LayerFlops(nv, d, f);
    p->flops_full += LayerFlops(nt + nv, d, f);
    kv += nt + nv;
  }
  p->average_visual_tokens = sum_tokens / L;
  ModelDims dims;
  dims.n_layers = L;
  dims.d_model = p->d_model;
  dims.d_ffn = p->d_ffn;
  dims.n_visual_tokens = p->n_visual_tokens;
  p->flops_closed_form = ClosedFormFlops(dims, p->M);
  p->unpruned_flops_paper = L * LayerFlops(v, d, f);
  p->unpruned_flops_full = L * LayerFlops(nt + v, d, f);
  p->unpruned_flops_closed_form = L * LayerFlops(v, d, f);
  p->kv_cache_fraction = kv / (L * (nt + v));
}

}  // namespace

const char* TokenScheduleName(TokenSchedule s) {
  return s == TokenSchedule::kFlat ? "flat" : "pyramid";
}

absl::StatusOr<Plan> PlanForGroups(const ModelDims& dims, int m, int text_tokens) {
  HAP_RETURN_IF_ERROR(dims.Validate());
  const int L = dims.n_layers;
  if (m < 1 || m > L) {
    return absl::InvalidArgumentError(absl::StrCat("groups M=", m, " outside [1, ", L, "]"));
  }
  if (text_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("text tokens ", text_tokens, " < 0"));
  }
  Plan p;
  p.n_layers = L;
  p.n_visual_tokens = dims.n_visual_tokens;
  p.d_model = dims.d_model;
  p.d_ffn = dims.d_ffn;
  p.text_tokens = text_tokens;
  p.M = m;
  const int base = L / m, extra = L % m;
  int layer = 0;
  for (int g = 0; g < m; ++g) {
    PlanGroup pg;
    pg.first_layer = layer;
    pg.n_layers = base + (g < extra ? 1 : 0);
    pg.visual_tokens = GroupVisualTokens(dims.n_visual_tokens, g);
    p.groups.push_back(pg);
    layer += pg.n_layers;
  }
  FillCosts(&p);
  return p;
}

absl::StatusOr<Plan> FlattenPlan(const Plan& pyramid) {
  if (pyramid.schedule != TokenSchedule::kPyramid || pyramid.groups.empty()) {
    return absl::InvalidArgumentError("FlattenPlan takes a pyramid plan");
  }
  Plan p = pyramid;
  p.schedule = TokenSchedule::kFlat;
  if (p.M == 1) return p;
  // c = the layer-weighted mean of the pyramid's pruned counts, so the average is unchanged up
  // to rounding c.
  double pruned_tokens = 0, pruned_layers = 0;
  for (int g = 1; g < p.M; ++g) {
    pruned_tokens += static_cast<double>(p.groups[g].n_layers) * p.groups[g].visual_tokens;
    pruned_layers += p.groups[g].n_layers;
  }
  const int c = std::clamp(static_cast<int>(std::lround(pruned_tokens / pruned_layers)), 1,
                           p.n_visual_tokens);
  for (int g = 1; g < p.M; ++g) p.groups[g].visual_tokens = c;
  FillCosts(&p);
  return p;
}

absl::StatusOr<Plan> MakePlan(const ModelDims& dims, const Budget& budget, int text_tokens,
                              TokenSchedule schedule) {
  if (schedule == TokenSchedule::kFlat) {
    HAP_ASSIGN_OR_RETURN(Plan pyramid, MakePlan(dims, budget, text_tokens));
    return FlattenPlan(pyramid);
  }
  HAP_RETURN_IF_ERROR(dims.Validate());
  if (!std::isfinite(budget.value) || budget.value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(budget.ToString(), ": the budget must be a positive number"));
  }
  const int L = dims.n_layers, V = dims.n_visual_tokens;
  const bool retain = budget.kind == Budget::Kind::kRetain;
  if ((retain && budget.value >= V) || (!retain && budget.value >= 1.0)) {
    return PlanForGroups(dims, 1, text_tokens);
  }
  for (int m = 1; m <= L; ++m) {
    HAP_ASSIGN_OR_RETURN(Plan p, PlanForGroups(dims, m, text_tokens));
    const double cost = retain ? p.average_visual_tokens : p.flops_full_fraction();
    if (cost <= budget.value * (1.0 + kSlack)) return p;
  }
  // N_v is non-increasing in the group index and M = L puts every layer in the lowest group it
  // can have, so M = L is the minimum of both costs.
  HAP_ASSIGN_OR_RETURN(Plan lowest, PlanForGroups(dims, L, text_tokens));
  if (retain) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "retain %g is below the minimum reachable average of %.1f visual tokens per layer "
        "(M = %d groups, %.1f%% of %d)",
        budget.value, lowest.average_visual_tokens, L, 100.0 * lowest.average_visual_tokens / V,
        V));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "flops %g is below the minimum reachable fraction %.4f of the unpruned prefill FLOPs "
      "(M = %d groups, full convention with %d text tokens; %.1f visual tokens per layer)",
      budget.value, lowest.flops_full_fraction(), L, text_tokens, lowest.average_visual_tokens));
}

}  // namespace hap
