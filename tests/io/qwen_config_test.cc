// Qwen2.5-VL config.json: the published flat layout and transformers' nested one, the round
// trip of the writer, and errors that name the key.
#include "runtime/io/qwen_config.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/io/qwen_weights.h"

namespace hap {
namespace {

// Qwen/Qwen2.5-VL-7B-Instruct's config.json as published (the flat layout).
constexpr char kQwen25VL7B[] = R"({
  "architectures": ["Qwen2_5_VLForConditionalGeneration"],
  "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
  "vision_start_token_id": 151652, "vision_end_token_id": 151653, "vision_token_id": 151654,
  "image_token_id": 151655, "video_token_id": 151656, "hidden_act": "silu",
  "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 18944,
  "max_position_embeddings": 128000, "max_window_layers": 28, "model_type": "qwen2_5_vl",
  "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.41.2",
  "use_cache": true, "use_sliding_window": false,
  "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280,
    "intermediate_size": 3420, "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584,
    "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2,
    "temporal_patch_size": 2},
  "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
  "vocab_size": 152064})";

TEST(Qwen25VLConfig, ReadsThePublishedFile) {
  ASSERT_TRUE(IsQwen25VLConfig(kQwen25VL7B));
  auto c = ParseQwen25VLConfig(kQwen25VL7B, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vision.depth, 32);
  EXPECT_EQ(c->vision.hidden_size, 1280);
  EXPECT_EQ(c->vision.head_dim(), 80);
  EXPECT_EQ(c->vision.window_merged_side(), 4);
  EXPECT_EQ(c->vision.fullatt_block_indexes, (std::vector<int>{7, 15, 23, 31}));
  EXPECT_EQ(c->vision.tokens_per_second, 2);
  EXPECT_EQ(c->text.hidden_size, 3584);
  EXPECT_EQ(c->text.head_dim(), 128);
  EXPECT_EQ(c->text.num_key_value_heads, 4);
  EXPECT_EQ(c->text.rope_theta, 1000000.0f);
  EXPECT_EQ(c->text.mrope_section, (std::vector<int>{16, 24, 24}));
  EXPECT_EQ(c->text.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c->image_token_id, 151655);
  EXPECT_EQ(c->vision_start_token_id, 151652);
  EXPECT_EQ(c->torch_dtype, "bfloat16");
}

TEST(Qwen25VLConfig, ReadsTheNestedLayout) {
  // transformers >= 4.53 nests the text model; 5.x writes rope_parameters.
  nlohmann::json j = nlohmann::json::parse(kQwen25VL7B);
  nlohmann::json text = {
      {"hidden_size", 2048},
      {"intermediate_size", 11008},
      {"num_hidden_layers", 36},
      {"num_attention_heads", 16},
      {"num_key_value_heads", 2},
      {"vocab_size", 151936},
      {"rms_norm_eps", 1e-6},
      {"model_type", "qwen2_5_vl_text"},
      {"tie_word_embeddings", true},
      {"rope_parameters",
       {{"rope_type", "default"}, {"rope_theta", 500000.0}, {"mrope_section", {16, 24, 24}}}}};
  j["text_config"] = text;
  j.erase("rope_scaling");
  j["vision_config"]["out_hidden_size"] = 2048;
  auto c = ParseQwen25VLConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->text.hidden_size, 2048);  // text_config wins over the top level's 3584
  EXPECT_EQ(c->text.num_hidden_layers, 36);
  EXPECT_EQ(c->text.rope_theta, 500000.0f);
  EXPECT_TRUE(c->text.tie_word_embeddings);
  EXPECT_EQ(c->text.vocab_size, 151936);
}

TEST(Qwen25VLConfig, WriterRoundTrips) {
  auto c = ParseQwen25VLConfig(kQwen25VL7B, "config.json");
  ASSERT_TRUE(c.ok());
  c->text.num_hidden_layers = 3;
  c->vision.fullatt_block_indexes = {1, 3};
  c->text.rms_norm_eps = 1e-5f;
  const std::string written = Qwen25VLConfigToJson(*c);
  auto again = ParseQwen25VLConfig(written, "written");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Qwen25VLConfigToJson(*again), written);
  EXPECT_EQ(again->text.num_hidden_layers, 3);
  EXPECT_EQ(again->text.rms_norm_eps, 1e-5f);
  EXPECT_EQ(again->vision.fullatt_block_indexes, (std::vector<int>{1, 3}));
}

