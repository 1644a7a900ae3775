#include "tools/hapctl/run_options.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "runtime/prune/planner.h"

namespace hap::cli {

void AddGenerationFlags(std::set<std::string>* value_flags) {
  value_flags->insert({"max-new-tokens", "temperature", "top-p", "top-k", "seed", "stop",
                       "method", "retain", "flops", "paq-temperature"});
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("file '", path, "' does not exist"));
  }
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  if (!f) return absl::UnavailableError(absl::StrCat("cannot read '", path, "'"));
  return ss.str();
}

absl::Status CreateDirectories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<PruneRequest> ParsePruneFlags(const Flags& flags, int n_visual_tokens) {
  PruneRequest req;
  auto retain = flags.Get("retain");
  auto flops = flags.Get("flops");
  // A budget or a PAQ-softmax temperature without --method means HAP.
  req.method =
      flags.GetOr("method", (retain || flops || flags.Has("paq-temperature")) ? "hap" : "none");
  if (retain && flops) return absl::InvalidArgumentError("give --retain or --flops, not both");
  if (retain) {
    HAP_ASSIGN_OR_RETURN(Budget b, ParseRetain(*retain, n_visual_tokens));
    req.retain = b.value;
  }
  if (flops) {
    HAP_ASSIGN_OR_RETURN(Budget b, ParseFlops(*flops));
    req.flops = b.value;
  }
  if (auto seed = flags.Get("seed")) {
    HAP_ASSIGN_OR_RETURN(req.seed, flags.Uint64("seed", 0));
  }
  HAP_ASSIGN_OR_RETURN(req.paq_temperature, flags.Double("paq-temperature", 1.0));
  // `eval` takes a comma list of methods: every one of them must take the temperature.
  for (absl::string_view m : absl::StrSplit(req.method, ',', absl::SkipWhitespace())) {
    HAP_RETURN_IF_ERROR(ValidatePaqTemperature(std::string(absl::StripAsciiWhitespace(m)),
                                               req.paq_temperature, "--paq-temperature"));
  }
  return req;
}

absl::StatusOr<int> ParseMaxNewTokens(const Flags& flags, int default_value) {
  HAP_ASSIGN_OR_RETURN(int64_t max_new, flags.Int("max-new-tokens", default_value));
  if (max_new < 1 || max_new > 1 << 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-new-tokens must be in [1, 1048576], got ", max_new));
  }
  return static_cast<int>(max_new);
}

absl::StatusOr<DType> ParseKvDTypeFlag(const Flags& flags) {
  return ParseKvDTypeFlagValue("--kv-dtype", flags.GetOr("kv-dtype", "f32"));
}

absl::StatusOr<std::optional<DType>> ParseAttentionDTypeFlag(const Flags& flags) {
  return ParseAttentionDTypeFlagValue("--attention-dtype", flags.GetOr("attention-dtype", "auto"));
}

absl::StatusOr<bool> ParseDecodeGraphsFlag(const Flags& flags) {
  const std::string v = flags.GetOr("decode-graphs", "on");
  if (v == "on" || v == "off") return v == "on";
  return absl::InvalidArgumentError(
      absl::StrCat("--decode-graphs must be on or off, got '", v, "'"));
}

absl::StatusOr<SamplingParams> ParseSamplingFlags(const Flags& flags) {
  SamplingParams sampling;
  HAP_ASSIGN_OR_RETURN(double temperature, flags.Double("temperature", 0.0));
  HAP_ASSIGN_OR_RETURN(double top_p, flags.Double("top-p", 1.0));
  HAP_ASSIGN_OR_RETURN(int64_t top_k, flags.Int("top-k", 0));
  HAP_ASSIGN_OR_RETURN(sampling.seed, flags.Uint64("seed", 0));
  sampling.temperature = static_cast<float>(temperature);
  sampling.top_p = static_cast<float>(top_p);
  sampling.top_k = static_cast<int>(top_k);
  HAP_RETURN_IF_ERROR(ValidateSamplingParams(sampling));
  return sampling;
}

absl::StatusOr<GenerateRequest> ParseGenerateRequest(const Flags& flags, int n_visual_tokens) {
  return ParseGenerateRequest(flags,
                              [n_visual_tokens](std::string_view) { return n_visual_tokens; });
}

