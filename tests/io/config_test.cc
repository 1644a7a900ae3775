// Tests of config.json parsing (transformers defaults, both RoPE spellings), validation errors
// and the writer's round trip.
#include "runtime/io/config.h"

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/io/test_util.h"

namespace hap {
namespace {

using ::hap::testing::ScratchDir;
using ::hap::testing::TinyConfig;
using ::hap::testing::WriteFile;

// config.json of llava-hf/llava-1.5-7b-hf as published (keys the runtime reads and some it
// ignores).
constexpr char kLlava15_7b[] = R"({
  "architectures": ["LlavaForConditionalGeneration"],
  "ignore_index": -100,
  "image_token_index": 32000,
  "model_type": "llava",
  "pad_token_id": 32001,
  "projector_hidden_act": "gelu",
  "text_config": {
    "_name_or_path": "lmsys/vicuna-7b-v1.5",
    "architectures": ["LlamaForCausalLM"],
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "rms_norm_eps": 1e-05,
    "torch_dtype": "float16",
    "vocab_size": 32064
  },
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.36.0.dev0",
  "vision_config": {
    "hidden_size": 1024,
    "image_size": 336,
    "intermediate_size": 4096,
    "model_type": "clip_vision_model",
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "patch_size": 14,
    "projection_dim": 768,
    "vocab_size": 32000
  },
  "vision_feature_layer": -2,
  "vision_feature_select_strategy": "default",
  "vocab_size": 32064
})";

absl::StatusOr<LlavaConfig> Parse(const std::string& text) {
  return ParseLlavaConfig(text, "config.json");
}

// Parses kLlava15_7b with `patch` merged in (JSON merge patch: null deletes a key).
absl::StatusOr<LlavaConfig> ParsePatched(const char* patch) {
  nlohmann::json j = nlohmann::json::parse(kLlava15_7b);
  j.merge_patch(nlohmann::json::parse(patch));
  return Parse(j.dump());
}

// A tower's sizes as one list, so that a test compares them all in one expectation: {hidden,
// intermediate, layers, heads, channels, image, patch, projection} and {vocab, hidden,
// intermediate, layers, heads, KV heads, head_dim, max positions}.
std::vector<int> Sizes(const VisionConfig& v) {
  return {v.hidden_size,  v.intermediate_size, v.num_hidden_layers, v.num_attention_heads,
          v.num_channels, v.image_size,        v.patch_size,        v.projection_dim};
}
std::vector<int> Sizes(const TextConfig& t) {
  return {
      t.vocab_size,          t.hidden_size,         t.intermediate_size, t.num_hidden_layers,
      t.num_attention_heads, t.num_key_value_heads, t.head_dim,          t.max_position_embeddings};
}

void ExpectError(const absl::StatusOr<LlavaConfig>& c, const std::string& fragment) {
  ASSERT_FALSE(c.ok()) << "accepted; expected error with: " << fragment;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  const std::string msg(c.status().message());
  EXPECT_EQ(msg.rfind("config.json: ", 0), 0u) << msg;
  EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
}

// Each {patch to llava-1.5-7b's config.json, fragment}: the patched config is refused with an
// error that says `fragment`.
void ExpectPatchErrors(std::initializer_list<std::pair<const char*, const char*>> cases) {
  for (const auto& [patch, fragment] : cases) ExpectError(ParsePatched(patch), fragment);
}

