// Tests of LlavaWeights loading: single vs sharded, both naming conventions, dtypes, tied
// embeddings, optional tensors, and rejection of inconsistent checkpoints.
#include "runtime/io/weights.h"

#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/tiny/tiny_checkpoint.h"
#include "tests/io/test_util.h"

namespace hap {
namespace {

using ::hap::testing::ReadFile;
using ::hap::testing::ScratchDir;
using ::hap::testing::TinyConfig;
using ::hap::testing::WriteFile;

std::unique_ptr<LlavaWeights> LoadOrDie(const std::string& dir, const LlavaConfig& cfg) {
  auto w = LlavaWeights::Load(dir, cfg);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::move(*w) : nullptr;
}

// Every weight the loader exposes, by legacy checkpoint name.
std::vector<std::pair<std::string, const Weight*>> Flatten(const LlavaWeights& w) {
  std::vector<std::pair<std::string, const Weight*>> out;
  const std::string vp = "vision_tower.vision_model.";
  const VisionWeights& v = w.vision();
  out.push_back({vp + "embeddings.patch_embedding.weight", &v.patch_w});
  out.push_back({vp + "embeddings.class_embedding", &v.class_emb});
  out.push_back({vp + "embeddings.position_embedding.weight", &v.pos_emb});
  out.push_back({vp + "pre_layrnorm.weight", &v.pre_ln_w});
  out.push_back({vp + "pre_layrnorm.bias", &v.pre_ln_b});
  for (size_t i = 0; i < v.layers.size(); ++i) {
    const std::string p = vp + "encoder.layers." + std::to_string(i) + ".";
    const ClipLayerWeights& l = v.layers[i];
    for (auto [n, wt] :
         std::vector<std::pair<const char*, const Weight*>>{{"layer_norm1.weight", &l.ln1_w},
                                                            {"layer_norm1.bias", &l.ln1_b},
                                                            {"self_attn.q_proj.weight", &l.q_w},
                                                            {"self_attn.q_proj.bias", &l.q_b},
                                                            {"self_attn.k_proj.weight", &l.k_w},
                                                            {"self_attn.k_proj.bias", &l.k_b},
                                                            {"self_attn.v_proj.weight", &l.v_w},
                                                            {"self_attn.v_proj.bias", &l.v_b},
                                                            {"self_attn.out_proj.weight", &l.o_w},
                                                            {"self_attn.out_proj.bias", &l.o_b},
                                                            {"layer_norm2.weight", &l.ln2_w},
                                                            {"layer_norm2.bias", &l.ln2_b},
                                                            {"mlp.fc1.weight", &l.fc1_w},
                                                            {"mlp.fc1.bias", &l.fc1_b},
                                                            {"mlp.fc2.weight", &l.fc2_w},
                                                            {"mlp.fc2.bias", &l.fc2_b}}) {
      out.push_back({p + n, wt});
    }
  }
  const ProjectorWeights& pj = w.projector();
  out.push_back({"multi_modal_projector.linear_1.weight", &pj.l1_w});
  out.push_back({"multi_modal_projector.linear_1.bias", &pj.l1_b});
  out.push_back({"multi_modal_projector.linear_2.weight", &pj.l2_w});
  out.push_back({"multi_modal_projector.linear_2.bias", &pj.l2_b});
  const TextWeights& t = w.text();
  out.push_back({"language_model.model.embed_tokens.weight", &t.embed});
  out.push_back({"language_model.model.norm.weight", &t.norm});
  out.push_back({"language_model.lm_head.weight", &t.lm_head});
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const std::string p = "language_model.model.layers." + std::to_string(i) + ".";
    const LlamaLayerWeights& l = t.layers[i];
    for (auto [n, wt] : std::vector<std::pair<const char*, const Weight*>>{
             {"input_layernorm.weight", &l.attn_norm},
             {"self_attn.q_proj.weight", &l.q},
             {"self_attn.k_proj.weight", &l.k},
             {"self_attn.v_proj.weight", &l.v},
             {"self_attn.o_proj.weight", &l.o},
             {"post_attention_layernorm.weight", &l.mlp_norm},
             {"mlp.gate_proj.weight", &l.gate},
             {"mlp.up_proj.weight", &l.up},
             {"mlp.down_proj.weight", &l.down}}) {
      out.push_back({p + n, wt});
    }
  }
  return out;
}

void ExpectSameWeights(const LlavaWeights& a, const LlavaWeights& b) {
  auto fa = Flatten(a), fb = Flatten(b);
  ASSERT_EQ(fa.size(), fb.size());
  for (size_t i = 0; i < fa.size(); ++i) {
    const Weight& x = *fa[i].second;
    const Weight& y = *fb[i].second;
    ASSERT_EQ(x.shape, y.shape) << fa[i].first;
    ASSERT_EQ(x.dtype, y.dtype) << fa[i].first;
    ASSERT_EQ(x.data == nullptr, y.data == nullptr) << fa[i].first;
    if (x.data == nullptr) continue;
    ASSERT_EQ(std::memcmp(x.data, y.data, x.bytes()), 0) << fa[i].first;
  }
}

// Decodes every tensor of a checkpoint file to F32, by the name stored in the file.
std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> ReadAll(
    const std::string& path) {
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> out;
  auto file = SafetensorsFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return out;
  for (const TensorInfo& t : (*file)->tensors()) {
    std::vector<float> v(t.numel());
    ConvertToF32(t.dtype, (*file)->Data(t), v.data(), v.size());
    out[t.name] = {t.shape, std::move(v)};
  }
  return out;
}

// Rewrites a safetensors file as F32 after `edit` may rename, drop or add entries.
using TensorMap = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;
void RewriteF32(const std::string& path, const std::function<void(TensorMap&)>& edit) {
  TensorMap tensors = ReadAll(path);
  edit(tensors);
  std::vector<TensorToWrite> list;
  for (const auto& [name, t] : tensors) list.push_back({name, t.first, t.second.data()});
  ASSERT_TRUE(WriteSafetensors(path, list, DType::kF32).ok());
}

template <typename T>
void ExpectStatus(const absl::StatusOr<T>& s, absl::StatusCode code, const std::string& fragment) {
  ASSERT_FALSE(s.ok()) << "loaded; expected error with: " << fragment;
  EXPECT_EQ(s.status().code(), code) << s.status();
  EXPECT_NE(s.status().message().find(fragment), std::string::npos) << s.status();
}

TEST(LlavaWeightsTest, ExpectedTensorsMatchTheLayout) {
  const LlavaConfig cfg = TinyConfig();
  const auto expected = ExpectedLlavaTensors(cfg);
  // 3 vision embeddings + 4 pre/post LN + 3 layers * 16 + 4 projector + 2 + 2 layers * 9 + head.
  EXPECT_EQ(expected.size(), 3u + 4 + 3 * 16 + 4 + 2 + 2 * 9 + 1);
  std::map<std::string, ExpectedTensor> by_name;
  for (const auto& e : expected) EXPECT_TRUE(by_name.emplace(e.name, e).second) << e.name;
  const auto shape = [&](const std::string& n) { return by_name.at(n).shape; };
  using S = std::vector<int64_t>;
  EXPECT_EQ(shape("vision_tower.vision_model.embeddings.patch_embedding.weight"),
            (S{32, 3, 14, 14}));
  EXPECT_EQ(shape("vision_tower.vision_model.embeddings.position_embedding.weight"), (S{5, 32}));
  EXPECT_EQ(shape("vision_tower.vision_model.encoder.layers.2.mlp.fc1.weight"), (S{64, 32}));
  EXPECT_EQ(shape("multi_modal_projector.linear_1.weight"), (S{32, 32}));
  EXPECT_EQ(shape("language_model.model.layers.1.self_attn.q_proj.weight"), (S{32, 32}));
  EXPECT_EQ(shape("language_model.model.layers.1.self_attn.k_proj.weight"), (S{16, 32}));
  EXPECT_EQ(shape("language_model.model.layers.1.mlp.down_proj.weight"), (S{32, 48}));
  EXPECT_EQ(shape("language_model.lm_head.weight"), (S{80, 32}));
  // Layer 2 of 3 lies past vision_feature_layer -2; post_layernorm is never read.
  EXPECT_TRUE(by_name.at("vision_tower.vision_model.encoder.layers.2.mlp.fc1.weight").optional);
  EXPECT_TRUE(by_name.at("vision_tower.vision_model.post_layernorm.weight").optional);
  EXPECT_FALSE(by_name.at("vision_tower.vision_model.encoder.layers.1.mlp.fc1.weight").optional);

  LlavaConfig tied = cfg;
  tied.text.tie_word_embeddings = true;
  tied.projector_bias = false;
  const auto e2 = ExpectedLlavaTensors(tied);
  EXPECT_EQ(e2.size(), expected.size() - 3);
  for (const auto& e : e2) {
    EXPECT_NE(e.name, "language_model.lm_head.weight");
    EXPECT_FALSE(absl::StrContains(e.name, "multi_modal_projector.linear_1.bias"));
  }
}

TEST(LlavaWeightsTest, CanonicalNames) {
  EXPECT_EQ(CanonicalLlavaTensorName("model.language_model.layers.0.mlp.up_proj.weight"),
            "language_model.model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(CanonicalLlavaTensorName("model.vision_tower.vision_model.pre_layrnorm.bias"),
            "vision_tower.vision_model.pre_layrnorm.bias");
  EXPECT_EQ(CanonicalLlavaTensorName("model.multi_modal_projector.linear_2.bias"),
            "multi_modal_projector.linear_2.bias");
  EXPECT_EQ(CanonicalLlavaTensorName("lm_head.weight"), "language_model.lm_head.weight");
  EXPECT_EQ(CanonicalLlavaTensorName("language_model.lm_head.weight"),
            "language_model.lm_head.weight");
  EXPECT_EQ(CanonicalLlavaTensorName("model.lm_head.weight"), "model.lm_head.weight");
}

TEST(LlavaWeightsTest, SingleFileF32IsUsedInPlace) {
  ScratchDir dir;
  const LlavaConfig cfg = TinyConfig();
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir.path(), 1, DType::kF32, 1).ok());
  auto w = LoadOrDie(dir.path(), cfg);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->converted_bytes(), 0);  // header padding keeps every F32 tensor aligned
  EXPECT_EQ(w->mapped_bytes(),
            static_cast<int64_t>(std::filesystem::file_size(dir / "model.safetensors")));
  EXPECT_EQ(w->vision().layers.size(), 2u);  // feature layer -2 of 3
  EXPECT_EQ(w->text().layers.size(), 2u);
  EXPECT_EQ(w->vision().pos_emb.shape, (std::vector<int64_t>{5, 32}));
  EXPECT_EQ(w->text().layers[1].v.shape, (std::vector<int64_t>{16, 32}));
  EXPECT_NE(w->text().lm_head.data, w->text().embed.data);

  const auto file = ReadAll(dir / "model.safetensors");
  for (const auto& [name, weight] : Flatten(*w)) {
    ASSERT_NE(weight->data, nullptr) << name;
    const auto& [shape, values] = file.at(name);
    ASSERT_EQ(weight->shape, shape) << name;
    ASSERT_EQ(std::memcmp(weight->data, values.data(), values.size() * 4), 0) << name;
  }

  // The mapping lives as long as the weights, even after the files are gone.
  const float first = w->text().embed.f32()[0];
  std::filesystem::remove_all(dir.path());
  EXPECT_EQ(w->text().embed.f32()[0], first);
}

