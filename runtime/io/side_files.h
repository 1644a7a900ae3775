// The JSON files that complete a llava-hf checkpoint directory beside config.json, the weights
// and tokenizer.model, in the form transformers' AutoProcessor and
// LlavaForConditionalGeneration.from_pretrained read them (docs/design.md §2). Written by
// `hapctl make-tiny`; tools/pytorch/llava_model.py write_side_files writes the same files for
// the default model, and tests/parity checks that the two agree.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "runtime/image/clip_preprocess.h"
#include "runtime/io/config.h"

namespace hap {

// llava-hf's LLaVA-1.5 chat template (llava-hf/llava-1.5-7b-hf): "USER: <image>\n{text} ASSISTANT:"
// for one user turn with an image and add_generation_prompt.
extern const char kLlava15ChatTemplate[];

// The added tokens after the SentencePiece vocabulary, as llava-hf names them.
inline constexpr char kImageTokenContent[] = "<image>";
inline constexpr char kPadTokenContent[] = "<pad>";

// The tokenizer's special pieces. `pad` is the pad token's text ("" when config.json has no
// pad_token_id); it is an added token when pad_token_id >= vocab_size.
struct TokenizerSpecials {
  int vocab_size = 0;  // SentencePiece pieces
  int unk_id = 0, bos_id = 1, eos_id = 2;
  std::string unk = "<unk>", bos = "<s>", eos = "</s>";
  std::string pad = kPadTokenContent;
};

// File texts (JSON, keys sorted as transformers' save_pretrained writes them, newline at the
// end). Nothing here was written by transformers, so no file claims a transformers_version.
//
// tokenizer_config.json: LlamaTokenizer, add_bos_token true, add_eos_token false, legacy true
// (SentencePiece's dummy prefix on every text segment, <image> included: the ids LLaVA was
// trained on; see llava_prompt.h), model_max_length = max_position_embeddings, padding_side
// left, added_tokens_decoder with unk/bos/eos, <image> at image_token_index and the pad token,
// and chat_template = kLlava15ChatTemplate.
std::string TokenizerConfigJson(const LlavaConfig& config, const TokenizerSpecials& specials);
// special_tokens_map.json: bos/eos/unk (and pad) as AddedToken dicts.
std::string SpecialTokensMapJson(const LlavaConfig& config, const TokenizerSpecials& specials);
// processor_config.json (LlavaProcessor): image_token, num_additional_image_tokens 1 (CLIP's CLS),
// patch_size, vision_feature_select_strategy, processor_class.
std::string ProcessorConfigJson(const LlavaConfig& config);
// chat_template.json, where AutoProcessor looks for the template.
std::string ChatTemplateJson();
// generation_config.json: bos/eos/pad ids and nothing else, i.e. greedy decoding.
std::string GenerationConfigJson(const LlavaConfig& config);

// Writes the five files above and preprocessor_config.json (PreprocessorConfigToJson) into
// `dir`, which must exist. Unavailable when a write fails.
absl::Status WriteSideFiles(const std::string& dir, const LlavaConfig& config,
                            const ImageProcessorConfig& image_processor,
                            const TokenizerSpecials& specials);

}  // namespace hap
