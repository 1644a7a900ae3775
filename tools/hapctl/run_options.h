// Generation flags and result printing shared by `hapctl run`, `generate` and `eval`.
#pragma once

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/model/pipeline.h"
#include "tools/hapctl/flags.h"

namespace hap::cli {

// Adds --max-new-tokens --temperature --top-p --top-k --seed --stop.
void AddGenerationFlags(std::set<std::string>* value_flags);

// Reads --image (file) and --prompt plus the generation flags into a request.
absl::StatusOr<GenerateRequest> ParseGenerateRequest(const Flags& flags);

// The --json object: answer text, token ids, finish reason, timings, prefill stats.
nlohmann::json GenerateResultJson(const GenerateResult& result, double load_ms);

// Human-readable timings after a streamed answer.
void PrintTimings(const GenerateResult& result, double load_ms);

// Reads a whole file (NotFound / Unavailable with the path on failure).
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace hap::cli