class NarrowDtypeTest : public ::testing::TestWithParam<DType> {};

// The loader's rule: matrices that a matmul reads (every linear layer and the token embeddings)
// stay in the file as stored; everything else is converted to F32 once.
bool StaysStored(const std::string& name, const std::vector<int64_t>& shape) {
  return shape.size() == 2 && name.find("position_embedding") == std::string::npos;
}

TEST_P(NarrowDtypeTest, KeepsMatricesAsStoredAndConvertsTheRestOnce) {
  ScratchDir dir;
  const LlavaConfig cfg = TinyConfig();
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir.path(), 2, GetParam(), 1).ok());
  auto w = LoadOrDie(dir.path(), cfg);
  ASSERT_NE(w, nullptr);
  int64_t converted_numel = 0, used_numel = 0;
  for (const auto& e : ExpectedLlavaTensors(cfg)) {
    if (e.optional) continue;
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    used_numel += n;
    if (!StaysStored(e.name, e.shape)) converted_numel += n;
  }
  EXPECT_EQ(w->converted_bytes(), converted_numel * 4);
  EXPECT_EQ(w->stored_bytes(), used_numel * 2);

  auto file = SafetensorsFile::Open(dir / "model.safetensors");
  ASSERT_TRUE(file.ok());
  for (const auto& [name, weight] : Flatten(*w)) {
    const TensorInfo* info = (*file)->Find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->dtype, GetParam());
    if (StaysStored(name, info->shape)) {
      // The file's bytes in the file's dtype (a view of the loader's own mapping: no copy, as
      // converted_bytes() above counts).
      EXPECT_EQ(weight->dtype, GetParam()) << name;
      EXPECT_EQ(std::memcmp(weight->data, (*file)->Data(*info), info->numel() * 2), 0) << name;
      continue;
    }
    ASSERT_EQ(weight->dtype, DType::kF32) << name;
    for (int64_t i = 0; i < info->numel(); ++i) {
      uint16_t raw;
      std::memcpy(&raw, (*file)->Data(*info) + 2 * i, 2);
      const float want = GetParam() == DType::kF16 ? F16ToF32(raw) : BF16ToF32(raw);
      ASSERT_EQ(weight->f32()[i], want) << name << "[" << i << "]";
    }
  }
}