TEST(LlavaConfigTest, ParsesLlava15_7b) {
  auto c = Parse(kLlava15_7b);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "llava");
  EXPECT_EQ(c->architectures, std::vector<std::string>{"LlavaForConditionalGeneration"});
  EXPECT_EQ(Sizes(c->vision), (std::vector<int>{1024, 4096, 24, 16, 3, 336, 14, 768}));
  EXPECT_EQ(c->vision.num_patches(), 576);
  EXPECT_EQ(c->torch_dtype, "float16");
  EXPECT_EQ(c->vision.hidden_act, "quick_gelu");
  EXPECT_FLOAT_EQ(c->vision.layer_norm_eps, 1e-5f);
  // text_config only overrides a few keys; the rest are LlamaConfig's defaults.
  EXPECT_EQ(Sizes(c->text), (std::vector<int>{32064, 4096, 11008, 32, 32, 32, 128, 4096}));
  EXPECT_EQ(c->text.bos_token_id, 1);
  EXPECT_EQ(c->text.eos_token_id, 2);
  EXPECT_EQ(c->text.pad_token_id, 32001);  // from the top level
  EXPECT_EQ(c->text.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c->text.rope_theta, 10000.0f);
  EXPECT_FALSE(c->text.tie_word_embeddings);
  EXPECT_EQ(c->text.hidden_act, "silu");
  EXPECT_EQ(c->image_token_index, 32000);
  EXPECT_EQ(c->vision_feature_layer, -2);
  EXPECT_EQ(c->vision_feature_select_strategy, "default");
  EXPECT_EQ(c->projector_hidden_act, "gelu");
  EXPECT_TRUE(c->projector_bias);
  EXPECT_EQ(c->num_visual_tokens(), 576);
  EXPECT_EQ(c->image_seq_length, 576);
  EXPECT_EQ(c->vision_layers_used(), 23);
}

TEST(LlavaConfigTest, AbsentVisionConfigGetsLlavaDefaultsPartialGetsClipDefaults) {
  auto bare = Parse(R"({"model_type": "llava"})");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(Sizes(bare->vision), (std::vector<int>{1024, 4096, 24, 16, 3, 336, 14, 768}));
  EXPECT_EQ(bare->text.vocab_size, 32000);
  EXPECT_EQ(bare->text.max_position_embeddings, 2048);
  EXPECT_EQ(bare->text.rms_norm_eps, 1e-6f);
  EXPECT_EQ(bare->text.pad_token_id, -1);
  EXPECT_EQ(bare->num_visual_tokens(), 576);

  auto partial = Parse(R"({"model_type": "llava", "vision_config": {"hidden_size": 96}})");
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_EQ(Sizes(partial->vision), (std::vector<int>{96, 3072, 12, 12, 3, 224, 32, 512}));
  EXPECT_EQ(partial->num_visual_tokens(), 49);
  EXPECT_EQ(partial->image_seq_length, 49);  // follows the geometry when not given
  EXPECT_EQ(partial->vision_layers_used(), 11);
}

TEST(LlavaConfigTest, DefaultConstructedEqualsMinimalConfig) {
  auto parsed = Parse(R"({"model_type": "llava"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const LlavaConfig defaults;
  EXPECT_EQ(LlavaConfigToJson(defaults), LlavaConfigToJson(*parsed));
  EXPECT_EQ(defaults.num_visual_tokens(), defaults.image_seq_length);
}

TEST(LlavaConfigTest, ArchitecturesAloneIdentifyLlava) {
  auto c = Parse(R"({"architectures": ["Foo", "LlavaForConditionalGeneration"]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "");
}

TEST(LlavaConfigTest, DerivedHeadsAndFeatureSelection) {
  auto gqa = ParsePatched(R"({"text_config": {"num_key_value_heads": 8, "hidden_size": 2048,
                                             "num_attention_heads": 16}})");
  ASSERT_TRUE(gqa.ok()) << gqa.status();
  EXPECT_EQ(gqa->text.num_key_value_heads, 8);
  EXPECT_EQ(gqa->text.head_dim, 128);
  auto explicit_hd = ParsePatched(R"({"text_config": {"head_dim": 64}})");
  ASSERT_TRUE(explicit_hd.ok()) << explicit_hd.status();
  EXPECT_EQ(explicit_hd->text.head_dim, 64);

  auto full = ParsePatched(R"({"vision_feature_select_strategy": "full",
                              "vision_feature_layer": -1})");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->num_visual_tokens(), 577);
  EXPECT_EQ(full->vision_layers_used(), 24);
  auto positive = ParsePatched(R"({"vision_feature_layer": 5})");
  ASSERT_TRUE(positive.ok());
  EXPECT_EQ(positive->vision_layers_used(), 5);
  auto embeddings = ParsePatched(R"({"vision_feature_layer": -25})");
  ASSERT_TRUE(embeddings.ok());
  EXPECT_EQ(embeddings->vision_layers_used(), 0);
}

