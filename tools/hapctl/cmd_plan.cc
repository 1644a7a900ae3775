// hapctl plan: shows the HAP schedule (groups, visual tokens per layer, FLOPs in the paper's and
// the full convention, the paper's closed form, KV-cache size) for a budget and a model.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/image/qwen2vl_preprocess.h"
#include "runtime/io/config.h"
#include "runtime/io/preprocessor_config.h"
#include "runtime/io/qwen_config.h"
#include "runtime/model/pipeline.h"
#include "runtime/prune/factory.h"
#include "runtime/prune/model_dims.h"
#include "runtime/prune/planner.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"

namespace hap::cli {
namespace {

constexpr char kUsage[] =
    "usage: hapctl plan (--model DIR | --preset llava-1.5-7b|qwen2.5-vl-7b) (--retain K | "
    "--flops F) [--megapixels MP] [--text-tokens N] [--schedule pyramid|flat] "
    "[--paq-temperature T] [--json]\n"
    "  --megapixels  Qwen2.5-VL only: a square image of MP million pixels (default 1); its visual\n"
    "              tokens follow the processor's dynamic resolution (smart_resize)\n"
    "  --retain  average visual tokens per decoder layer (64) or a percentage of them (5.6%)\n"
    "  --flops   fraction of the unpruned LLM prefill FLOPs, full convention (0.25)\n"
    "  --text-tokens  prompt tokens besides the image (default 40) for the full convention\n"
    "  --schedule  pyramid (HAP, default) or flat: HAP's groups with every pruned group at one\n"
    "              count for the same average (the hap-flat / uniform-flat ablation)\n"
    "  --paq-temperature  PAQ-softmax temperature of hap / hap-flat, in [0.01, 100] (default 1,\n"
    "              the paper's): checked and reported; it changes the weights, not the plan";

// Visual tokens of a square image of --megapixels under a Qwen2-VL processor: smart_resize, then
// one token per merged patch.
absl::StatusOr<int> QwenVisualTokens(const Flags& flags,
                                     const Qwen2VLImageProcessorConfig& processor) {
  HAP_ASSIGN_OR_RETURN(double megapixels, flags.Double("megapixels", 1.0));
  if (!(megapixels > 0 && megapixels <= 1000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--megapixels ", megapixels, " must be in (0, 1000]"));
  }
  const int side = static_cast<int>(std::lround(std::sqrt(megapixels * 1e6)));
  const int factor = processor.patch_size * processor.merge_size;
  HAP_ASSIGN_OR_RETURN(const ResizedSize size,
                       SmartResize(side, side, factor, processor.min_pixels, processor.max_pixels));
  std::fprintf(stderr, "plan: a %dx%d image is resized to %dx%d: %d visual tokens\n", side, side,
               size.width, size.height, (size.height / factor) * (size.width / factor));
  return (size.height / factor) * (size.width / factor);
}

absl::StatusOr<ModelDims> DimsFromFlags(const Flags& flags) {
  const bool has_model = flags.Has("model"), has_preset = flags.Has("preset");
  if (has_model == has_preset) {
    return absl::InvalidArgumentError(
        "give exactly one of --model DIR or --preset llava-1.5-7b|qwen2.5-vl-7b");
  }
  if (has_preset) {
    const std::string preset = *flags.Get("preset");
    if (preset == "qwen2.5-vl-7b") {
      Qwen2VLImageProcessorConfig processor;  // Qwen2.5-VL's published budget
      processor.min_pixels = 3136;
      processor.max_pixels = 12845056;
      HAP_ASSIGN_OR_RETURN(const int visual, QwenVisualTokens(flags, processor));
      return ModelDims::Qwen25VL_7B(visual);
    }
    if (preset != "llava-1.5-7b") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown preset '", preset, "' (known: llava-1.5-7b, qwen2.5-vl-7b)"));
    }
    if (flags.Has("megapixels")) {
      return absl::InvalidArgumentError(
          "--megapixels is for Qwen2.5-VL: LLaVA-1.5's processor gives every image 576 tokens");
    }
    return ModelDims::Llava15_7B();
  }
  const std::string dir = *flags.Get("model");
  HAP_ASSIGN_OR_RETURN(const std::string config_text, ReadFileToString(dir + "/config.json"));
  if (IsQwen25VLConfig(config_text)) {
    HAP_ASSIGN_OR_RETURN(const Qwen25VLConfig q, ParseQwen25VLConfig(config_text, dir));
    Qwen2VLImageProcessorConfig processor;
    const std::string processor_path = dir + "/preprocessor_config.json";
    absl::StatusOr<std::string> processor_text = ReadFileToString(processor_path);
    if (processor_text.ok()) {
      HAP_ASSIGN_OR_RETURN(processor,
                           ParseQwen2VLPreprocessorConfig(*processor_text, processor_path));
    } else if (!absl::IsNotFound(processor_text.status())) {
      return processor_text.status();
    }
    HAP_ASSIGN_OR_RETURN(const int visual_tokens, QwenVisualTokens(flags, processor));
    const ModelDims d = DimsOf(q, visual_tokens);
    HAP_RETURN_IF_ERROR(d.Validate());
    return d;
  }
  if (flags.Has("megapixels")) {
    return absl::InvalidArgumentError(
        "--megapixels is for Qwen2.5-VL: LLaVA's processor gives every image the same tokens");
  }
  HAP_ASSIGN_OR_RETURN(LlavaConfig cfg, ParseLlavaConfig(config_text, dir + "/config.json"));
  const ModelDims d = DimsOf(cfg);
  HAP_RETURN_IF_ERROR(d.Validate());
  return d;
}

// Formats `flops` with the SI prefix that suits `scale` (the row's unpruned count), so a row's
// pruned and unpruned numbers share a unit: 3.817T for LLaVA-1.5-7B, 1.234G for a small model
// (a fixed T showed 0.000T for both).
std::string Flops(double flops, double scale) {
  static constexpr struct {
    double factor;
    const char* suffix;
  } kUnits[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "K"}};
  for (const auto& u : kUnits) {
    if (scale >= u.factor) return absl::StrFormat("%.3f%s", flops / u.factor, u.suffix);
  }
  return absl::StrFormat("%.0f", flops);
}

// One row of the FLOPs table: pruned and unpruned in the unpruned count's unit, and their ratio.
void PrintFlopsRow(const std::string& label, double pruned, double unpruned,
                   const char* note = "") {
  std::printf("  %-26s  %9s  %9s   %7.1f%%%s\n", label.c_str(), Flops(pruned, unpruned).c_str(),
              Flops(unpruned, unpruned).c_str(), 100.0 * pruned / unpruned, note);
}

nlohmann::json ToJson(const Plan& p, const Budget& budget, double paq_temperature) {
  nlohmann::json groups = nlohmann::json::array();
  for (const PlanGroup& g : p.groups) {
    groups.push_back({{"layers", {g.first_layer, g.last_layer()}},
                      {"n_layers", g.n_layers},
                      {"visual_tokens", g.visual_tokens}});
  }
  return {
      {"budget",
       {{"kind", budget.kind == Budget::Kind::kRetain ? "retain" : "flops"},
        {"value", budget.value}}},
      {"layers", p.n_layers},
      {"visual_tokens", p.n_visual_tokens},
      {"text_tokens", p.text_tokens},
      {"schedule", TokenScheduleName(p.schedule)},
      {"paq_temperature", paq_temperature},
      // PAQ ∈ [0, 1]: two weights differ by at most a factor e^(1/τ).
      {"max_weight_ratio", std::exp(1.0 / paq_temperature)},
      {"M", p.M},
      {"groups", groups},
      {"per_layer_visual_tokens", p.layer_visual_tokens},
      {"average_visual_tokens", p.average_visual_tokens},
      {"retained_fraction", p.average_visual_tokens / p.n_visual_tokens},
      // FLOPs are multiply-adds as the paper counts them; *_T repeat them in units of 1e12.
      {"flops_paper", p.flops_paper},
      {"flops_full", p.flops_full},
      {"flops_closed_form", p.flops_closed_form},
      {"unpruned_flops_paper", p.unpruned_flops_paper},
      {"unpruned_flops_full", p.unpruned_flops_full},
      {"unpruned_flops_closed_form", p.unpruned_flops_closed_form},
      {"flops_paper_T", p.flops_paper / 1e12},
      {"flops_full_T", p.flops_full / 1e12},
      {"flops_closed_form_T", p.flops_closed_form / 1e12},
      {"unpruned_flops_paper_T", p.unpruned_flops_paper / 1e12},
      {"unpruned_flops_full_T", p.unpruned_flops_full / 1e12},
      {"flops_paper_fraction", p.flops_paper_fraction()},
      {"flops_full_fraction", p.flops_full_fraction()},
      {"kv_cache_fraction", p.kv_cache_fraction},
  };
}

void PrintTable(const Plan& p, const Budget& budget, double paq_temperature) {
  std::printf("HAP plan (%s schedule) for %s: L=%d layers, V=%d visual tokens, D=%d, d_ffn=%d\n",
              TokenScheduleName(p.schedule), budget.ToString().c_str(), p.n_layers,
              p.n_visual_tokens, p.d_model, p.d_ffn);
  std::printf("M = %d group%s\n", p.M, p.M == 1 ? " (no pruning)" : "s");
  std::printf("PAQ-softmax temperature %g: weights differ by at most a factor e^(1/%g) = %.4g\n\n",
              paq_temperature, paq_temperature, std::exp(1.0 / paq_temperature));
  std::printf("  group  layers    visual tokens\n");
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const PlanGroup& pg = p.groups[g];
    std::printf("  %5zu  %-8s  %13d\n", g,
                absl::StrFormat("%d-%d", pg.first_layer, pg.last_layer()).c_str(),
                pg.visual_tokens);
  }
  std::printf("\naverage visual tokens per layer  %.2f (%.1f%% of %d)\n", p.average_visual_tokens,
              100.0 * p.average_visual_tokens / p.n_visual_tokens, p.n_visual_tokens);
  std::printf("\n  FLOPs                          pruned    unpruned   fraction\n");
  PrintFlopsRow("paper (visual tokens only)", p.flops_paper, p.unpruned_flops_paper);
  PrintFlopsRow(absl::StrFormat("full (+%4d text tokens)", p.text_tokens), p.flops_full,
                p.unpruned_flops_full);
  PrintFlopsRow(absl::StrFormat("paper closed form F(m=%d)", p.M), p.flops_closed_form,
                p.unpruned_flops_closed_form, "  (integral approximation)");
  std::printf("\nKV cache: %.1f%% of the unpruned prompt's (%d text tokens)\n",
              100.0 * p.kv_cache_fraction, p.text_tokens);
}