TEST(LlavaWeightsTest, LoadsOnlyTheRequestedPart) {
  ScratchDir dir;
  const LlavaConfig cfg = TinyConfig();
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir.path(), 3, DType::kBF16, 1).ok());
  auto all = LlavaWeights::Load(dir.path(), cfg, ModelParts::kAll);
  auto vision = LlavaWeights::Load(dir.path(), cfg, ModelParts::kVision);
  auto language = LlavaWeights::Load(dir.path(), cfg, ModelParts::kLanguage);
  ASSERT_TRUE(all.ok() && vision.ok() && language.ok());
  EXPECT_TRUE((*vision)->text().layers.empty());
  EXPECT_FALSE((*vision)->text().embed.present());
  EXPECT_FALSE((*vision)->vision().layers.empty());
  EXPECT_TRUE((*language)->vision().layers.empty());
  EXPECT_FALSE((*language)->projector().l1_w.present());
  EXPECT_EQ((*language)->text().layers.size(), (*all)->text().layers.size());
  EXPECT_GT((*vision)->stored_bytes(), 0);
  EXPECT_GT((*language)->stored_bytes(), 0);
  // The two parts split the checkpoint's bytes between them.
  EXPECT_EQ((*vision)->stored_bytes() + (*language)->stored_bytes(), (*all)->stored_bytes());
  EXPECT_EQ(ParseModelParts("language").value(), ModelParts::kLanguage);
  EXPECT_FALSE(ParseModelParts("decoder").ok());
}

