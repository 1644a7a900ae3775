#include "tools/hapctl/llava_eval_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace hap::cli {
namespace {

// InvalidArgument "FILE:LINE: field 'NAME' ..." for a field that is absent or of the wrong type.
absl::Status FieldError(const std::string& path, int line, const char* field,
                        const nlohmann::ordered_json& obj, const char* wanted) {
  if (!obj.contains(field)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d: field '%s' is missing", path, line, field));
  }
  return absl::InvalidArgumentError(absl::StrFormat("%s:%d: field '%s' must be %s, not %s", path,
                                                    line, field, wanted, obj[field].type_name()));
}

}  // namespace

absl::StatusOr<std::vector<LlavaQuestion>> ReadLlavaQuestions(const std::string& path,
                                                              const std::string& image_folder) {
  std::error_code ec;
  if (!std::filesystem::is_directory(image_folder, ec)) {
    return absl::NotFoundError(
        absl::StrCat("--image-folder '", image_folder, "' is not a directory"));
  }
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("question file '", path, "' does not exist"));
  std::vector<LlavaQuestion> out;
  std::string text;
  int line = 0;
  while (std::getline(f, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s:%d: not a JSON object", path, line));
    }
    LlavaQuestion q;
    q.line = line;
    if (!j.contains("question_id") ||
        !(j["question_id"].is_string() || j["question_id"].is_number_integer())) {
      return FieldError(path, line, "question_id", j, "a string or an integer");
    }
    q.question_id = j["question_id"];
    for (auto [field, dst] : {std::pair{"image", &q.image}, {"text", &q.text}}) {
      if (!j.contains(field) || !j[field].is_string()) {
        return FieldError(path, line, field, j, "a string");
      }
      *dst = j[field].get<std::string>();
    }
    if (j.contains("category")) {
      if (!j["category"].is_string()) return FieldError(path, line, "category", j, "a string");
      q.category = j["category"].get<std::string>();
    }
    if (q.image.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s:%d: field 'image' is empty", path, line));
    }
    const std::filesystem::path image = std::filesystem::path(image_folder) / q.image;
    if (!std::filesystem::is_regular_file(image, ec)) {
      return absl::NotFoundError(absl::StrFormat("%s:%d: image '%s' not found (looked for %s)",
                                                 path, line, q.image, image.string()));
    }
    out.push_back(std::move(q));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("question file '", path, "' holds no questions"));
  }
  return out;
}

absl::StatusOr<std::vector<LlavaQuestion>> TakeChunk(std::vector<LlavaQuestion> questions,
                                                     int num_chunks, int chunk_idx) {
  if (num_chunks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--num-chunks must be >= 1, got ", num_chunks));
  }
  if (chunk_idx < 0 || chunk_idx >= num_chunks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chunk-idx must be in [0, ", num_chunks - 1, "], got ", chunk_idx));
  }
  // split_list: chunk_size = ceil(n / num_chunks); chunk k = [k * size, (k + 1) * size).
  const size_t n = questions.size();
  const size_t size = (n + num_chunks - 1) / num_chunks;
  const size_t begin = std::min(n, size * chunk_idx);
  const size_t end = std::min(n, begin + size);
  return std::vector<LlavaQuestion>(std::make_move_iterator(questions.begin() + begin),
                                    std::make_move_iterator(questions.begin() + end));
}

absl::StatusOr<ConvMode> ParseConvMode(const std::string& name) {
  if (name == "llava_hf") return ConvMode::kLlavaHf;
  if (name == "vicuna_v1" || name == "llava_v1") return ConvMode::kVicunaV1;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --conv-mode '", name, "'; valid: llava_hf, vicuna_v1, llava_v1"));
}

const char* ConvModeName(ConvMode mode) {
  return mode == ConvMode::kVicunaV1 ? "vicuna_v1" : "llava_hf";
}

std::string RenderVicunaV1(const std::string& text) {
  // LLaVA conv_vicuna_v1 (SeparatorStyle.TWO, sep " "): system + sep + "USER: " + message + sep
  // + "ASSISTANT:", the message being "<image>\n" + text (model_vqa_loader.py).
  return absl::StrCat(
      "A chat between a curious human and an artificial intelligence assistant. The assistant "
      "gives helpful, detailed, and polite answers to the human's questions. USER: <image>\n",
      text, " ASSISTANT:");
}