absl::Status Plan_(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(ModelDims dims, DimsFromFlags(flags));
  if (flags.Has("retain") == flags.Has("flops")) {
    return absl::InvalidArgumentError("give exactly one of --retain K or --flops F");
  }
  Budget budget;
  if (flags.Has("retain")) {
    HAP_ASSIGN_OR_RETURN(budget, ParseRetain(*flags.Get("retain"), dims.n_visual_tokens));
  } else {
    HAP_ASSIGN_OR_RETURN(budget, ParseFlops(*flags.Get("flops")));
  }
  HAP_ASSIGN_OR_RETURN(int64_t text, flags.Int("text-tokens", kDefaultTextTokens));
  if (text < 0 || text > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("--text-tokens ", text, " out of range"));
  }
  const std::string schedule = flags.GetOr("schedule", "pyramid");
  if (schedule != "pyramid" && schedule != "flat") {
    return absl::InvalidArgumentError(
        absl::StrCat("--schedule '", schedule, "': use pyramid or flat"));
  }
  HAP_ASSIGN_OR_RETURN(double paq_temperature, flags.Double("paq-temperature", 1.0));
  HAP_RETURN_IF_ERROR(ValidatePaqTemperature(schedule == "flat" ? "hap-flat" : "hap",
                                             paq_temperature, "--paq-temperature"));
  HAP_ASSIGN_OR_RETURN(
      Plan plan, MakePlan(dims, budget, static_cast<int>(text),
                          schedule == "flat" ? TokenSchedule::kFlat : TokenSchedule::kPyramid));
  if (flags.Bool("json")) {
    std::printf("%s\n", ToJson(plan, budget, paq_temperature).dump().c_str());
  } else {
    PrintTable(plan, budget, paq_temperature);
  }
  return absl::OkStatus();
}

int CmdPlan(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  auto flags = Flags::Parse(args,
                            {"model", "preset", "retain", "flops", "megapixels", "text-tokens",
                             "schedule", "paq-temperature"},
                            {"json"});
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", kUsage);
    return Fail("plan", flags.status());
  }
  if (absl::Status s = Plan_(*flags); !s.ok()) return Fail("plan", s);
  return 0;
}

}  // namespace

HAP_COMMAND(plan, "Plan a HAP pruning schedule and its FLOPs for a budget", CmdPlan);

}  // namespace hap::cli
