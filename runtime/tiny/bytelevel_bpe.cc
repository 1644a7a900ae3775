// TrainByteLevelBpe and the Qwen2-layout tokenizer files.
#include "runtime/tiny/bytelevel_bpe.h"

#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/text/byte_level.h"
#include "runtime/text/pretokenize_regex.h"
#include "runtime/text/unicode.h"

namespace hap {
namespace {

using Json = nlohmann::ordered_json;

// GPT-2's printable stand-in for `b`, as UTF-8.
std::string ByteChar(int b) {
  std::string out;
  unicode::AppendUtf8(ByteLevelChar(static_cast<uint8_t>(b)), &out);
  return out;
}

Json AddedToken(int id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

Json ByteLevelStep() {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", false},
          {"use_regex", false}};
}

}  // namespace

const std::vector<std::string>& QwenSpecialTokens() {
  static const std::vector<std::string> tokens = {
      "<|endoftext|>",      "<|im_start|>",     "<|im_end|>",     "<|object_ref_start|>",
      "<|object_ref_end|>", "<|box_start|>",    "<|box_end|>",    "<|quad_start|>",
      "<|quad_end|>",       "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
      "<|image_pad|>",      "<|video_pad|>"};
  return tokens;
}

const char kQwen25VLChatTemplate[] =
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

absl::StatusOr<ByteLevelBpe> TrainByteLevelBpe(const std::string& corpus_path, int num_merges) {
  HAP_ASSIGN_OR_RETURN(const std::string corpus, ReadFileToString(corpus_path));
  const std::u32string text = unicode::Nfc(unicode::DecodeUtf8(corpus));
  absl::StatusOr<PretokenizeRegex> split = PretokenizeRegex::Compile(kQwen2SplitPattern);
  if (!split.ok()) return split.status();

  ByteLevelBpe bpe;
  std::map<std::string, int> id_of;
  for (int b = 0; b < 256; ++b) {
    bpe.vocab.push_back(ByteChar(b));
    id_of[bpe.vocab.back()] = b;
  }
  // Each distinct word as its current token ids, with its count.
  std::map<std::u32string, int> counts;
  size_t from = 0, begin = 0, end = 0;
  while (from < text.size() && split->Find(text, from, &begin, &end)) {
    if (end == begin) {
      from = begin + 1;
      continue;
    }
    ++counts[text.substr(begin, end - begin)];
    from = end;
  }
  std::vector<std::pair<std::vector<int>, int>> words;
  for (const auto& [word, count] : counts) {
    std::vector<int> ids;
    for (char byte : unicode::EncodeUtf8(word)) ids.push_back(static_cast<uint8_t>(byte));
    words.push_back({std::move(ids), count});
  }

  for (int step = 0; step < num_merges; ++step) {
    std::unordered_map<uint64_t, int64_t> pairs;
    for (const auto& [ids, count] : words) {
      for (size_t i = 0; i + 1 < ids.size(); ++i) {
        pairs[static_cast<uint64_t>(ids[i]) << 32 | static_cast<uint32_t>(ids[i + 1])] += count;
      }
    }
    if (pairs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("the corpus ", corpus_path,
                                                     " ran out of pairs after ", step, " of ",
                                                     num_merges, " merges"));
    }
    // The most frequent pair; among equals the one whose token strings sort first.
    int left = -1, right = -1;
    int64_t best = 0;
    for (const auto& [key, count] : pairs) {
      const int a = static_cast<int>(key >> 32), b = static_cast<int>(key & 0xFFFFFFFFu);
      if (count > best || (count == best && std::tie(bpe.vocab[a], bpe.vocab[b]) <
                                                std::tie(bpe.vocab[left], bpe.vocab[right]))) {
        best = count;
        left = a;
        right = b;
      }
    }
    const std::string merged = bpe.vocab[left] + bpe.vocab[right];
    const int id = static_cast<int>(bpe.vocab.size());
    bpe.vocab.push_back(merged);
    bpe.merges.emplace_back(bpe.vocab[left], bpe.vocab[right]);
    for (auto& [ids, count] : words) {
      std::vector<int> next;
      next.reserve(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == left && ids[i + 1] == right) {
          next.push_back(id);
          ++i;
        } else {
          next.push_back(ids[i]);
        }
      }
      ids = std::move(next);
    }
  }
  return bpe;
}

std::string QwenTokenizerJson(const ByteLevelBpe& bpe) {
  Json added = Json::array();
  int id = static_cast<int>(bpe.vocab.size());
  for (const std::string& t : QwenSpecialTokens()) added.push_back(AddedToken(id++, t));
  Json vocab = Json::object();
  for (size_t i = 0; i < bpe.vocab.size(); ++i) vocab[bpe.vocab[i]] = i;
  Json merges = Json::array();
  for (const auto& [a, b] : bpe.merges) merges.push_back(Json::array({a, b}));
  const Json file = {{"version", "1.0"},
                     {"truncation", nullptr},
                     {"padding", nullptr},
                     {"added_tokens", added},
                     {"normalizer", {{"type", "NFC"}}},
                     {"pre_tokenizer",
                      {{"type", "Sequence"},
                       {"pretokenizers", Json::array({{{"type", "Split"},
                                                       {"pattern", {{"Regex", kQwen2SplitPattern}}},
                                                       {"behavior", "Isolated"},
                                                       {"invert", false}},
                                                      ByteLevelStep()})}}},
                     {"post_processor", ByteLevelStep()},
                     {"decoder", ByteLevelStep()},
                     {"model",
                      {{"type", "BPE"},
                       {"dropout", nullptr},
                       {"unk_token", nullptr},
                       {"continuing_subword_prefix", ""},
                       {"end_of_word_suffix", ""},
                       {"fuse_unk", false},
                       {"byte_fallback", false},
                       {"ignore_merges", false},
                       {"vocab", vocab},
                       {"merges", merges}}}};
  return file.dump(2, ' ', /*ensure_ascii=*/false) + "\n";
}

std::string QwenTokenizerConfigJson(const ByteLevelBpe& bpe, int model_max_length) {
  Json decoder = Json::object();
  int id = static_cast<int>(bpe.vocab.size());
  for (const std::string& t : QwenSpecialTokens()) {
    Json entry = AddedToken(id, t);
    entry.erase("id");
    decoder[std::to_string(id++)] = entry;
  }
  const Json file = {{"add_bos_token", false},
                     {"add_prefix_space", false},
                     {"added_tokens_decoder", decoder},
                     {"bos_token", nullptr},
                     {"chat_template", kQwen25VLChatTemplate},
                     {"clean_up_tokenization_spaces", false},
                     {"eos_token", "<|im_end|>"},
                     {"errors", "replace"},
                     {"model_max_length", model_max_length},
                     {"pad_token", "<|endoftext|>"},
                     {"processor_class", "Qwen2_5_VLProcessor"},
                     {"split_special_tokens", false},
                     {"tokenizer_class", "Qwen2Tokenizer"},
                     {"unk_token", nullptr}};
  return file.dump(2, ' ', /*ensure_ascii=*/false) + "\n";
}

}  // namespace hap