absl::StatusOr<GenerateRequest> ParseGenerateRequest(
    const Flags& flags,
    const std::function<absl::StatusOr<int>(std::string_view image)>& visual_tokens_of) {
  GenerateRequest req;
  HAP_ASSIGN_OR_RETURN(std::string image_path, flags.Required("image"));
  HAP_ASSIGN_OR_RETURN(req.prompt, flags.Required("prompt"));
  HAP_ASSIGN_OR_RETURN(req.image_bytes, ReadFile(image_path));
  HAP_ASSIGN_OR_RETURN(const int n_visual_tokens, visual_tokens_of(req.image_bytes));
  HAP_ASSIGN_OR_RETURN(req.prune, ParsePruneFlags(flags, n_visual_tokens));
  HAP_ASSIGN_OR_RETURN(req.stop.max_new_tokens, ParseMaxNewTokens(flags, 64));
  HAP_ASSIGN_OR_RETURN(req.sampling, ParseSamplingFlags(flags));
  if (auto stop = flags.Get("stop")) req.stop.stop_strings.push_back(*stop);
  return req;
}

nlohmann::json PrefillStatsJson(const PrefillStats& s) {
  nlohmann::json stages = nlohmann::json::array();
  for (const PruneStage& st : s.stages) {
    stages.push_back({{"after_layer", st.after_layer},
                      {"visual_tokens_before", st.tokens_before},
                      {"visual_tokens_kept", st.tokens_kept},
                      {"kept_tokens", st.kept_original},
                      {"select_us", st.select_us}});
  }
  return {{"method", s.method},
          {"prompt_tokens", s.prompt_tokens},
          {"text_tokens", s.text_tokens},
          {"visual_tokens", s.visual_tokens},
          {"image_visual_tokens", s.image_visual_tokens},
          {"layer_visual_tokens", s.layer_visual_tokens},
          {"stages", stages},
          {"average_visual_tokens", s.average_visual_tokens},
          {"flops_paper", s.flops_paper},
          {"flops_full", s.flops_full},
          {"unpruned_flops_paper", s.unpruned_flops_paper},
          {"unpruned_flops_full", s.unpruned_flops_full},
          {"kv_bytes", s.kv_bytes},
          {"kv_bytes_unpruned", s.kv_bytes_unpruned},
          {"kv_cache_fraction",
           s.kv_bytes_unpruned > 0 ? static_cast<double>(s.kv_bytes) / s.kv_bytes_unpruned : 0.0},
          {"score_select_ms", s.score_select_ms},
          {"prefill_ms", s.prefill_ms}};
}

nlohmann::json GenerateResultJson(const GenerateResult& r, double load_ms) {
  const StageTimings& t = r.timings;
  nlohmann::json j;
  j["text"] = r.decode.text;
  j["token_ids"] = r.decode.tokens;
  j["finish_reason"] = std::string(FinishReasonName(r.decode.finish));
  j["pruning"] = PrefillStatsJson(r.stats);
  j["timings"] = {{"load_ms", load_ms},
                  {"preprocess_ms", t.preprocess_ms},
                  {"encode_ms", t.encode_ms},
                  {"prefill_ms", t.prefill_ms},
                  {"ttft_ms", t.ttft_ms},
                  {"decode_ms", t.decode_ms},
                  {"total_ms", t.total_ms},
                  {"prefill_tokens_per_s", t.prefill_tokens_per_s},
                  {"decode_tokens_per_s", t.decode_tokens_per_s}};
  return j;
}

void PrintTimings(const GenerateResult& r, double load_ms) {
  const StageTimings& t = r.timings;
  std::printf(
      "-- finish: %s | load %.0f ms | preprocess %.1f ms | encode %.1f ms | prefill %.1f ms "
      "(%d tokens, %.0f tok/s) | decode %zu tokens, %.1f tok/s | TTFT %.1f ms\n",
      std::string(FinishReasonName(r.decode.finish)).c_str(), load_ms, t.preprocess_ms,
      t.encode_ms, t.prefill_ms, r.stats.prompt_tokens, t.prefill_tokens_per_s,
      r.decode.tokens.size(), t.decode_tokens_per_s, t.ttft_ms);
  const PrefillStats& s = r.stats;
  if (s.method != "none") {
    std::printf("-- pruning: %s | visual tokens per layer %.1f of %d | FLOPs %.3g of %.3g (%.1f%%) "
                "| KV %.2f MiB of %.2f MiB | PAQ+select %.2f ms\n",
                s.method.c_str(), s.average_visual_tokens, s.image_visual_tokens, s.flops_full,
                s.unpruned_flops_full, 100.0 * s.flops_full / s.unpruned_flops_full,
                s.kv_bytes / 1048576.0, s.kv_bytes_unpruned / 1048576.0, s.score_select_ms);
  }
}

}  // namespace hap::cli