INSTANTIATE_TEST_SUITE_P(F16AndBF16, NarrowDtypeTest, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(LlavaWeightsTest, ShardedAndSingleFileLoadEqual) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    ScratchDir single, sharded;
    const LlavaConfig cfg = TinyConfig();
    ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, single.path(), 9, dtype, 1).ok());
    ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, sharded.path(), 9, dtype, 3).ok());
    EXPECT_FALSE(std::filesystem::exists(sharded / "model.safetensors"));
    auto a = LoadOrDie(single.path(), cfg);
    auto b = LoadOrDie(sharded.path(), cfg);
    ASSERT_TRUE(a && b);
    ExpectSameWeights(*a, *b);
    EXPECT_EQ(a->converted_bytes(), b->converted_bytes());
    int64_t shard_bytes = 0;
    for (int k = 1; k <= 3; ++k) {
      shard_bytes += std::filesystem::file_size(
          sharded / ("model-0000" + std::to_string(k) + "-of-00003.safetensors"));
    }
    EXPECT_EQ(b->mapped_bytes(), shard_bytes);
  }
}

TEST(LlavaWeightsTest, NewerTensorNamesLoadTheSameWeights) {
  ScratchDir legacy, newer;
  const LlavaConfig cfg = TinyConfig();
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, legacy.path(), 4, DType::kF32, 1).ok());
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, newer.path(), 4, DType::kF32, 1).ok());
  RewriteF32(newer / "model.safetensors", [](TensorMap& t) {
    TensorMap renamed;
    for (auto& [name, value] : t) {
      std::string n = name;
      if (n == "language_model.lm_head.weight") {
        n = "lm_head.weight";
      } else if (absl::StartsWith(n, "language_model.model.")) {
        n = "model.language_model." + n.substr(strlen("language_model.model."));
      } else {
        n = "model." + n;  // vision_tower.* and multi_modal_projector.*
      }
      renamed[n] = std::move(value);
    }
    t = std::move(renamed);
  });
  auto file = SafetensorsFile::Open(newer / "model.safetensors");
  ASSERT_TRUE(file.ok());
  ASSERT_NE((*file)->Find("model.language_model.embed_tokens.weight"), nullptr);
  ASSERT_EQ((*file)->Find("language_model.model.embed_tokens.weight"), nullptr);
  auto a = LoadOrDie(legacy.path(), cfg);
  auto b = LoadOrDie(newer.path(), cfg);
  ASSERT_TRUE(a && b);
  ExpectSameWeights(*a, *b);
}

