// Generation flags and result printing shared by `hapctl run`, `generate` and `eval`.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/model/pipeline.h"
#include "tools/hapctl/flags.h"

namespace hap::cli {

// Adds --max-new-tokens --temperature --top-p --top-k --seed --stop and the pruning flags
// --method --retain --flops.
void AddGenerationFlags(std::set<std::string>* value_flags);

// Reads --image (file) and --prompt plus the generation and pruning flags into a request.
// `n_visual_tokens` (V of the model) resolves a "--retain 5.6%" percentage.
absl::StatusOr<GenerateRequest> ParseGenerateRequest(const Flags& flags, int n_visual_tokens);
// The same with V taken from the image (a Qwen2.5-VL image's count follows its size).
absl::StatusOr<GenerateRequest> ParseGenerateRequest(
    const Flags& flags,
    const std::function<absl::StatusOr<int>(std::string_view image)>& visual_tokens_of);

// --max-new-tokens (`default_value` when absent), checked to be in [1, 1048576].
absl::StatusOr<int> ParseMaxNewTokens(const Flags& flags, int default_value);

// --kv-dtype f32|bf16 (default f32, as hap-prefill and hap-decode): what the KV cache holds
// (ModelOptions::kv_dtype). `run`, `eval`, `dump` and `up` take it.
absl::StatusOr<DType> ParseKvDTypeFlag(const Flags& flags);
// --attention-dtype auto|f32|bf16|f16 (default auto): ModelOptions::attention_dtype.
absl::StatusOr<std::optional<DType>> ParseAttentionDTypeFlag(const Flags& flags);
// --decode-graphs on|off (default on, as hap-decode): ModelOptions::decode_graphs.
absl::StatusOr<bool> ParseDecodeGraphsFlag(const Flags& flags);

// The sampling flags --temperature --top-p --top-k --seed, checked (ValidateSamplingParams).
absl::StatusOr<SamplingParams> ParseSamplingFlags(const Flags& flags);

// Just the pruning flags: --method (default "none", or "hap" when a budget is given),
// --retain K|P% / --flops F, and --paq-temperature T (default 1; hap and hap-flat only, in
// [0.01, 100]: ValidatePaqTemperature).
absl::StatusOr<PruneRequest> ParsePruneFlags(const Flags& flags, int n_visual_tokens);

// Per-request pruning stats as JSON (kept tokens per stage, averages, FLOPs, KV bytes, timing).
nlohmann::json PrefillStatsJson(const PrefillStats& stats);

// The --json object: answer text, token ids, finish reason, timings, prefill stats.
nlohmann::json GenerateResultJson(const GenerateResult& result, double load_ms);

// Human-readable timings after a streamed answer.
void PrintTimings(const GenerateResult& result, double load_ms);

// Reads a whole file (NotFound / Unavailable with the path on failure).
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Creates `dir` and its parents (Unavailable with the path and the OS's reason on failure).
absl::Status CreateDirectories(const std::string& dir);

}  // namespace hap::cli
