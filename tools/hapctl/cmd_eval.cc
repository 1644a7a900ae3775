// hapctl eval: accuracy of a model on a visual-QA folder (questions.jsonl + images, the format
// of data/scenes-test/README.md) with a pruning method and budget, next to the unpruned model.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "base/status_macros.h"
#include "runtime/device/device_backend.h"
#include "runtime/model/pipeline.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"
#include "runtime/io/model_dir.h"
#include "tools/hapctl/run_options.h"

namespace hap::cli {
namespace {

struct Question {
  std::string id, image, question, answer, type;
};

absl::StatusOr<std::vector<Question>> ReadQuestions(const std::string& dir, int64_t limit) {
  const std::string path = (std::filesystem::path(dir) / "questions.jsonl").string();
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrFormat("%s does not exist", path));
  std::vector<Question> out;
  std::string line;
  int line_no = 0;
  while (std::getline(f, line) && (limit <= 0 || static_cast<int64_t>(out.size()) < limit)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s:%d: not a JSON object", path, line_no));
    }
    Question q;
    for (auto [field, dst] : {std::pair{"id", &q.id}, {"image", &q.image},
                              {"question", &q.question}, {"answer", &q.answer}, {"type", &q.type}}) {
      if (!j.contains(field) || !j[field].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s:%d: field '%s' missing or not a string", path, line_no, field));
      }
      *dst = j[field].get<std::string>();
    }
    out.push_back(std::move(q));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrFormat("%s holds no questions", path));
  return out;
}