TEST(LlavaConfigTest, RopeThetaInBothSpellings) {
  auto old_style =
      ParsePatched(R"({"text_config": {"rope_theta": 500000.0, "rope_scaling": null}})");
  ASSERT_TRUE(old_style.ok()) << old_style.status();
  EXPECT_EQ(old_style->text.rope_theta, 500000.0f);
  auto new_style = ParsePatched(
      R"({"text_config": {"rope_parameters": {"rope_type": "default", "rope_theta": 1000000}}})");
  ASSERT_TRUE(new_style.ok()) << new_style.status();
  EXPECT_EQ(new_style->text.rope_theta, 1000000.0f);
}

TEST(LlavaConfigTest, NullsAndListsWhereTransformersAllowsThem) {
  auto c = ParsePatched(R"({"pad_token_id": null, "text_config": {"eos_token_id": [2, 7],
                            "num_key_value_heads": null, "head_dim": null}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->text.pad_token_id, -1);
  EXPECT_EQ(c->text.eos_token_id, 2);
  EXPECT_EQ(c->text.num_key_value_heads, 32);
  EXPECT_EQ(c->text.head_dim, 128);
  auto tied = ParsePatched(R"({"tie_word_embeddings": true})");
  ASSERT_TRUE(tied.ok());
  EXPECT_TRUE(tied->text.tie_word_embeddings);
  auto text_wins = ParsePatched(R"({"tie_word_embeddings": true,
                                   "text_config": {"tie_word_embeddings": false}})");
  ASSERT_TRUE(text_wins.ok());
  EXPECT_FALSE(text_wins->text.tie_word_embeddings);
}

TEST(LlavaConfigTest, JsonRoundTripKeepsEveryField) {
  LlavaConfig c = TinyConfig();
  c.vision.layer_norm_eps = 1e-6f;
  c.vision.hidden_act = "gelu";
  c.vision.num_channels = 1;
  c.text.rms_norm_eps = 1e-5f;
  c.text.rope_theta = 123456.0f;
  c.text.bos_token_id = 3;
  c.text.eos_token_id = 4;
  c.text.pad_token_id = 0;
  c.text.tie_word_embeddings = true;
  c.vision_feature_layer = 1;
  c.vision_feature_select_strategy = "full";
  c.projector_hidden_act = "gelu_pytorch_tanh";
  c.projector_bias = false;
  c.image_seq_length = 5;
  c.torch_dtype = "bfloat16";
  const std::string json = LlavaConfigToJson(c);
  auto back = Parse(json);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
  EXPECT_EQ(Sizes(back->vision), Sizes(c.vision));
  EXPECT_EQ(back->vision.num_channels, 1);
  EXPECT_EQ(back->vision.layer_norm_eps, 1e-6f);
  EXPECT_EQ(back->vision.hidden_act, "gelu");
  EXPECT_EQ(Sizes(back->text), Sizes(c.text));
  EXPECT_EQ(back->text.bos_token_id, 3);
  EXPECT_EQ(back->text.eos_token_id, 4);
  EXPECT_EQ(back->text.pad_token_id, 0);
  EXPECT_EQ(back->text.rms_norm_eps, 1e-5f);
  EXPECT_EQ(back->text.rope_theta, 123456.0f);
  EXPECT_TRUE(back->text.tie_word_embeddings);
  EXPECT_EQ(back->text.hidden_act, "silu");
  EXPECT_EQ(back->image_token_index, c.image_token_index);
  EXPECT_EQ(back->vision_feature_layer, 1);
  EXPECT_EQ(back->vision_feature_select_strategy, "full");
  EXPECT_EQ(back->projector_hidden_act, "gelu_pytorch_tanh");
  EXPECT_FALSE(back->projector_bias);
  EXPECT_EQ(back->torch_dtype, "bfloat16");
  EXPECT_EQ(back->image_seq_length, 5);
  EXPECT_EQ(back->model_type, "llava");
  EXPECT_EQ(back->architectures, std::vector<std::string>{"LlavaForConditionalGeneration"});
  // The llava-hf shape of the file, and floats in their shortest spelling.
  const auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["text_config"]["model_type"], "llama");
  EXPECT_EQ(j["vision_config"]["model_type"], "clip_vision_model");
  // llava-hf keeps pad_token_id at the top level (LlavaForConditionalGeneration reads it there).
  EXPECT_EQ(j["pad_token_id"], 0);
  EXPECT_EQ(j["text_config"]["pad_token_id"], 0);
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_NE(json.find("\"rms_norm_eps\": 1e-05"), std::string::npos) << json;
  EXPECT_EQ(LlavaConfigToJson(*back), json);
}