TEST(LlavaWeightsTest, TiedEmbeddingsShareTheEmbedding) {
  ScratchDir dir;
  LlavaConfig cfg = TinyConfig();
  cfg.text.tie_word_embeddings = true;
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir.path(), 5, DType::kBF16, 2).ok());
  const std::string index = ReadFile(dir / "model.safetensors.index.json");
  EXPECT_EQ(index.find("lm_head"), std::string::npos);
  auto w = LoadOrDie(dir.path(), cfg);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->text().lm_head.data, w->text().embed.data);
  EXPECT_EQ(w->text().lm_head.shape, (std::vector<int64_t>{80, 32}));
  // Untied, the same checkpoint lacks its lm_head.
  LlavaConfig untied = cfg;
  untied.text.tie_word_embeddings = false;
  ExpectStatus(LlavaWeights::Load(dir.path(), untied), absl::StatusCode::kNotFound,
               "tensor 'language_model.lm_head.weight' [80, 32] is missing");
}

TEST(LlavaWeightsTest, ProjectorWithoutBias) {
  ScratchDir dir;
  LlavaConfig cfg = TinyConfig();
  cfg.projector_bias = false;
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir.path(), 6, DType::kF32, 1).ok());
  auto w = LoadOrDie(dir.path(), cfg);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->projector().l1_b.data, nullptr);
  EXPECT_EQ(w->projector().l2_b.data, nullptr);
  EXPECT_NE(w->projector().l1_w.data, nullptr);
}

TEST(LlavaWeightsTest, UnusedVisionTensorsMayBeAbsent) {
  ScratchDir dir;
  const LlavaConfig cfg = TinyConfig();
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir.path(), 7, DType::kF32, 1).ok());
  RewriteF32(dir / "model.safetensors", [](TensorMap& t) {
    std::erase_if(t, [](const auto& kv) {
      return absl::StrContains(kv.first, "encoder.layers.2.") ||
             absl::StrContains(kv.first, "post_layernorm");
    });
  });
  auto w = LoadOrDie(dir.path(), cfg);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->vision().layers.size(), 2u);
}

