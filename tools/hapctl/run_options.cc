#include "tools/hapctl/run_options.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "runtime/common/status_macros.h"

namespace hap::cli {

void AddGenerationFlags(std::set<std::string>* value_flags) {
  value_flags->insert({"max-new-tokens", "temperature", "top-p", "top-k", "seed", "stop"});
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

absl::StatusOr<GenerateRequest> ParseGenerateRequest(const Flags& flags) {
  GenerateRequest req;
  HAP_ASSIGN_OR_RETURN(std::string image_path, flags.Required("image"));
  HAP_ASSIGN_OR_RETURN(req.prompt, flags.Required("prompt"));
  HAP_ASSIGN_OR_RETURN(req.image_bytes, ReadFile(image_path));
  HAP_ASSIGN_OR_RETURN(int64_t max_new, flags.Int("max-new-tokens", 64));
  if (max_new < 1 || max_new > 1 << 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-new-tokens must be in [1, 1048576], got ", max_new));
  }
  req.stop.max_new_tokens = static_cast<int>(max_new);
  HAP_ASSIGN_OR_RETURN(double temperature, flags.Double("temperature", 0.0));
  HAP_ASSIGN_OR_RETURN(double top_p, flags.Double("top-p", 1.0));
  HAP_ASSIGN_OR_RETURN(int64_t top_k, flags.Int("top-k", 0));
  HAP_ASSIGN_OR_RETURN(req.sampling.seed, flags.Uint64("seed", 0));
  req.sampling.temperature = static_cast<float>(temperature);
  req.sampling.top_p = static_cast<float>(top_p);
  req.sampling.top_k = static_cast<int>(top_k);
  HAP_RETURN_IF_ERROR(ValidateSamplingParams(req.sampling));
  if (auto stop = flags.Get("stop")) req.stop.stop_strings.push_back(*stop);
  return req;
}

nlohmann::json GenerateResultJson(const GenerateResult& r, double load_ms) {
  const StageTimings& t = r.timings;
  nlohmann::json j;
  j["text"] = r.decode.text;
  j["token_ids"] = r.decode.tokens;
  j["finish_reason"] = std::string(FinishReasonName(r.decode.finish));
  j["prompt_tokens"] = r.prompt_tokens;
  j["visual_tokens"] = r.visual_tokens;
  j["kv_bytes"] = r.kv_bytes;
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
      t.encode_ms, t.prefill_ms, r.prompt_tokens, t.prefill_tokens_per_s, r.decode.tokens.size(),
      t.decode_tokens_per_s, t.ttft_ms);
}

}  // namespace hap::cli