TEST(LlavaConfigTest, LoadsFromModelDirectory) {
  ScratchDir dir;
  WriteFile(dir / "config.json", LlavaConfigToJson(TinyConfig()));
  auto c = LoadLlavaConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->text.num_key_value_heads, 2);
  auto missing = LoadLlavaConfig(dir / "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope/config.json"), std::string::npos);

  WriteFile(dir / "config.json", "{\"model_type\": \"llava\",\n \"text_config\": {,}}");
  auto bad = LoadLlavaConfig(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(bad.status().message());
  EXPECT_NE(msg.find(dir / "config.json: malformed JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 2, column 18"), std::string::npos) << msg;  // parser's position
}

// ---- bad configs --------------------------------------------------------------------------

TEST(LlavaConfigErrorTest, MalformedJson) {
  ExpectError(Parse("{\"model_type\": \"llava\""), "malformed JSON");
  ExpectError(Parse(""), "malformed JSON");
  ExpectError(Parse("[]"), "top level is a JSON array");
}

TEST(LlavaConfigErrorTest, UnknownArchitecture) {
  ExpectError(
      Parse(R"({"model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"]})"),
      "unsupported architecture: model_type 'qwen2_vl', architectures "
      "[Qwen2VLForConditionalGeneration]; supported: model_type 'llava'");
  ExpectError(Parse("{}"), "unsupported architecture: model_type ''");
  ExpectError(ParsePatched(R"({"text_config": {"model_type": "mistral"}})"),
              "text_config.model_type 'mistral' is not supported (supported: llama)");
  ExpectError(ParsePatched(R"({"vision_config": {"model_type": "siglip_vision_model"}})"),
              "vision_config.model_type 'siglip_vision_model' is not supported");
}

TEST(LlavaConfigErrorTest, WrongTypes) {
  ExpectPatchErrors({
      {R"({"text_config": {"hidden_size": "4096"}})",
       "text_config.hidden_size is a JSON string (\"4096\"), expected an integer"},
      {R"({"vision_config": {"layer_norm_eps": "1e-5"}})",
       "vision_config.layer_norm_eps is a JSON string"},
      {R"({"text_config": {"num_hidden_layers": 32.5}})",
       "num_hidden_layers is a JSON number (32.5), expected an integer"},
      {R"({"multimodal_projector_bias": 1})",
       "multimodal_projector_bias is a JSON number (1), expected true or false"},
      {R"({"text_config": [1]})", "text_config is a JSON array"},
      {R"({"architectures": "LlavaForConditionalGeneration"})", "architectures is a JSON string"},
      {R"({"text_config": {"vocab_size": 99999999999}})",
       "vocab_size = 99999999999 is out of range"},
      {R"({"text_config": {"rope_theta": 1e300}})",
       "rope_theta = 1e+300 is out of range for a float"},
      {R"({"vision_feature_layer": [-2, -5]})", "vision_feature_layer is a list"},
  });
}

