// HAP's budget planner (docs/design.md §3): turns one budget (a FLOPs fraction or an average number
// of visual tokens per layer) into M groups of consecutive layers with a pyramid token schedule
// (or, for the paper's factorial ablation, a flat one over the same groups), and reports the
// FLOPs of that schedule in the paper's and the full convention.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/prune/model_dims.h"

namespace hap {

// The text tokens the "full" FLOPs convention and the KV-cache fraction assume when the caller
// gives none: a LLaVA-1.5 prompt "USER: <image>\n{question} ASSISTANT:" is BOS + "USER:" (4) +
// "\n" + a short VQA question with its answer-format instruction (~30) + " ASSISTANT:" (5) ≈ 40
// tokens besides the image. Requests pass their real prompt length instead.
inline constexpr int kDefaultTextTokens = 40;

// The one user input. kRetain: average visual tokens per decoder layer (Σ_l N_v(l) / L, the
// convention of the paper's tables). kFlops: fraction of the unpruned prefill FLOPs in the
// full convention.
struct Budget {
  enum class Kind { kRetain, kFlops };
  Kind kind = Kind::kRetain;
  double value = 0;

  static Budget Retain(double tokens) { return {Kind::kRetain, tokens}; }
  static Budget Flops(double fraction) { return {Kind::kFlops, fraction}; }
  std::string ToString() const;  // "retain 64" / "flops 0.25"
};

// "--retain" syntax: an average token count ("64", "57.5") or a percentage of V ("5.6%").
absl::StatusOr<Budget> ParseRetain(const std::string& text, int n_visual_tokens);
// "--flops" syntax: a fraction in (0, ∞) ("0.25"); ≥ 1 means no pruning.
absl::StatusOr<Budget> ParseFlops(const std::string& text);

// How the pruned groups 1..M−1 share the visual tokens (group 0 always sees all V).
//   kPyramid: N_v(g) = max(1, round(V/(1+g)²)) (docs/design.md §3): HAP's schedule.
//   kFlat:    the paper's "uniform budget" cell of its factorial ablation (appendix, Table
//             "Factorial ablation"): the same M, the same group boundaries and the same unpruned
//             group 0 as the pyramid plan for the budget, and every pruned group keeps the same
//             count c = max(1, round(Σ_{g≥1} n_g·N_v(g) / Σ_{g≥1} n_g)) — the layer-weighted mean
//             of the pyramid's pruned counts (n_g = layers of group g), i.e. the count that gives
//             the pyramid plan's average visual tokens per layer. Both schedules therefore run at
//             the same average (up to rounding c: |difference| ≤ (L − n_0)/(2L) < 0.5 tokens), so
//             the ablation compares the schedules' shape only. A retain budget resolves, as for
//             HAP, to the pyramid plan's average (≤ the budget); a FLOPs budget to the average of
//             the pyramid plan that meets it. The FLOPs follow the average (the per-token linear
//             terms dominate the quadratic one at these counts): within 1% of the pyramid's for
//             LLaVA-1.5-7B, above them when c rounds up, so a flat plan may exceed a FLOPs budget
//             by that rounding.
enum class TokenSchedule { kPyramid, kFlat };

const char* TokenScheduleName(TokenSchedule s);  // "pyramid" / "flat"

struct PlanGroup {
  int first_layer = 0;
  int n_layers = 0;
  int visual_tokens = 0;  // N_v(g)
  int last_layer() const { return first_layer + n_layers - 1; }
};

struct Plan {
  // Inputs.
  int n_layers = 0;         // L
  int n_visual_tokens = 0;  // V
  int d_model = 0;
  int d_ffn = 0;
  int text_tokens = 0;  // N_text assumed by flops_full and kv_cache_fraction

  TokenSchedule schedule = TokenSchedule::kPyramid;
  int M = 1;
  std::vector<PlanGroup> groups;         // [M]
  std::vector<int> layer_visual_tokens;  // [L] N_v of the group holding each layer
  double average_visual_tokens = 0;      // Σ_l N_v(l) / L

  // F(N) = 4·N·D² + 2·N²·D + 3·N·D·d_ffn summed over the L layers (multiply-adds).
  double flops_paper = 0;                 // N = visual tokens of the layer
  double flops_full = 0;                  // N = text_tokens + visual tokens of the layer
  double flops_closed_form = 0;           // the paper's F_pruned(m = M) (an integral approximation
                                          // of the pyramid, also reported for a flat plan)
  double unpruned_flops_paper = 0;        // L·F(V)
  double unpruned_flops_full = 0;         // L·F(text_tokens + V)
  double unpruned_flops_closed_form = 0;  // L·(A + B) = L·F(V): the integrand at u = 1
  // Σ_l (N_text + N_v(l)) / (L·(N_text + V)): KV-cache size relative to the unpruned prompt.
  double kv_cache_fraction = 0;

  double flops_full_fraction() const { return flops_full / unpruned_flops_full; }
  double flops_paper_fraction() const { return flops_paper / unpruned_flops_paper; }
  int GroupOfLayer(int layer) const;  // -1 outside [0, L)
};

// F(N) of one layer.
double LayerFlops(double n_tokens, double d_model, double d_ffn);

// N_v(g) = max(1, round(V / (1+g)^2)).
int GroupVisualTokens(int n_visual_tokens, int group);

// The paper's closed form: (L/m)·[A(1 − 1/(1+m)) + (B/3)(1 − 1/(1+m)^3)], A = 4VD² + 3VD·d_ffn,
// B = 2V²D.
double ClosedFormFlops(const ModelDims& dims, int m);

// The plan with exactly m groups (sizes differ by ≤ 1, earlier groups larger).
// InvalidArgument for m outside [1, L], text_tokens < 0 or bad dims.
absl::StatusOr<Plan> PlanForGroups(const ModelDims& dims, int m,
                                   int text_tokens = kDefaultTextTokens);

// The plan for a budget: M = the smallest m in 1..L whose average visual tokens per layer
// (kRetain) or full-convention FLOPs fraction (kFlops) is within the budget. retain ≥ V or
// flops ≥ 1 → M = 1 (no pruning). A budget below what M = L reaches is InvalidArgument naming
// the reachable minimum; a non-positive or non-finite budget is InvalidArgument.
// schedule = kFlat: the pyramid plan for the budget flattened by FlattenPlan (same M, groups
// and errors).
absl::StatusOr<Plan> MakePlan(const ModelDims& dims, const Budget& budget,
                              int text_tokens = kDefaultTextTokens,
                              TokenSchedule schedule = TokenSchedule::kPyramid);

// The kFlat plan over a pyramid plan's groups (see TokenSchedule), its per-layer tokens, average,
// FLOPs and KV fraction recomputed. A plan with M = 1 is returned unchanged but for `schedule`.
// InvalidArgument unless `pyramid` is a kPyramid plan.
absl::StatusOr<Plan> FlattenPlan(const Plan& pyramid);

}  // namespace hap