TEST(Qwen25VLConfig, ErrorsNameTheKey) {
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) { j["use_sliding_window"] = true; }, "use_sliding_window"},
      {[](nlohmann::json& j) {
         j["rope_scaling"]["mrope_section"] = {16, 24, 16};
       },
       "mrope_section [16, 24, 16]"},
      {[](nlohmann::json& j) { j["vision_config"]["out_hidden_size"] = 1000; },
       "out_hidden_size 1000"},
      {[](nlohmann::json& j) { j["vision_config"]["window_size"] = 100; }, "window_size 100"},
      {[](nlohmann::json& j) {
         j["vision_config"]["fullatt_block_indexes"] = {7, 40};
       },
       "fullatt_block_indexes"},
      {[](nlohmann::json& j) { j["vision_config"]["hidden_act"] = "gelu"; },
       "vision_config.hidden_act"},
      {[](nlohmann::json& j) { j["num_key_value_heads"] = 5; }, "num_key_value_heads"},
      {[](nlohmann::json& j) { j["image_token_id"] = 999999; }, "image_token_id"},
      {[](nlohmann::json& j) { j["rope_scaling"]["type"] = "yarn"; }, "rope_scaling.type"},
      {[](nlohmann::json& j) { j.erase("vision_config"); }, "vision_config"},
      {[](nlohmann::json& j) {
         j["model_type"] = "qwen2_vl";
         j["architectures"] = {"Qwen2VLForConditionalGeneration"};
       },
       "is not Qwen2.5-VL"},
  };
  for (const auto& [mutate, fragment] : cases) {
    nlohmann::json j = nlohmann::json::parse(kQwen25VL7B);
    mutate(j);
    auto c = ParseQwen25VLConfig(j.dump(), "config.json");
    ASSERT_FALSE(c.ok()) << fragment;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(fragment), std::string::npos) << c.status();
    EXPECT_EQ(c.status().message().substr(0, 11), "config.json");
  }
  EXPECT_FALSE(IsQwen25VLConfig(R"({"model_type": "llava"})"));
  EXPECT_FALSE(IsQwen25VLConfig("not json"));
}

TEST(Qwen25VLTensors, PublishedNamesAndShapes) {
  auto c = ParseQwen25VLConfig(kQwen25VL7B, "config.json");
  ASSERT_TRUE(c.ok());
  const std::vector<ExpectedTensor> tensors = ExpectedQwen25VLTensors(*c);
  // 1 patch embed + 32 blocks x 12 + merger 5; embed + 28 layers x 12 + norm + lm_head.
  EXPECT_EQ(tensors.size(), 1u + 32 * 12 + 5 + 1 + 28 * 12 + 1 + 1);
  auto shape_of = [&](const std::string& name) {
    for (const ExpectedTensor& t : tensors) {
      if (t.name == name) return t.shape;
    }
    return std::vector<int64_t>();
  };
  EXPECT_EQ(shape_of("visual.patch_embed.proj.weight"), (std::vector<int64_t>{1280, 3, 2, 14, 14}));
  EXPECT_EQ(shape_of("visual.blocks.31.attn.qkv.weight"), (std::vector<int64_t>{3840, 1280}));
  EXPECT_EQ(shape_of("visual.merger.mlp.0.weight"), (std::vector<int64_t>{5120, 5120}));
  EXPECT_EQ(shape_of("visual.merger.mlp.2.weight"), (std::vector<int64_t>{3584, 5120}));
  EXPECT_EQ(shape_of("model.layers.27.self_attn.k_proj.weight"), (std::vector<int64_t>{512, 3584}));
  EXPECT_EQ(shape_of("model.layers.0.self_attn.k_proj.bias"), (std::vector<int64_t>{512}));
  EXPECT_TRUE(shape_of("model.layers.0.self_attn.o_proj.bias").empty());  // no bias
  EXPECT_EQ(shape_of("lm_head.weight"), (std::vector<int64_t>{152064, 3584}));
  c->text.tie_word_embeddings = true;
  EXPECT_EQ(ExpectedQwen25VLTensors(*c).size(), tensors.size() - 1);

  EXPECT_EQ(CanonicalQwen25VLTensorName("model.visual.blocks.0.norm1.weight"),
            "visual.blocks.0.norm1.weight");
  EXPECT_EQ(CanonicalQwen25VLTensorName("model.language_model.layers.3.mlp.up_proj.weight"),
            "model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(CanonicalQwen25VLTensorName("model.layers.3.mlp.up_proj.weight"),
            "model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(CanonicalQwen25VLTensorName("lm_head.weight"), "lm_head.weight");
}

}  // namespace
}  // namespace hap