TEST(LlavaConfigErrorTest, UnsupportedActivationsAndRope) {
  ExpectPatchErrors({
      {R"({"text_config": {"hidden_act": "gelu"}})",
       "text_config.hidden_act 'gelu' is not supported (supported: silu)"},
      {R"({"vision_config": {"hidden_act": "relu"}})",
       "vision_config.hidden_act 'relu' is not supported"},
      {R"({"projector_hidden_act": "relu"})",
       "projector_hidden_act 'relu' is not supported (supported: gelu, gelu_pytorch_tanh)"},
      {R"({"text_config": {"rope_scaling": {"type": "linear", "factor": 2}}})",
       "rope_scaling is not supported"},
      {R"({"text_config": {"rope_parameters": {"rope_type": "yarn"}}})",
       "rope_type 'yarn' is not supported"},
  });
}

TEST(LlavaConfigErrorTest, InconsistentDimensions) {
  ExpectPatchErrors({
      {R"({"text_config": {"num_attention_heads": 30}})",
       "num_attention_heads (30) must divide hidden_size (4096)"},
      {R"({"text_config": {"num_key_value_heads": 5}})",
       "num_key_value_heads (5) must divide num_attention_heads (32)"},
      {R"({"vision_config": {"num_attention_heads": 3}})",
       "vision_config.num_attention_heads (3) must divide hidden_size (1024)"},
      {R"({"vision_config": {"image_size": 330}})",
       "image_size (330) must be divisible by patch_size (14)"},
      {R"({"text_config": {"head_dim": 7}})", "head_dim (7) must be even"},
      {R"({"text_config": {"intermediate_size": 0}})",
       "text_config.intermediate_size = 0 must be positive"},
      {R"({"vision_config": {"patch_size": -14}})",
       "vision_config.patch_size = -14 must be positive"},
      {R"({"text_config": {"eos_token_id": 40000}})", "eos_token_id = 40000 is outside [0, 32064)"},
  });
}

// Found by tests/fuzz/config_fuzz: the default image_seq_length was computed from the geometry
// before it was validated, dividing by a zero patch_size and overflowing (image_size/patch)^2.
TEST(LlavaConfigErrorTest, GeometryIsValidatedBeforeItIsUsed) {
  ExpectError(ParsePatched(R"({"vision_config": {"patch_size": 0}})"),
              "vision_config.patch_size = 0 must be positive");
  ExpectError(ParsePatched(R"({"vision_config": {"patch_size": 0}, "image_seq_length": 9})"),
              "vision_config.patch_size = 0 must be positive");
  ExpectError(ParsePatched(R"({"vision_config": {"patch_size": 1, "image_size": 100000}})"),
              "vision_config.image_size 100000 is over 4096 pixels");
  auto largest = ParsePatched(R"({"vision_config": {"patch_size": 1, "image_size": 4096}})");
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_EQ(largest->image_seq_length, 4096 * 4096);
}

// Found by tests/fuzz/config_fuzz: a vision tower of 2^31 - 1 layers overflowed the feature
// layer's bound -(n + 1). Layer counts are bounded first, in both towers.
TEST(LlavaConfigErrorTest, LayerCountsAreBoundedBeforeTheFeatureLayerIsChecked) {
  ExpectError(ParsePatched(R"({"vision_config": {"num_hidden_layers": 2147483647},
                               "vision_feature_layer": 3})"),
              "vision_config.num_hidden_layers 2147483647 is over 4096");
  ExpectError(ParsePatched(R"({"text_config": {"num_hidden_layers": 5000}})"),
              "text_config.num_hidden_layers 5000 is over 4096");
  EXPECT_TRUE(ParsePatched(R"({"vision_config": {"num_hidden_layers": 4096},
                               "vision_feature_layer": -4097})")
                  .ok());
}

TEST(LlavaConfigErrorTest, FeatureLayerAndStrategy) {
  ExpectError(ParsePatched(R"({"vision_feature_layer": -26})"),
              "vision_feature_layer = -26 is outside [-25, 24] for a vision tower of 24 layers");
  ExpectError(ParsePatched(R"({"vision_feature_layer": 25})"), "is outside [-25, 24]");
  ExpectError(ParsePatched(R"({"vision_feature_select_strategy": "cls"})"),
              "vision_feature_select_strategy 'cls' is not supported (supported: default, full)");
}

}  // namespace
}  // namespace hap
