// A `hapctl make-tiny` directory (WriteTinyModel) is a complete llava-hf checkpoint: the side
// files hold the keys and values transformers' AutoProcessor and
// LlavaForConditionalGeneration.from_pretrained read, with llava-hf's values.
#include "runtime/io/side_files.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/io/preprocessor_config.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/io/test_util.h"

namespace hap {
namespace {

using ::hap::testing::ReadFile;
using ::hap::testing::ScratchDir;
using Json = nlohmann::json;

// llava-hf's LLaVA-1.5 chat template, copied from llava-hf/llava-1.5-7b-hf (not from the code
// under test).
constexpr char kTemplate[] =
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() "
    "+ ': '}}{% endif %}{# Render all images first #}{% for content in message['content'] | "
    "selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}{# Render all text "
    "next #}{% if message['role'] != 'assistant' %}{% for content in message['content'] | "
    "selectattr('type', 'equalto', 'text') %}{{ content['text'] + ' '}}{% endfor %}{% else %}{% "
    "for content in message['content'] | selectattr('type', 'equalto', 'text') %}{% generation "
    "%}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %}{% endfor %}{% if "
    "add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}";

Json ReadJson(const std::string& path) {
  EXPECT_TRUE(std::filesystem::exists(path)) << path;
  return Json::parse(ReadFile(path));
}

Json Special(const std::string& content) {
  return {{"content", content}, {"lstrip", false},      {"normalized", false},
          {"rstrip", false},    {"single_word", false}, {"special", true}};
}

class MakeTinyTest : public ::testing::Test {
 protected:
  static void Write(const std::string& dir, DType dtype) {
    TinyModelOptions o;
    o.dtype = dtype;
    o.corpus_path = std::string(HAP_SOURCE_DIR) + "/data/tokenizer/corpus.txt";
    const absl::Status s = WriteTinyModel(o, dir);
    ASSERT_TRUE(s.ok()) << s;
  }
};

TEST_F(MakeTinyTest, WritesTheLlavaHfSideFiles) {
  ScratchDir dir;
  Write(dir.path(), DType::kF32);
  // 512 SentencePiece pieces: <image> = 512, <pad> = 513; 56 px images of 14 px patches.
  const Json config = ReadJson(dir / "config.json");
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(config["pad_token_id"], 513);
  EXPECT_EQ(config["image_token_index"], 512);

  const Json pre = ReadJson(dir / "preprocessor_config.json");
  const Json want_pre = {{"crop_size", {{"height", 56}, {"width", 56}}},
                         {"do_center_crop", true},
                         {"do_convert_rgb", true},
                         {"do_normalize", true},
                         {"do_rescale", true},
                         {"do_resize", true},
                         {"image_mean", {0.48145466, 0.4578275, 0.40821073}},
                         {"image_processor_type", "CLIPImageProcessor"},
                         {"image_std", {0.26862954, 0.26130258, 0.27577711}},
                         {"processor_class", "LlavaProcessor"},
                         {"resample", 3},
                         {"rescale_factor", 1.0 / 255.0},
                         {"size", {{"shortest_edge", 56}}}};
  EXPECT_EQ(pre, want_pre) << pre.dump(2);

  const Json proc = ReadJson(dir / "processor_config.json");
  EXPECT_EQ(proc, (Json{{"image_token", "<image>"},
                        {"num_additional_image_tokens", 1},
                        {"patch_size", 14},
                        {"processor_class", "LlavaProcessor"},
                        {"vision_feature_select_strategy", "default"}}))
      << proc.dump(2);
  EXPECT_EQ(ReadJson(dir / "chat_template.json"), (Json{{"chat_template", kTemplate}}));

  const Json tok = ReadJson(dir / "tokenizer_config.json");
  EXPECT_EQ(tok["tokenizer_class"], "LlamaTokenizer");
  EXPECT_EQ(tok["bos_token"], "<s>");
  EXPECT_EQ(tok["eos_token"], "</s>");
  EXPECT_EQ(tok["unk_token"], "<unk>");
  EXPECT_EQ(tok["pad_token"], "<pad>");
  EXPECT_EQ(tok["add_bos_token"], true);
  EXPECT_EQ(tok["add_eos_token"], false);
  EXPECT_EQ(tok["legacy"], true);
  EXPECT_EQ(tok["model_max_length"], 4096);
  EXPECT_EQ(tok["padding_side"], "left");
  EXPECT_EQ(tok["chat_template"], kTemplate);
  EXPECT_EQ(tok["added_tokens_decoder"], (Json{{"0", Special("<unk>")},
                                               {"1", Special("<s>")},
                                               {"2", Special("</s>")},
                                               {"512", Special("<image>")},
                                               {"513", Special("<pad>")}}))
      << tok["added_tokens_decoder"].dump(2);

  const Json special = ReadJson(dir / "special_tokens_map.json");
  for (const auto& [key, content] : {std::pair<const char*, const char*>{"bos_token", "<s>"},
                                     {"eos_token", "</s>"},
                                     {"unk_token", "<unk>"},
                                     {"pad_token", "<pad>"}}) {
    ASSERT_TRUE(special.contains(key)) << key;
    EXPECT_EQ(special[key]["content"], content);
    EXPECT_EQ(special[key]["normalized"], false);
  }

  // Greedy: only the token ids, no sampling settings.
  EXPECT_EQ(ReadJson(dir / "generation_config.json"), (Json{{"_from_model_config", true},
                                                            {"bos_token_id", 1},
                                                            {"eos_token_id", 2},
                                                            {"pad_token_id", 513}}));

  // The loader reads the processor settings back.
  auto cfg = LoadLlavaConfig(dir.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->torch_dtype, "float32");
  auto loaded = LoadPreprocessorConfig(dir.path(), *cfg);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(PreprocessorConfigToJson(*loaded),
            PreprocessorConfigToJson(ClipImageProcessorConfig(56)));
}

TEST_F(MakeTinyTest, TorchDtypeFollowsTheStoredDtype) {
  for (auto [dtype, name] :
       {std::pair<DType, const char*>{DType::kBF16, "bfloat16"}, {DType::kF16, "float16"}}) {
    ScratchDir dir;
    Write(dir.path(), dtype);
    EXPECT_EQ(ReadJson(dir / "config.json")["torch_dtype"], name);
  }
}

}  // namespace
}  // namespace hap