std::string AnswersPathFor(const std::string& pattern, const std::string& method) {
  return absl::StrReplaceAll(pattern, {{"{method}", method}});
}

std::string AnswerId(std::string_view key) {
  // FNV-1a, 128 bits.
  using U128 = unsigned __int128;
  const U128 prime = (static_cast<U128>(1) << 88) + 0x13B;
  U128 h = (static_cast<U128>(0x6c62272e07bb0142ULL) << 64) | 0x62b821756295c58dULL;
  for (unsigned char c : key) {
    h ^= c;
    h *= prime;
  }
  // 22 base-57 digits hold 128 bits (57^22 > 2^128), as shortuuid's ids do.
  static constexpr char kAlphabet[] = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
  std::string id(22, kAlphabet[0]);
  for (int i = 21; i >= 0; --i) {
    id[i] = kAlphabet[static_cast<int>(h % 57)];
    h /= 57;
  }
  return id;
}

std::string ModelIdOf(const std::string& model_dir) {
  std::filesystem::path p = std::filesystem::path(model_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // a trailing slash
  if (p.filename().empty() || p.filename() == "." || p.filename() == "..") {
    std::error_code ec;
    const auto abs = std::filesystem::absolute(model_dir, ec).lexically_normal();
    p = abs.filename().empty() ? abs.parent_path() : abs;
  }
  return p.filename().string();
}

nlohmann::ordered_json AnswerLine(const LlavaQuestion& q, const std::string& answer_id,
                                  const std::string& model_id, const AnswerRun& run) {
  const PrefillStats& s = *run.stats;
  const DecodeResult& d = *run.decode;
  nlohmann::ordered_json meta;
  meta["method"] = run.prune->method;
  if (run.prune->retain) meta["retain"] = *run.prune->retain;
  if (run.prune->flops) meta["flops_budget"] = *run.prune->flops;
  if (run.prune->paq_temperature != 1.0) meta["paq_temperature"] = run.prune->paq_temperature;
  meta["conv_mode"] = std::string(ConvModeName(run.conv));
  meta["image_visual_tokens"] = s.image_visual_tokens;
  meta["visual_tokens"] = s.visual_tokens;
  meta["average_visual_tokens"] = s.average_visual_tokens;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const PruneStage& st : s.stages) {
    stages.push_back({{"after_layer", st.after_layer}, {"visual_tokens_kept", st.tokens_kept}});
  }
  meta["stages"] = std::move(stages);
  meta["flops_paper"] = s.flops_paper;
  meta["flops_full"] = s.flops_full;
  meta["unpruned_flops_paper"] = s.unpruned_flops_paper;
  meta["unpruned_flops_full"] = s.unpruned_flops_full;
  meta["kv_cache_fraction"] =
      s.kv_bytes_unpruned > 0 ? static_cast<double>(s.kv_bytes) / s.kv_bytes_unpruned : 0.0;
  meta["prompt_tokens"] = s.prompt_tokens;
  meta["new_tokens"] = d.tokens.size();
  meta["finish_reason"] = std::string(FinishReasonName(d.finish));
  meta["prefill_ms"] = s.prefill_ms;
  meta["decode_ms"] = d.decode_ms;
  meta["elapsed_ms"] = run.elapsed_ms;

  // Python's str.strip() on the answer, as model_vqa_loader.py does.
  static constexpr char kSpace[] = " \t\n\r\f\v";
  std::string answer = d.text;
  answer.erase(0, std::min(answer.size(), answer.find_first_not_of(kSpace)));
  answer.erase(answer.find_last_not_of(kSpace) + 1);

  nlohmann::ordered_json line;
  line["question_id"] = q.question_id;
  line["prompt"] = q.text;
  line["text"] = std::move(answer);
  line["answer_id"] = answer_id;
  line["model_id"] = model_id;
  line["metadata"] = std::move(meta);
  return line;
}

}  // namespace hap::cli
