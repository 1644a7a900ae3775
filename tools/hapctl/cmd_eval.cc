// hapctl eval: accuracy of a model on a visual-QA folder (questions.jsonl + images, the format
// of data/scenes-test/README.md) with a pruning method and budget, next to the unpruned model;
// or, with --question-file, LLaVA's evaluation question files in and its answer files out
// (tools/hapctl/llava_eval_files.h), for the benchmarks' own scoring scripts.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "base/timer.h"
#include "nlohmann/json.hpp"
#include "runtime/device/device_backend.h"
#include "runtime/io/model_dir.h"
#include "runtime/io/qwen_config.h"
#include "runtime/model/pipeline.h"
#include "runtime/model/vision_language_model.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"
#include "tools/hapctl/llava_eval_files.h"
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
    for (auto [field, dst] : {std::pair{"id", &q.id},
                              {"image", &q.image},
                              {"question", &q.question},
                              {"answer", &q.answer},
                              {"type", &q.type}}) {
      if (!j.contains(field) || !j[field].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s:%d: field '%s' missing or not a string", path, line_no, field));
      }
      *dst = j[field].get<std::string>();
    }
    out.push_back(std::move(q));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s holds no questions", path));
  }
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

// One JSONL line; bytes that are not UTF-8 (a model can emit a partial character) become U+FFFD
// instead of throwing.
template <typename Json>
std::string DumpLine(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

struct EvalSummary {
  int total = 0, correct = 0;
  std::map<std::string, std::pair<int, int>> per_type;  // type → (correct, total)
  double sum_avg_visual = 0, sum_flops_frac = 0, sum_flops_paper_frac = 0, sum_kv_frac = 0;
  double sum_prefill_ms = 0, sum_select_ms = 0;
  double sum_image_visual = 0;  // V of each question's image (Qwen2.5-VL's follows its size)
  std::vector<nlohmann::json> predictions;
  double accuracy() const { return total ? static_cast<double>(correct) / total : 0; }
};

// "1h02m", "3m05s", "12s".
std::string FormatDuration(double seconds) {
  const int64_t t = static_cast<int64_t>(seconds + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, t / 60 % 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

// Progress on stderr: done/total, questions per second, ETA (and accuracy when known). Redrawn
// in place on a terminal; otherwise (a log file) one line every 10 s and one at the end.
class Progress {
 public:
  Progress(std::string label, int total)
      : label_(std::move(label)), total_(total), tty_(isatty(STDERR_FILENO)) {}

  // `correct` < 0: no accuracy to show.
  void Update(int done, int correct = -1) {
    const auto now = Clock::now();
    if (!tty_ && done != total_ && MsBetween(last_print_, now) < 10e3) return;
    last_print_ = now;
    const double elapsed_s = MsBetween(start_, now) / 1e3;
    const double rate = elapsed_s > 0 ? done / elapsed_s : 0;
    const int width = 30;
    const int filled = total_ ? width * done / total_ : width;
    std::string line =
        absl::StrFormat("%-10s [%s%s] %d/%d %.2f q/s", label_, std::string(filled, '#'),
                        std::string(width - filled, '.'), done, total_, rate);
    if (done < total_ && rate > 0) {
      absl::StrAppend(&line, " ETA ", FormatDuration((total_ - done) / rate));
    } else if (done == total_) {
      absl::StrAppend(&line, " in ", FormatDuration(elapsed_s));
    }
    if (correct >= 0) {
      absl::StrAppendFormat(&line, " acc %.1f%%", done ? 100.0 * correct / done : 0.0);
    }
    // On a terminal: back to the line's start, the line, then clear what a longer one left.
    std::fprintf(stderr, tty_ ? "\r%s\033[K" : "%s\n", line.c_str());
    if (tty_ && done == total_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  std::string label_;
  int total_;
  bool tty_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_print_ = start_;
};

// A request's pruning for an image of `visual_tokens` (a budget in % is of them).
using PruneFor = std::function<absl::StatusOr<PruneRequest>(int visual_tokens)>;

absl::StatusOr<EvalSummary> Evaluate(const VisionLanguageModel& model, const std::string& dir,
                                     const std::vector<Question>& questions,
                                     const PruneFor& prune_for, int max_new_tokens,
                                     const char* label) {
  EvalSummary s;
  Progress progress(label, static_cast<int>(questions.size()));
  struct Encoded {
    PruneRequest prune;
    EncodeResult image;
  };
  // Per image: encoding does not depend on the question.
  std::map<std::string, Encoded> encoded;
  for (const Question& q : questions) {
    auto it = encoded.find(q.image);
    if (it == encoded.end()) {
      HAP_ASSIGN_OR_RETURN(std::string bytes,
                           ReadFile((std::filesystem::path(dir) / q.image).string()));
      Encoded e;
      HAP_ASSIGN_OR_RETURN(const int visual_tokens, model.VisualTokensOf(bytes));
      HAP_ASSIGN_OR_RETURN(e.prune, prune_for(visual_tokens));
      HAP_ASSIGN_OR_RETURN(e.image, model.EncodeImage(bytes, e.prune));
      if (encoded.size() > 64) encoded.clear();
      it = encoded.emplace(q.image, std::move(e)).first;
    }
    const PruneRequest& prune = it->second.prune;
    Sampler sampler(SamplingParams{});
    HAP_ASSIGN_OR_RETURN(PrefillResult prefill, model.RunPrefill(q.question, it->second.image,
                                                                 prune, &sampler, max_new_tokens));
    StopCriteria stop;
    stop.max_new_tokens = max_new_tokens;
    HAP_ASSIGN_OR_RETURN(DecodeResult dec,
                         ContinueDecodeLoop(model.language(), &prefill.kv(), prefill.first_token,
                                            sampler, stop, nullptr));
    const bool ok = NormaliseAnswer(dec.text) == NormaliseAnswer(q.answer);
    const PrefillStats& st = prefill.stats;
    s.total++;
    s.correct += ok;
    s.per_type[q.type].first += ok;
    s.per_type[q.type].second++;
    s.sum_avg_visual += st.average_visual_tokens;
    s.sum_image_visual += st.image_visual_tokens;
    s.sum_flops_frac += st.flops_full / st.unpruned_flops_full;
    s.sum_flops_paper_frac += st.flops_paper / st.unpruned_flops_paper;
    s.sum_kv_frac += static_cast<double>(st.kv_bytes) / st.kv_bytes_unpruned;
    s.sum_prefill_ms += st.prefill_ms;
    s.sum_select_ms += st.score_select_ms;
    s.predictions.push_back({{"id", q.id},
                             {"type", q.type},
                             {"answer", q.answer},
                             {"prediction", dec.text},
                             {"correct", ok},
                             {"tokens", dec.tokens}});
    progress.Update(s.total, s.correct);
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
          {"average_image_visual_tokens", s.sum_image_visual / n},
          {"flops_full", s.sum_flops_frac / n},
          {"flops_paper", s.sum_flops_paper_frac / n},
          {"kv_cache_fraction", s.sum_kv_frac / n},
          {"mean_prefill_ms", s.sum_prefill_ms / n},
          {"mean_score_select_ms", s.sum_select_ms / n}};
}

// --model (or the default model) on --device with --threads, its KV caches in --kv-dtype.
absl::StatusOr<ModelOptions> LoadOptions(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(int64_t threads, flags.Int("threads", 0));
  ModelOptions options;
  options.threads = static_cast<int>(threads);
  HAP_ASSIGN_OR_RETURN(options.kv_dtype, ParseKvDTypeFlag(flags));
  HAP_ASSIGN_OR_RETURN(options.attention_dtype, ParseAttentionDTypeFlag(flags));
  HAP_ASSIGN_OR_RETURN(options.backend, BackendForDevice(DeviceFlag(flags)));
  return options;
}

absl::Status EvalFolder(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(std::string data, flags.Required("data"));
  HAP_ASSIGN_OR_RETURN(int64_t limit, flags.Int("limit", 0));
  HAP_ASSIGN_OR_RETURN(int64_t max_new, flags.Int("max-new-tokens", 4));
  HAP_ASSIGN_OR_RETURN(ModelOptions options, LoadOptions(flags));
  HAP_ASSIGN_OR_RETURN(
      std::unique_ptr<VisionLanguageModel> model,
      VisionLanguageModel::Load(ResolveModelDir(flags.GetOr("model", "")), options));
  HAP_ASSIGN_OR_RETURN(std::vector<Question> questions, ReadQuestions(data, limit));
  // The budget as given, checked before any work on the first question's image (or, with no
  // questions, one of the model's reference size); a budget in % is resolved again for each
  // image's own visual tokens (they differ on Qwen2.5-VL).
  int reference_tokens = 0;
  if (questions.empty()) {
    HAP_ASSIGN_OR_RETURN(reference_tokens, model->reference_visual_tokens());
  } else {
    HAP_ASSIGN_OR_RETURN(std::string bytes,
                         ReadFile((std::filesystem::path(data) / questions[0].image).string()));
    HAP_ASSIGN_OR_RETURN(reference_tokens, model->VisualTokensOf(bytes));
  }
  HAP_ASSIGN_OR_RETURN(PruneRequest prune, ParsePruneFlags(flags, reference_tokens));
  HAP_RETURN_IF_ERROR(model->ValidateRequest("What is it?", prune, reference_tokens));
  const PruneFor pruned_for = [&flags](int visual_tokens) {
    return ParsePruneFlags(flags, visual_tokens);
  };

  HAP_ASSIGN_OR_RETURN(EvalSummary pruned,
                       Evaluate(*model, data, questions, pruned_for, static_cast<int>(max_new),
                                prune.method.c_str()));
  nlohmann::json out = SummaryJson(pruned);
  out["method"] = prune.method;
  out["paq_temperature"] = prune.paq_temperature;
  if (prune.retain) out["retain"] = *prune.retain;
  if (prune.flops) out["flops_budget"] = *prune.flops;
  if (prune.method != "none" && !flags.Bool("no-baseline")) {
    PruneRequest none;
    none.method = "none";
    HAP_ASSIGN_OR_RETURN(EvalSummary base,
                         Evaluate(
                             *model, data, questions, [&none](int) { return none; },
                             static_cast<int>(max_new), "unpruned"));
    out["unpruned_accuracy"] = base.accuracy();
    out["relative_score"] = base.accuracy() > 0 ? pruned.accuracy() / base.accuracy() : 0.0;
  }
  if (auto pred_path = flags.Get("predictions")) {
    std::ofstream f(*pred_path);
    for (const auto& p : pruned.predictions) f << DumpLine(p) << "\n";
    if (!f) return absl::UnavailableError(absl::StrFormat("cannot write %s", *pred_path));
  }
  if (flags.Bool("json")) {
    std::printf("%s\n", out.dump().c_str());
    return absl::OkStatus();
  }
  std::printf("method %s: accuracy %.2f%% (%d/%d)", prune.method.c_str(), 100 * pruned.accuracy(),
              pruned.correct, pruned.total);
  if (out.contains("relative_score")) {
    std::printf(" | unpruned %.2f%% | relative %.1f%%",
                100 * out["unpruned_accuracy"].get<double>(),
                100 * out["relative_score"].get<double>());
  }
  std::printf("\n");
  for (const auto& [type, ct] : pruned.per_type) {
    std::printf("  %-8s %.2f%% (%d/%d)\n", type.c_str(), 100.0 * ct.first / ct.second, ct.first,
                ct.second);
  }
  std::printf(
      "average visual tokens per layer %.2f of %.4g | FLOPs %.1f%% (full), %.1f%% (paper) | "
      "KV %.1f%% | mean prefill %.2f ms (PAQ+select %.3f ms)\n",
      out["average_visual_tokens"].get<double>(), out["average_image_visual_tokens"].get<double>(),
      100 * out["flops_full"].get<double>(), 100 * out["flops_paper"].get<double>(),
      100 * out["kv_cache_fraction"].get<double>(), out["mean_prefill_ms"].get<double>(),
      out["mean_score_select_ms"].get<double>());
  return absl::OkStatus();
}

// --- LLaVA question files (--question-file) ----------------------------------------------------

struct LlavaEvalOptions {
  std::string question_file, image_folder, answers_pattern, model_id;
  ConvMode conv = ConvMode::kLlavaHf;
  SamplingParams sampling;
  StopCriteria stop;
  DType kv_dtype = DType::kF32;  // --kv-dtype: BF16 rows can change an answer
};

// The methods of --method: one name, a comma-separated list, or "all" (PruneMethods()).
absl::StatusOr<std::vector<std::string>> MethodList(const std::string& arg) {
  if (arg == "all") return PruneMethods();
  std::vector<std::string> out;
  for (absl::string_view m : absl::StrSplit(arg, ',', absl::SkipWhitespace())) {
    std::string name(absl::StripAsciiWhitespace(m));
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(std::move(name));
  }
  if (out.empty()) return absl::InvalidArgumentError("--method names no method");
  return out;
}

// "FILE:LINE (question_id ID): message", keeping the status code.
absl::Status AtQuestion(const absl::Status& s, const LlavaEvalOptions& o, const LlavaQuestion& q) {
  return absl::Status(s.code(), absl::StrFormat("%s:%d (question_id %s): %s", o.question_file,
                                                q.line, q.question_id.dump(), s.message()));
}

// Everything that shapes an answer besides the question, for AnswerId: a rerun with the same
// settings gives the same ids, any other run different ones.
std::string RunKey(const LlavaEvalOptions& o, const PruneRequest& prune) {
  return absl::StrCat(
      o.model_id, "|", prune.method, "|", prune.retain ? *prune.retain : -1, "|",
      prune.flops ? *prune.flops : -1, "|", prune.seed, "|", ConvModeName(o.conv), "|",
      o.sampling.temperature, "|", o.sampling.top_p, "|", o.sampling.top_k, "|", o.sampling.seed,
      "|", o.stop.max_new_tokens,
      // Only a non-default τ or KV dtype joins the key, so the defaults keep the earlier ids.
      prune.paq_temperature != 1.0 ? absl::StrCat("|tau", prune.paq_temperature) : std::string(),
      o.kv_dtype != DType::kF32 ? absl::StrCat("|kv", std::string(DTypeName(o.kv_dtype)))
                                : std::string());
}

// The question's prompt: its text for the llava-hf template, or the whole vicuna_v1 prompt
// rendered into `storage` (which must outlive the returned view).
PromptText PromptFor(const LlavaQuestion& q, ConvMode conv, std::string* storage) {
  if (conv == ConvMode::kLlavaHf) return PromptText(q.text);
  *storage = RenderVicunaV1(q.text);
  return PromptText::Rendered(*storage);
}

struct MethodTotals {
  int answers = 0;
  double sum_avg_visual = 0, sum_flops_full = 0, sum_flops_paper = 0, sum_ms = 0;
};

// Answers every question with one method, appending each answer line to `path` as it completes.
absl::StatusOr<MethodTotals> AnswerAll(const LlavaModel& model, const LlavaEvalOptions& o,
                                       const std::vector<LlavaQuestion>& questions,
                                       const PruneRequest& prune, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write answers file '", path, "'"));
  const std::string run_key = RunKey(o, prune);
  MethodTotals totals;
  Progress progress(prune.method, static_cast<int>(questions.size()));
  std::map<std::string, EncodeResult> encoded;  // per image: encoding does not depend on text
  for (const LlavaQuestion& q : questions) {
    const auto t0 = Clock::now();
    auto it = encoded.find(q.image);
    if (it == encoded.end()) {
      auto bytes = ReadFile((std::filesystem::path(o.image_folder) / q.image).string());
      if (!bytes.ok()) return AtQuestion(bytes.status(), o, q);
      auto enc = EncodeImage(model, *bytes, prune);
      if (!enc.ok()) return AtQuestion(enc.status(), o, q);
      if (encoded.size() > 64) encoded.clear();
      it = encoded.emplace(q.image, *std::move(enc)).first;
    }
    std::string storage;
    Sampler sampler(o.sampling);
    auto prefill = RunPrefill(model, PromptFor(q, o.conv, &storage), it->second, prune, &sampler,
                              o.stop.max_new_tokens);
    if (!prefill.ok()) return AtQuestion(prefill.status(), o, q);
    auto dec =
        ContinueDecodeLoop(model, &prefill->kv(), prefill->first_token, sampler, o.stop, nullptr);
    if (!dec.ok()) return AtQuestion(dec.status(), o, q);

    AnswerRun run;
    run.prune = &prune;
    run.conv = o.conv;
    run.stats = &prefill->stats;
    run.decode = &*dec;
    run.elapsed_ms = MsSince(t0);
    const std::string answer_id =
        AnswerId(absl::StrCat(run_key, "|", q.question_id.dump(), "|", q.line));
    out << DumpLine(AnswerLine(q, answer_id, o.model_id, run)) << "\n";
    out.flush();  // a long run can be inspected (and scored) while it goes on
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write answers file '", path, "'"));

    const PrefillStats& st = prefill->stats;
    totals.answers++;
    totals.sum_avg_visual += st.average_visual_tokens;
    totals.sum_flops_full += st.flops_full / st.unpruned_flops_full;
    totals.sum_flops_paper += st.flops_paper / st.unpruned_flops_paper;
    totals.sum_ms += run.elapsed_ms;
    progress.Update(totals.answers);
  }
  return totals;
}

absl::Status EvalLlavaFiles(const Flags& flags) {
  LlavaEvalOptions o;
  HAP_ASSIGN_OR_RETURN(o.question_file, flags.Required("question-file"));
  HAP_ASSIGN_OR_RETURN(o.image_folder, flags.Required("image-folder"));
  HAP_ASSIGN_OR_RETURN(o.answers_pattern, flags.Required("answers-file"));
  HAP_ASSIGN_OR_RETURN(o.conv, ParseConvMode(flags.GetOr("conv-mode", "llava_hf")));
  HAP_ASSIGN_OR_RETURN(int64_t limit, flags.Int("limit", 0));
  HAP_ASSIGN_OR_RETURN(int64_t num_chunks, flags.Int("num-chunks", 1));
  HAP_ASSIGN_OR_RETURN(int64_t chunk_idx, flags.Int("chunk-idx", 0));
  HAP_ASSIGN_OR_RETURN(o.stop.max_new_tokens, ParseMaxNewTokens(flags, 128));
  HAP_ASSIGN_OR_RETURN(o.sampling, ParseSamplingFlags(flags));

  // Questions first: a bad file fails before the model loads.
  HAP_ASSIGN_OR_RETURN(std::vector<LlavaQuestion> questions,
                       ReadLlavaQuestions(o.question_file, o.image_folder));
  HAP_ASSIGN_OR_RETURN(questions, TakeChunk(std::move(questions), static_cast<int>(num_chunks),
                                            static_cast<int>(chunk_idx)));
  if (limit > 0 && static_cast<int64_t>(questions.size()) > limit) questions.resize(limit);
  if (questions.empty()) {  // a chunk past the end, as LLaVA's split gives: empty answer files
    std::fprintf(stderr, "hapctl eval: chunk %d of %d of %s holds no questions\n",
                 static_cast<int>(chunk_idx), static_cast<int>(num_chunks),
                 o.question_file.c_str());
  }

  const std::string model_dir = ResolveModelDir(flags.GetOr("model", ""));
  o.model_id = ModelIdOf(model_dir);
  if (IsQwen25VLDirectory(model_dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_dir,
                     " is a Qwen2.5-VL directory; --question-file renders LLaVA's conversation "
                     "modes (llava_hf, vicuna_v1): evaluate it with --data"));
  }
  HAP_ASSIGN_OR_RETURN(ModelOptions options, LoadOptions(flags));
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<LlavaModel> model, LlavaModel::Load(model_dir, options));
  o.kv_dtype = model->options().kv_dtype;
  HAP_ASSIGN_OR_RETURN(PruneRequest base,
                       ParsePruneFlags(flags, model->config().num_visual_tokens()));
  HAP_ASSIGN_OR_RETURN(std::vector<std::string> methods, MethodList(base.method));
  if (methods.size() > 1 && o.answers_pattern.find("{method}") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--answers-file needs a {method} placeholder for ", methods.size(),
                     " methods, e.g. ", "answers/{method}.jsonl"));
  }

  // Every method's request and answers file, checked before any answer is computed.
  std::vector<std::pair<PruneRequest, std::string>> runs;
  for (const std::string& m : methods) {
    PruneRequest prune = base;
    prune.method = m;
    if (m == "none") prune.retain = prune.flops = std::nullopt;          // no budget to report
    HAP_RETURN_IF_ERROR(ValidateRequest(*model, "What is it?", prune));  // method and budget
    if (!questions.empty()) {  // the template and a FLOPs budget with real text
      std::string storage;
      const LlavaQuestion& first = questions.front();
      if (absl::Status s = ValidateRequest(*model, PromptFor(first, o.conv, &storage), prune);
          !s.ok()) {
        return AtQuestion(s, o, first);
      }
    }
    const std::string path = AnswersPathFor(o.answers_pattern, m);
    std::error_code ec;
    if (std::filesystem::equivalent(path, o.question_file, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--answers-file '", path, "' is the question file"));
    }
    const auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (!std::ofstream(path, std::ios::app)) {  // creates it; AnswerAll truncates it
      return absl::UnavailableError(absl::StrCat("cannot write answers file '", path, "'"));
    }
    runs.emplace_back(std::move(prune), path);
  }

  for (const auto& [prune, path] : runs) {
    HAP_ASSIGN_OR_RETURN(MethodTotals t, AnswerAll(*model, o, questions, prune, path));
    const double n = std::max(1, t.answers);
    std::printf(
        "%s: %d answers -> %s | average visual tokens per layer %.2f of %d | FLOPs %.1f%% "
        "(full), %.1f%% (paper) | %.1f ms per answer\n",
        prune.method.c_str(), t.answers, path.c_str(), t.sum_avg_visual / n,
        model->config().num_visual_tokens(), 100 * t.sum_flops_full / n,
        100 * t.sum_flops_paper / n, t.sum_ms / n);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

constexpr char kUsage[] =
    "usage: hapctl eval [--model DIR] --data DIR [--method M] [--retain K|P% | --flops F]\n"
    "         [--limit N] [--max-new-tokens N (4)] [--predictions FILE] [--json] [--no-baseline]\n"
    "         [--seed S] [--threads N] [--device cpu|cuda] [--kv-dtype f32|bf16]\n"
    "         [--attention-dtype auto|f32|bf16|f16]\n"
    "       hapctl eval [--model DIR] --question-file FILE --image-folder DIR --answers-file OUT\n"
    "         [--method M|M1,M2,...|all] [--retain K|P% | --flops F] [--limit N]\n"
    "         [--max-new-tokens N (128)] [--temperature T] [--top-p P] [--top-k K] [--seed S]\n"
    "         [--conv-mode llava_hf|vicuna_v1] [--num-chunks N --chunk-idx K]\n"
    "         [--threads N] [--device cpu|cuda] [--kv-dtype f32|bf16]\n"
    "         [--attention-dtype auto|f32|bf16|f16]\n"
    "\n"
    "--data: a visual-QA folder (questions.jsonl + images, data/scenes-test/README.md); prints\n"
    "accuracy next to the unpruned model's. --question-file: a LLaVA question file (question_id,\n"
    "image, text per line); writes LLaVA's answer file, one line per answer as it completes.\n"
    "With several methods, OUT holds {method}: answers/{method}.jsonl. See docs/llava-eval.md.\n"
    "--kv-dtype: what the KV cache holds (default f32; bf16 halves it, as hapctl run's).\n"
    "--attention-dtype: the prefill's and vision tower's attention operands (auto: the weights'\n"
    "type on cuda, f32 on cpu; docs/design.md §6).\n";

// Flags that belong to one of the two modes only.
const std::vector<std::string> kFolderOnly = {"data", "predictions", "json", "no-baseline"};
const std::vector<std::string> kLlavaOnly = {"question-file", "image-folder", "answers-file",
                                             "conv-mode",     "temperature",  "top-p",
                                             "top-k",         "num-chunks",   "chunk-idx"};

int CmdEval(const std::vector<std::string>& args) {
  auto flags =
      Flags::Parse(args, {"model",           "data",         "method",         "retain",
                          "flops",           "seed",         "limit",          "max-new-tokens",
                          "predictions",     "threads",      "device",         "question-file",
                          "image-folder",    "answers-file", "conv-mode",      "temperature",
                          "top-p",           "top-k",        "num-chunks",     "chunk-idx",
                          "paq-temperature", "kv-dtype",     "attention-dtype"},
                   {"json", "no-baseline", "help"});
  if (!flags.ok()) return Fail("eval", flags.status());
  if (flags->Bool("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const bool llava = flags->Has("question-file");
  for (const std::string& f : llava ? kFolderOnly : kLlavaOnly) {
    if (flags->Has(f)) {
      return Fail("eval", absl::InvalidArgumentError(
                              llava ? absl::StrCat("--", f, " is for --data, not --question-file")
                                    : absl::StrCat("--", f, " needs --question-file")));
    }
  }
  if (absl::Status s = llava ? EvalLlavaFiles(*flags) : EvalFolder(*flags); !s.ok()) {
    return Fail("eval", s);
  }
  return 0;
}

}  // namespace

HAP_COMMAND(eval, "Accuracy on a visual-QA folder, or LLaVA question file to answer file", CmdEval);

}  // namespace hap::cli