TEST(LlavaWeightsTest, UnalignedF32IsCopied) {
  ScratchDir dir;
  const LlavaConfig cfg = TinyConfig();
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir.path(), 8, DType::kF32, 1).ok());
  const std::string path = dir / "model.safetensors";
  const auto before = ReadAll(path);
  // Re-pad the header so the data section starts 2 bytes off a 4-byte boundary.
  std::string bytes = ReadFile(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  std::string header = bytes.substr(8, n);
  while (!header.empty() && header.back() == ' ') header.pop_back();
  while ((8 + header.size()) % 4 != 2) header.push_back(' ');
  WriteFile(path, testing::RawSafetensors(header, bytes.substr(8 + n)));

  auto w = LoadOrDie(dir.path(), cfg);
  ASSERT_NE(w, nullptr);
  EXPECT_GT(w->converted_bytes(), 0);
  for (const auto& [name, weight] : Flatten(*w)) {
    ASSERT_EQ(reinterpret_cast<uintptr_t>(weight->data) % alignof(float), 0u) << name;
    const auto& values = before.at(name).second;
    ASSERT_EQ(std::memcmp(weight->data, values.data(), values.size() * 4), 0) << name;
  }
}

// ---- bad checkpoints ----------------------------------------------------------------------

// TinyConfig()'s random checkpoint (seed 1) in a scratch directory, for the tests of what Load
// rejects.
class LlavaWeightsErrorTest : public ::testing::Test {
 protected:
  absl::Status WriteCheckpoint(int shards, DType dtype = DType::kF32) {
    return WriteRandomLlavaCheckpoint(cfg_, dir_.path(), 1, dtype, shards);
  }
  // Load fails with `code`, its message containing `fragment`.
  void ExpectLoadFails(absl::StatusCode code, const std::string& fragment) {
    ExpectStatus(LlavaWeights::Load(dir_.path(), cfg_), code, fragment);
  }

  ScratchDir dir_;
  LlavaConfig cfg_ = TinyConfig();
};

TEST_F(LlavaWeightsErrorTest, MissingTensor) {
  ASSERT_TRUE(WriteCheckpoint(1).ok());
  RewriteF32(dir_ / "model.safetensors",
             [](TensorMap& t) { t.erase("language_model.model.layers.1.mlp.up_proj.weight"); });
  ExpectLoadFails(absl::StatusCode::kNotFound,
                  "model.safetensors: tensor 'language_model.model.layers.1.mlp.up_proj.weight' "
                  "[48, 32] is missing");
}

TEST_F(LlavaWeightsErrorTest, ShapeMismatch) {
  ASSERT_TRUE(WriteCheckpoint(2, DType::kF16).ok());
  cfg_.text.intermediate_size = 64;
  ExpectLoadFails(absl::StatusCode::kInvalidArgument,
                  ".safetensors: tensor 'language_model.model.layers.0.mlp.gate_proj.weight': "
                  "shape [48, 32], expected [64, 32]");
}

TEST_F(LlavaWeightsErrorTest, IndexNamesMissingShard) {
  ASSERT_TRUE(WriteCheckpoint(2).ok());
  std::filesystem::remove(dir_ / "model-00002-of-00002.safetensors");
  ExpectLoadFails(absl::StatusCode::kNotFound,
                  "model.safetensors.index.json: shard 'model-00002-of-00002.safetensors' (named "
                  "for tensor '");
}

// A shard name longer than the file system allows (found by safetensors_index_fuzz) is a missing
// shard, not an exception out of std::filesystem.
TEST_F(LlavaWeightsErrorTest, ShardNameTooLongForTheFileSystem) {
  ASSERT_TRUE(WriteCheckpoint(2).ok());
  const std::string shard = std::string(300, 'x') + ".safetensors";
  WriteFile(dir_ / "model.safetensors.index.json",
            nlohmann::json{{"weight_map", {{"language_model.model.norm.weight", shard}}}}.dump());
  const std::string named = "' (named for tensor 'language_model.model.norm.weight')";
  ExpectLoadFails(absl::StatusCode::kNotFound, "shard '" + shard + named + " does not exist");
  // A model directory path that is too long is likewise "not found".
  ExpectStatus(LlavaWeights::Load(dir_.path() + "/" + std::string(300, 'y'), cfg_),
               absl::StatusCode::kNotFound, "neither model.safetensors nor");
}

