// The llava-hf side files: tokenizer, processor and generation settings as transformers saves them.
#include "runtime/io/side_files.h"

#include <fstream>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/io/preprocessor_config.h"

namespace hap {

const char kLlava15ChatTemplate[] =
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "{{ message['role'].upper() + ': '}}{% endif %}"
    "{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}"
    "{# Render all text next #}"
    "{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}"
    "{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}";

namespace {

// nlohmann::json keeps object keys sorted, as save_pretrained's json.dumps(sort_keys=True).
using Json = nlohmann::json;

std::string Dump(const Json& j) { return j.dump(2) + "\n"; }

bool HasPad(const LlavaConfig& c) { return c.text.pad_token_id >= 0; }

// An AddedToken as special_tokens_map.json writes it; added_tokens_decoder adds "special".
Json AddedToken(const std::string& content) {
  return {{"content", content},
          {"lstrip", false},
          {"normalized", false},
          {"rstrip", false},
          {"single_word", false}};
}

Json SpecialAddedToken(const std::string& content) {
  Json t = AddedToken(content);
  t["special"] = true;
  return t;
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace

std::string TokenizerConfigJson(const LlavaConfig& c, const TokenizerSpecials& s) {
  Json added = Json::object();
  added[std::to_string(s.unk_id)] = SpecialAddedToken(s.unk);
  added[std::to_string(s.bos_id)] = SpecialAddedToken(s.bos);
  added[std::to_string(s.eos_id)] = SpecialAddedToken(s.eos);
  added[std::to_string(c.image_token_index)] = SpecialAddedToken(kImageTokenContent);
  if (HasPad(c) && c.text.pad_token_id >= s.vocab_size) {
    added[std::to_string(c.text.pad_token_id)] = SpecialAddedToken(s.pad);
  }
  Json root = {{"add_bos_token", true},
               {"add_eos_token", false},
               {"added_tokens_decoder", std::move(added)},
               {"bos_token", s.bos},
               {"chat_template", kLlava15ChatTemplate},
               {"clean_up_tokenization_spaces", false},
               {"eos_token", s.eos},
               {"legacy", true},
               {"model_max_length", c.text.max_position_embeddings},
               {"padding_side", "left"},
               {"processor_class", "LlavaProcessor"},
               {"sp_model_kwargs", Json::object()},
               {"tokenizer_class", "LlamaTokenizer"},
               {"unk_token", s.unk}};
  if (HasPad(c)) root["pad_token"] = s.pad;
  return Dump(root);
}

std::string SpecialTokensMapJson(const LlavaConfig& c, const TokenizerSpecials& s) {
  Json root = {{"bos_token", AddedToken(s.bos)},
               {"eos_token", AddedToken(s.eos)},
               {"unk_token", AddedToken(s.unk)}};
  if (HasPad(c)) root["pad_token"] = AddedToken(s.pad);
  return Dump(root);
}

std::string ProcessorConfigJson(const LlavaConfig& c) {
  return Dump({{"image_token", kImageTokenContent},
               {"num_additional_image_tokens", 1},
               {"patch_size", c.vision.patch_size},
               {"processor_class", "LlavaProcessor"},
               {"vision_feature_select_strategy", c.vision_feature_select_strategy}});
}

std::string ChatTemplateJson() { return Dump({{"chat_template", kLlava15ChatTemplate}}); }

std::string GenerationConfigJson(const LlavaConfig& c) {
  Json root = {{"_from_model_config", true},
               {"bos_token_id", c.text.bos_token_id},
               {"eos_token_id", c.text.eos_token_id}};
  if (HasPad(c)) root["pad_token_id"] = c.text.pad_token_id;
  return Dump(root);
}

absl::Status WriteSideFiles(const std::string& dir, const LlavaConfig& config,
                            const ImageProcessorConfig& image_processor,
                            const TokenizerSpecials& specials) {
  const std::pair<const char*, std::string> files[] = {
      {kPreprocessorConfigFile, PreprocessorConfigToJson(image_processor)},
      {"processor_config.json", ProcessorConfigJson(config)},
      {"chat_template.json", ChatTemplateJson()},
      {"tokenizer_config.json", TokenizerConfigJson(config, specials)},
      {"special_tokens_map.json", SpecialTokensMapJson(config, specials)},
      {"generation_config.json", GenerationConfigJson(config)},
  };
  for (const auto& [name, text] : files) {
    HAP_RETURN_IF_ERROR(WriteText(absl::StrCat(dir, "/", name), text));
  }
  return absl::OkStatus();
}

}  // namespace hap