// Surrounding spaces and a trailing period stripped, lower-cased (data/scenes-test/README.md).
std::string NormaliseAnswer(std::string s) {
  auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  if (!s.empty() && s.back() == '.') s.pop_back();
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct EvalSummary {
  int total = 0, correct = 0;
  std::map<std::string, std::pair<int, int>> per_type;  // type → (correct, total)
  double sum_avg_visual = 0, sum_flops_frac = 0, sum_flops_paper_frac = 0, sum_kv_frac = 0;
  double sum_prefill_ms = 0, sum_select_ms = 0;
  std::vector<nlohmann::json> predictions;
  double accuracy() const { return total ? static_cast<double>(correct) / total : 0; }
};

void Progress(const char* label, int done, int total, int correct) {
  if (!isatty(STDERR_FILENO) && done != total && done % 50 != 0) return;
  const int width = 30;
  const int filled = total ? width * done / total : width;
  std::fprintf(stderr, "\r%-10s [%s%s] %d/%d acc %.1f%%", label, std::string(filled, '#').c_str(),
               std::string(width - filled, '.').c_str(), done, total,
               done ? 100.0 * correct / done : 0.0);
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

absl::StatusOr<EvalSummary> Evaluate(const LlavaModel& model, const std::string& dir,
                                     const std::vector<Question>& questions,
                                     const PruneRequest& prune, int max_new_tokens,
                                     const char* label) {
  EvalSummary s;
  std::map<std::string, EncodeResult> encoded;  // per image: encoding does not depend on text
  for (const Question& q : questions) {
    auto it = encoded.find(q.image);
    if (it == encoded.end()) {
      HAP_ASSIGN_OR_RETURN(std::string bytes,
                           ReadFile((std::filesystem::path(dir) / q.image).string()));
      HAP_ASSIGN_OR_RETURN(EncodeResult enc, EncodeImage(model, bytes, prune));
      if (encoded.size() > 64) encoded.clear();
      it = encoded.emplace(q.image, std::move(enc)).first;
    }
    Sampler sampler(SamplingParams{});
    HAP_ASSIGN_OR_RETURN(PrefillResult prefill,
                         RunPrefill(model, q.question, it->second, prune, &sampler));
    StopCriteria stop;
    stop.max_new_tokens = max_new_tokens;
    HAP_ASSIGN_OR_RETURN(DecodeResult dec, ContinueDecodeLoop(model, &prefill.cache,
                                                             prefill.first_token, sampler, stop,
                                                             nullptr));
    const bool ok = NormaliseAnswer(dec.text) == NormaliseAnswer(q.answer);
    const PrefillStats& st = prefill.stats;
    s.total++;
    s.correct += ok;
    s.per_type[q.type].first += ok;
    s.per_type[q.type].second++;
    s.sum_avg_visual += st.average_visual_tokens;
    s.sum_flops_frac += st.flops_full / st.unpruned_flops_full;
    s.sum_flops_paper_frac += st.flops_paper / st.unpruned_flops_paper;
    s.sum_kv_frac += static_cast<double>(st.kv_bytes) / st.kv_bytes_unpruned;
    s.sum_prefill_ms += st.prefill_ms;
    s.sum_select_ms += st.score_select_ms;
    s.predictions.push_back({{"id", q.id}, {"type", q.type}, {"answer", q.answer},
                             {"prediction", dec.text}, {"correct", ok}, {"tokens", dec.tokens}});
    Progress(label, s.total, static_cast<int>(questions.size()), s.correct);
  }
  return s;
}

nlohmann::json SummaryJson(const EvalSummary& s) {
  nlohmann::json per_type = nlohmann::json::object();
  for (const auto& [type, ct] : s.per_type) {
    per_type[type] = {{"accuracy", static_cast<double>(ct.first) / ct.second},
                      {"correct", ct.first},
                      {"total", ct.second}};
  }
  const double n = std::max(1, s.total);
  return {{"accuracy", s.accuracy()},
          {"correct", s.correct},
          {"total", s.total},
          {"per_type", per_type},
          {"average_visual_tokens", s.sum_avg_visual / n},
          {"flops_full", s.sum_flops_frac / n},
          {"flops_paper", s.sum_flops_paper_frac / n},
          {"kv_cache_fraction", s.sum_kv_frac / n},
          {"mean_prefill_ms", s.sum_prefill_ms / n},
          {"mean_score_select_ms", s.sum_select_ms / n}};
}

absl::Status Eval(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(std::string data, flags.Required("data"));
  HAP_ASSIGN_OR_RETURN(int64_t limit, flags.Int("limit", 0));
  HAP_ASSIGN_OR_RETURN(int64_t max_new, flags.Int("max-new-tokens", 4));
  HAP_ASSIGN_OR_RETURN(int64_t threads, flags.Int("threads", 0));
  ModelOptions options;
  options.threads = static_cast<int>(threads);
  HAP_ASSIGN_OR_RETURN(options.backend, BackendForDevice(DeviceFlag(flags)));
  HAP_ASSIGN_OR_RETURN(auto model, LlavaModel::Load(ResolveModelDir(flags.GetOr("model", "")), options));
  HAP_ASSIGN_OR_RETURN(PruneRequest prune, ParsePruneFlags(flags, model->config().num_visual_tokens()));
  HAP_RETURN_IF_ERROR(ValidateRequest(*model, "What is it?", prune));
  HAP_ASSIGN_OR_RETURN(std::vector<Question> questions, ReadQuestions(data, limit));

  HAP_ASSIGN_OR_RETURN(EvalSummary pruned, Evaluate(*model, data, questions, prune,
                                                    static_cast<int>(max_new), prune.method.c_str()));
  nlohmann::json out = SummaryJson(pruned);
  out["method"] = prune.method;
  if (prune.retain) out["retain"] = *prune.retain;
  if (prune.flops) out["flops_budget"] = *prune.flops;
  if (prune.method != "none" && !flags.Bool("no-baseline")) {
    PruneRequest none;
    none.method = "none";
    HAP_ASSIGN_OR_RETURN(EvalSummary base, Evaluate(*model, data, questions, none,
                                                    static_cast<int>(max_new), "unpruned"));
    out["unpruned_accuracy"] = base.accuracy();
    out["relative_score"] = base.accuracy() > 0 ? pruned.accuracy() / base.accuracy() : 0.0;
  }
  if (auto pred_path = flags.Get("predictions")) {
    std::ofstream f(*pred_path);
    for (const auto& p : pruned.predictions) f << p.dump() << "\n";
    if (!f) return absl::UnavailableError(absl::StrFormat("cannot write %s", *pred_path));
  }
  if (flags.Bool("json")) {
    std::printf("%s\n", out.dump().c_str());
    return absl::OkStatus();
  }
  std::printf("method %s: accuracy %.2f%% (%d/%d)", prune.method.c_str(), 100 * pruned.accuracy(),
              pruned.correct, pruned.total);
  if (out.contains("relative_score")) {
    std::printf(" | unpruned %.2f%% | relative %.1f%%", 100 * out["unpruned_accuracy"].get<double>(),
                100 * out["relative_score"].get<double>());
  }
  std::printf("\n");
  for (const auto& [type, ct] : pruned.per_type) {
    std::printf("  %-8s %.2f%% (%d/%d)\n", type.c_str(), 100.0 * ct.first / ct.second, ct.first,
                ct.second);
  }
  std::printf("average visual tokens per layer %.2f of %d | FLOPs %.1f%% (full), %.1f%% (paper) | "
              "KV %.1f%% | mean prefill %.2f ms (PAQ+select %.3f ms)\n",
              out["average_visual_tokens"].get<double>(), model->config().num_visual_tokens(),
              100 * out["flops_full"].get<double>(), 100 * out["flops_paper"].get<double>(),
              100 * out["kv_cache_fraction"].get<double>(), out["mean_prefill_ms"].get<double>(),
              out["mean_score_select_ms"].get<double>());
  return absl::OkStatus();
}

int CmdEval(const std::vector<std::string>& args) {
  auto flags = Flags::Parse(args,
                            {"model", "data", "method", "retain", "flops", "seed", "limit",
                             "max-new-tokens", "predictions", "threads", "device"},
                            {"json", "no-baseline"});
  if (!flags.ok()) return Fail("eval", flags.status());
  if (absl::Status s = Eval(*flags); !s.ok()) return Fail("eval", s);
  return 0;
}

}  // namespace

HAP_COMMAND(eval, "Accuracy on a visual-QA folder with a pruning method, next to unpruned", CmdEval);

}  // namespace hap::cli