TEST_F(LlavaWeightsErrorTest, TensorMissingFromItsShard) {
  ASSERT_TRUE(WriteCheckpoint(2).ok());
  auto index = nlohmann::json::parse(ReadFile(dir_ / "model.safetensors.index.json"));
  const std::string name = "language_model.model.norm.weight";
  ASSERT_EQ(index["weight_map"][name], "model-00002-of-00002.safetensors");
  index["weight_map"][name] = "model-00001-of-00002.safetensors";
  WriteFile(dir_ / "model.safetensors.index.json", index.dump());
  ExpectLoadFails(absl::StatusCode::kNotFound,
                  "tensor 'language_model.model.norm.weight' is missing from its shard "
                  "'model-00001-of-00002.safetensors'");
}

TEST_F(LlavaWeightsErrorTest, TensorInTwoShards) {
  ASSERT_TRUE(WriteCheckpoint(2).ok());
  const auto first = ReadAll(dir_ / "model-00001-of-00002.safetensors");
  const std::string dup = "vision_tower.vision_model.embeddings.class_embedding";
  ASSERT_TRUE(first.count(dup));
  RewriteF32(dir_ / "model-00002-of-00002.safetensors",
             [&](TensorMap& t) { t[dup] = first.at(dup); });
  ExpectLoadFails(absl::StatusCode::kInvalidArgument, "tensor '" + dup + "' appears twice");
}

TEST_F(LlavaWeightsErrorTest, BothNamingConventionsForOneTensor) {
  ASSERT_TRUE(WriteCheckpoint(1).ok());
  RewriteF32(dir_ / "model.safetensors",
             [](TensorMap& t) { t["lm_head.weight"] = t.at("language_model.lm_head.weight"); });
  ExpectLoadFails(absl::StatusCode::kInvalidArgument,
                  "tensor 'language_model.lm_head.weight' appears twice: as '");
}

TEST_F(LlavaWeightsErrorTest, BadIndexFiles) {
  ASSERT_TRUE(WriteCheckpoint(2).ok());
  const std::string index = dir_ / "model.safetensors.index.json";
  WriteFile(index, "{\"weight_map\": ");
  ExpectLoadFails(absl::StatusCode::kInvalidArgument,
                  "model.safetensors.index.json: malformed JSON");
  WriteFile(index, R"({"weight_map": ["a"]})");
  ExpectLoadFails(absl::StatusCode::kInvalidArgument,
                  "expected an object with a \"weight_map\" object");
  WriteFile(index, R"({"metadata": 5, "weight_map": {"x": "model-00001-of-00002.safetensors"}})");
  ExpectLoadFails(absl::StatusCode::kInvalidArgument,
                  "\"metadata\" is a JSON number, expected an object");
  WriteFile(index, R"({"weight_map": {"x": "../model-00001-of-00002.safetensors"}})");
  ExpectLoadFails(absl::StatusCode::kInvalidArgument,
                  "weight_map['x'] is \"../model-00001-of-00002.safetensors\", expected a file "
                  "name in the same folder");
}

TEST_F(LlavaWeightsErrorTest, NoCheckpointOrBrokenFile) {
  ExpectLoadFails(absl::StatusCode::kNotFound,
                  "neither model.safetensors nor model.safetensors.index.json exists");
  WriteFile(dir_ / "model.safetensors", "short");
  ExpectLoadFails(absl::StatusCode::kInvalidArgument,
                  "model.safetensors: file is 5 bytes, too short");
}

}  // namespace
}  // namespace hap
