// Tests of WriteRandomLlavaCheckpoint: determinism, layout, initial scales, and agreement with
// the PyTorch reference (tools/pytorch/llava_model.py), which must read the same float values.
#include "runtime/tiny/tiny_checkpoint.h"

#include "base/rng.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/io/safetensors.h"
#include "runtime/io/weights.h"
#include "tests/io/test_util.h"

namespace hap {
namespace {

using ::hap::testing::ReadFile;
using ::hap::testing::ScratchDir;
using ::hap::testing::TinyConfig;
using ::hap::testing::WriteFile;

using TensorMap = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;

// Every tensor of a checkpoint directory (single or sharded), decoded to F32.
TensorMap ReadCheckpoint(const std::string& dir) {
  TensorMap out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name != "model.safetensors" && name.rfind("model-", 0) != 0) continue;
    auto file = SafetensorsFile::Open(entry.path().string());
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) continue;
    for (const TensorInfo& t : (*file)->tensors()) {
      std::vector<float> v(t.numel());
      ConvertToF32(t.dtype, (*file)->Data(t), v.data(), v.size());
      EXPECT_TRUE(out.emplace(t.name, std::make_pair(t.shape, std::move(v))).second) << t.name;
    }
  }
  return out;
}

struct Moments {
  double mean = 0, stddev = 0;
};
Moments MomentsOf(const std::vector<float>& v) {
  double s = 0, s2 = 0;
  for (float x : v) s += x;
  const double mean = s / v.size();
  for (float x : v) s2 += (x - mean) * (x - mean);
  return {mean, std::sqrt(s2 / v.size())};
}

TEST(RngTest, MatchesReferenceXoshiro256StarStar) {
  // Reference values from an independent implementation of splitmix64-seeded xoshiro256**.
  Rng zero(0);
  EXPECT_EQ(zero.Next(), 0x99ec5f36cb75f2b4ull);
  EXPECT_EQ(zero.Next(), 0xbf6e1f784956452aull);
  EXPECT_EQ(zero.Next(), 0x1a5f849d4933e6e0ull);
  EXPECT_EQ(zero.Next(), 0x6aa594f1262d2d2cull);
  Rng answer(42);
  EXPECT_EQ(answer.Next(), 0x15780b2e0c2ec716ull);
  EXPECT_EQ(answer.Next(), 0x6104d9866d113a7eull);
}

TEST(RngTest, NormalHasUnitMomentsAndGaussianTails) {
  Rng rng(3);
  const int n = 400000;
  double s = 0, s2 = 0, s4 = 0;
  int beyond2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = rng.Normal();
    ASSERT_TRUE(std::isfinite(x));
    s += x;
    s2 += x * x;
    s4 += x * x * x * x;
    beyond2 += std::fabs(x) > 2.0;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
  EXPECT_NEAR(s4 / n, 3.0, 0.06);                                // kurtosis of a normal
  EXPECT_NEAR(static_cast<double>(beyond2) / n, 0.0455, 0.002);  // P(|x| > 2)
  for (int i = 0; i < 1000; ++i) {
    const double u = rng.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(TinyCheckpointTest, DeterministicPerSeedAndIndependentOfDtype) {
  ScratchDir a, b, c, bf;
  const LlavaConfig cfg = TinyConfig();
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, a.path(), 11, DType::kF32, 1).ok());
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, b.path(), 11, DType::kF32, 1).ok());
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, c.path(), 12, DType::kF32, 1).ok());
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, bf.path(), 11, DType::kBF16, 1).ok());
  EXPECT_EQ(ReadFile(a / "model.safetensors"), ReadFile(b / "model.safetensors"));
  EXPECT_NE(ReadFile(a / "model.safetensors"), ReadFile(c / "model.safetensors"));
  // config.json is the config with torch_dtype naming the stored dtype.
  LlavaConfig with_dtype = cfg;
  with_dtype.torch_dtype = "float32";
  EXPECT_EQ(ReadFile(a / "config.json"), LlavaConfigToJson(with_dtype));
  with_dtype.torch_dtype = "bfloat16";
  EXPECT_EQ(ReadFile(bf / "config.json"), LlavaConfigToJson(with_dtype));

  const TensorMap f32 = ReadCheckpoint(a.path());
  const TensorMap bf16 = ReadCheckpoint(bf.path());
  ASSERT_EQ(f32.size(), bf16.size());
  for (const auto& [name, t] : f32) {
    const auto& other = bf16.at(name).second;
    for (size_t i = 0; i < t.second.size(); ++i) {
      ASSERT_EQ(other[i], BF16ToF32(F32ToBF16(t.second[i]))) << name << "[" << i << "]";
    }
  }
  // Different tensors of the same shape get different values.
  EXPECT_NE(f32.at("language_model.model.layers.0.self_attn.q_proj.weight").second,
            f32.at("language_model.model.layers.1.self_attn.q_proj.weight").second);
}

TEST(TinyCheckpointTest, ShardedLayoutAndIndex) {
  ScratchDir dir;
  const LlavaConfig cfg = TinyConfig();
  std::vector<CheckpointProgress> progress;
  ASSERT_TRUE(
      WriteRandomLlavaCheckpoint(cfg, dir.path(), 3, DType::kF16, 4,
                                 [&](const CheckpointProgress& p) { progress.push_back(p); })
          .ok());
  const auto index = nlohmann::json::parse(ReadFile(dir / "model.safetensors.index.json"));
  const auto expected = ExpectedLlavaTensors(cfg);
  uint64_t total = 0;
  for (const auto& e : expected) {
    uint64_t n = 2;
    for (int64_t d : e.shape) n *= d;
    total += n;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  // One progress report per file, in order, the bytes growing to the total.
  ASSERT_EQ(progress.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(progress[k].file, absl::StrCat("model-0000", k + 1, "-of-00004.safetensors"));
    EXPECT_EQ(progress[k].files_done, k + 1);
    EXPECT_EQ(progress[k].files, 4);
    EXPECT_EQ(progress[k].bytes_total, total);
    if (k > 0) {
      EXPECT_GT(progress[k].bytes_done, progress[k - 1].bytes_done);
    }
  }
  EXPECT_EQ(progress.back().bytes_done, total);
  const auto& weight_map = index["weight_map"];
  ASSERT_EQ(weight_map.size(), expected.size());
  std::map<std::string, int> per_shard;
  for (const auto& e : expected) {
    ASSERT_TRUE(weight_map.contains(e.name)) << e.name;
    const std::string shard = weight_map[e.name];
    ++per_shard[shard];
    auto file = SafetensorsFile::Open(dir / shard);
    ASSERT_TRUE(file.ok()) << file.status();
    const TensorInfo* info = (*file)->Find(e.name);
    ASSERT_NE(info, nullptr) << e.name << " not in " << shard;
    EXPECT_EQ(info->shape, e.shape);
    EXPECT_EQ(info->dtype, DType::kF16);
    EXPECT_EQ((*file)->metadata().at("format"), "pt");
  }
  EXPECT_EQ(per_shard.size(), 4u);
  for (int k = 1; k <= 4; ++k) {
    EXPECT_GT(per_shard[absl::StrCat("model-0000", k, "-of-00004.safetensors")], 0) << k;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));

  // Rewriting as a single file in the same folder removes the old index and shards, which the
  // loader would otherwise prefer.
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir.path(), 3, DType::kF32, 1).ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model-00001-of-00004.safetensors"));
  auto w = LlavaWeights::Load(dir.path(), cfg);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->converted_bytes(), 0);  // the F32 file, not the old F16 shards
}

TEST(TinyCheckpointTest, ManySmallShardsEachHoldATensor) {
  // More shards than "equal byte slices" would fill: every shard still gets a tensor.
  ScratchDir dir;
  const LlavaConfig cfg = TinyConfig();
  const int n = static_cast<int>(ExpectedLlavaTensors(cfg).size());
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir.path(), 3, DType::kBF16, n).ok());
  auto w = LlavaWeights::Load(dir.path(), cfg);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->text().layers.size(), 2u);
}

TEST(TinyCheckpointTest, RejectsBadArguments) {
  ScratchDir dir;
  LlavaConfig cfg = TinyConfig();
  auto zero = WriteRandomLlavaCheckpoint(cfg, dir.path(), 1, DType::kF32, 0);
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.message().find("shards = 0 must be in [1, "), std::string::npos) << zero;
  auto too_many = WriteRandomLlavaCheckpoint(cfg, dir.path(), 1, DType::kF32, 100000);
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  cfg.text.num_attention_heads = 5;
  auto bad_cfg = WriteRandomLlavaCheckpoint(cfg, dir.path(), 1, DType::kF32, 1);
  EXPECT_EQ(bad_cfg.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_cfg.message().find("num_attention_heads (5) must divide"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
}

TEST(TinyCheckpointTest, InitialScalesFollowTheRecipe) {
  ScratchDir dir;
  LlavaConfig cfg = TinyConfig();
  cfg.text.hidden_size = 128;
  cfg.text.num_attention_heads = 4;
  cfg.text.head_dim = 32;
  cfg.text.intermediate_size = 256;
  cfg.text.num_hidden_layers = 8;
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir.path(), 5, DType::kF32, 1).ok());
  const TensorMap t = ReadCheckpoint(dir.path());
  const auto check = [&](const std::string& name, double mean, double stddev) {
    const Moments m = MomentsOf(t.at(name).second);
    EXPECT_NEAR(m.mean, mean, 0.1 * stddev + 1e-3) << name;
    EXPECT_NEAR(m.stddev, stddev, 0.1 * stddev) << name;
  };
  const std::string l = "language_model.model.layers.3.";
  check("language_model.model.embed_tokens.weight", 0.0, 1.0);
  check(l + "input_layernorm.weight", 1.0, 0.05);
  check(l + "self_attn.q_proj.weight", 0.0, 1.25 / std::sqrt(128.0));
  check(l + "self_attn.k_proj.weight", 0.0, 1.25 / std::sqrt(128.0));
  check(l + "self_attn.v_proj.weight", 0.0, 1.0 / std::sqrt(128.0));
  check(l + "self_attn.o_proj.weight", 0.0, 1.0 / std::sqrt(2.0 * 8) / std::sqrt(128.0));
  check(l + "mlp.down_proj.weight", 0.0, 1.0 / std::sqrt(2.0 * 8) / std::sqrt(256.0));
  check(l + "mlp.gate_proj.weight", 0.0, 1.0 / std::sqrt(128.0));
  check("language_model.lm_head.weight", 0.0, 1.0 / std::sqrt(128.0));
  check("multi_modal_projector.linear_2.weight", 0.0, std::sqrt(2.0) / std::sqrt(128.0));
  // Conv fan-in is C * P * P.
  check("vision_tower.vision_model.embeddings.patch_embedding.weight", 0.0,
        1.0 / std::sqrt(3.0 * 14 * 14));
  check("vision_tower.vision_model.encoder.layers.0.mlp.fc1.bias", 0.0, 0.02);
}

// ---- agreement with the PyTorch reference -------------------------------------------------

bool PythonHasTorchAndNumpy() {
  return std::system("/usr/bin/python3 -c 'import numpy, torch' >/dev/null 2>&1") == 0;
}

// Runs `script` with /usr/bin/python3; returns its exit status, logging its output on failure.
int RunPython(const ScratchDir& dir, const std::string& script) {
  const std::string path = dir / "check.py";
  WriteFile(path, script);
  const std::string log = dir / "python.log";
  const int rc = std::system(("/usr/bin/python3 " + path + " > " + log + " 2>&1").c_str());
  if (rc != 0) ADD_FAILURE() << "python failed:\n" << ReadFile(log);
  return rc;
}

// A config that reaches the depths the init recipe promises to handle.
LlavaConfig DeepConfig() {
  LlavaConfig c = TinyConfig();
  c.vision.hidden_size = 64;
  c.vision.intermediate_size = 128;
  c.vision.num_hidden_layers = 24;
  c.vision.image_size = 56;  // 16 patches
  c.text.vocab_size = 256;
  c.text.hidden_size = 64;
  c.text.intermediate_size = 172;
  c.text.num_hidden_layers = 32;
  c.text.num_attention_heads = 8;
  c.text.num_key_value_heads = 2;
  c.text.head_dim = 8;
  c.image_token_index = 255;
  c.image_seq_length = 16;
  return c;
}

TEST(TinyCheckpointPythonTest, ReferenceReadsTheSameValues) {
  if (!PythonHasTorchAndNumpy()) GTEST_SKIP() << "/usr/bin/python3 lacks numpy or torch";
  ScratchDir dir;
  const LlavaConfig cfg = TinyConfig();
  const std::vector<std::pair<std::string, std::pair<DType, int>>> variants = {
      {"f32", {DType::kF32, 1}}, {"f16", {DType::kF16, 2}}, {"bf16", {DType::kBF16, 3}}};
  for (const auto& [sub, how] : variants) {
    ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir / sub, 21, how.first, how.second).ok());
  }
  // The reference decodes every checkpoint and re-writes it as F32; it also loads it into its
  // model (config.json fields, tensor names and shapes must all agree), and encodes the F32
  // values to F16/BF16 with its own rounding for the reverse comparison.
  const std::string script =
      absl::StrReplaceAll(R"PY(
import json, sys
sys.path.insert(0, "@SRC@/tools/pytorch")
import numpy as np
import llava_model as m
root = "@DIR@"
summary = {}
for sub in ("f32", "f16", "bf16"):
    d = root + "/" + sub
    tensors = m.read_checkpoint_tensors(d)
    m.write_safetensors(d + "/py_decoded.f32", tensors, "F32")
    model = m.load_llava(d)
    summary[sub] = {"vision": model.cfg.vision, "text": model.cfg.text,
                    "num_visual_tokens": model.cfg.num_visual_tokens,
                    "projector_bias": model.cfg.projector_bias,
                    "n_tensors": len(tensors)}
t = m.read_checkpoint_tensors(root + "/f32")
edge = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-11, 1 + 3 * 2**-11, 65504, 65519, 65520,
                 2**-24, 2**-25, 1.5 * 2**-24, 1e-30, -0.0, 3.0e38, -7.25], dtype=np.float32)
t["edge"] = edge
m.write_safetensors(root + "/py.f16", t, "F16")
m.write_safetensors(root + "/py.bf16", t, "BF16")
m.write_safetensors(root + "/py.f32", t, "F32")
with open(root + "/summary.json", "w") as f:
    json.dump(summary, f)
)PY",
                          {{"@SRC@", HAP_SOURCE_DIR}, {"@DIR@", dir.path()}});
  ASSERT_EQ(RunPython(dir, script), 0);

  for (const auto& [sub, how] : variants) {
    SCOPED_TRACE(sub);
    const TensorMap ours = ReadCheckpoint(dir / sub);
    auto theirs = SafetensorsFile::Open(dir / sub + "/py_decoded.f32");
    ASSERT_TRUE(theirs.ok()) << theirs.status();
    ASSERT_EQ((*theirs)->tensors().size(), ours.size());
    for (const TensorInfo& info : (*theirs)->tensors()) {
      ASSERT_EQ(info.dtype, DType::kF32);
      const auto& [shape, values] = ours.at(info.name);
      ASSERT_EQ(info.shape, shape) << info.name;
      ASSERT_EQ(std::memcmp((*theirs)->Data(info), values.data(), values.size() * 4), 0)
          << info.name << ": Python decodes different float values";
    }
    // The loader's views agree too: widened through the same path as ReadCheckpoint (they keep
    // the file's dtype).
    auto w = LlavaWeights::Load(dir / sub, cfg);
    ASSERT_TRUE(w.ok()) << w.status();
    const auto& embed = ours.at("language_model.model.embed_tokens.weight").second;
    const TensorView& view = (*w)->text().embed;
    std::vector<float> widened(embed.size());
    ConvertToF32(view.dtype, view.data, widened.data(), widened.size());
    ASSERT_EQ(std::memcmp(widened.data(), embed.data(), embed.size() * 4), 0);
  }

  // What the reference understood from our config.json.
  const auto summary = nlohmann::json::parse(ReadFile(dir / "summary.json"));
  for (const char* sub : {"f32", "f16", "bf16"}) {
    const auto& s = summary[sub];
    EXPECT_EQ(s["vision"]["hidden_size"], cfg.vision.hidden_size);
    EXPECT_EQ(s["vision"]["num_hidden_layers"], cfg.vision.num_hidden_layers);
    EXPECT_EQ(s["vision"]["image_size"], cfg.vision.image_size);
    EXPECT_EQ(s["vision"]["patch_size"], cfg.vision.patch_size);
    EXPECT_EQ(s["vision"]["hidden_act"], cfg.vision.hidden_act);
    EXPECT_EQ(s["text"]["vocab_size"], cfg.text.vocab_size);
    EXPECT_EQ(s["text"]["num_key_value_heads"], cfg.text.num_key_value_heads);
    EXPECT_EQ(s["text"]["head_dim"], cfg.text.head_dim);
    EXPECT_EQ(s["text"]["intermediate_size"], cfg.text.intermediate_size);
    EXPECT_FLOAT_EQ(s["text"]["rms_norm_eps"].get<float>(), cfg.text.rms_norm_eps);
    EXPECT_FLOAT_EQ(s["text"]["rope_theta"].get<float>(), cfg.text.rope_theta);
    EXPECT_EQ(s["num_visual_tokens"], cfg.num_visual_tokens());
    EXPECT_EQ(s["projector_bias"], cfg.projector_bias);
    EXPECT_EQ(s["n_tensors"], ExpectedLlavaTensors(cfg).size());
  }

  // Python's F16/BF16 encodings of the same F32 values are bit-identical to ours.
  auto f32 = SafetensorsFile::Open(dir / "py.f32");
  ASSERT_TRUE(f32.ok()) << f32.status();
  for (DType d : {DType::kF16, DType::kBF16}) {
    auto narrow = SafetensorsFile::Open(dir / (d == DType::kF16 ? "py.f16" : "py.bf16"));
    ASSERT_TRUE(narrow.ok()) << narrow.status();
    for (const TensorInfo& info : (*f32)->tensors()) {
      const TensorInfo* n = (*narrow)->Find(info.name);
      ASSERT_NE(n, nullptr) << info.name;
      ASSERT_EQ(n->dtype, d);
      std::vector<float> values(info.numel());
      std::memcpy(values.data(), (*f32)->Data(info), values.size() * 4);
      std::vector<uint8_t> ours(values.size() * 2);
      ConvertFromF32(d, values.data(), ours.data(), values.size());
      ASSERT_EQ(std::memcmp(ours.data(), (*narrow)->Data(*n), ours.size()), 0)
          << DTypeName(d) << " encodings differ in " << info.name;
    }
  }
}

TEST(TinyCheckpointPythonTest, ActivationsStayOrderOneThroughDeepStacks) {
  if (!PythonHasTorchAndNumpy()) GTEST_SKIP() << "/usr/bin/python3 lacks numpy or torch";
  ScratchDir dir;
  const LlavaConfig cfg = DeepConfig();
  ASSERT_TRUE(WriteRandomLlavaCheckpoint(cfg, dir / "deep", 1, DType::kF32, 1).ok());
  // Runs the reference model on a random image and prompt and reports per-layer statistics:
  // residual-stream std, and for the last prompt row the attention entropy (normalised by
  // log of the keys it sees) and the largest attention weight, averaged over heads.
  const std::string script =
      absl::StrReplaceAll(R"PY(
import json, math, sys
sys.path.insert(0, "@SRC@/tools/pytorch")
import torch
import llava_model as m
torch.manual_seed(0)
torch.set_num_threads(2)
model = m.load_llava("@DIR@/deep")
t = model.cfg.text
with torch.no_grad():
    size = model.cfg.vision["image_size"]
    feats = model.vision_features(torch.randn(1, 3, size, size))
    visual = model.project(feats)
    ids = torch.randint(0, t["vocab_size"] - 1, (1, 24))
    x = torch.cat([model.embed_tokens(ids[:, :6]), visual, model.embed_tokens(ids[:, 6:])], 1)
    s = x.shape[1]
    cos, sin = m.rope_cos_sin(torch.arange(s)[None], t["head_dim"], t["rope_theta"])
    mask = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)[None, None]
    stds, ents, maxps = [], [], []
    for layer in model.layers:
        x, _, p = layer(x, cos, sin, mask)
        last = p[0, :, -1, :]
        stds.append(x.std().item())
        ents.append((-(last * last.clamp_min(1e-30).log()).sum(-1) / math.log(s)).mean().item())
        maxps.append(last.max(-1).values.mean().item())
    logits = model.logits(model.norm(x))
out = {"feature_std": feats.std().item(), "visual_std": visual.std().item(),
       "residual_std": stds, "entropy": ents, "max_prob": maxps,
       "logit_std": logits.std().item(), "finite": bool(torch.isfinite(logits).all())}
with open("@DIR@/stats.json", "w") as f:
    json.dump(out, f)
)PY",
                          {{"@SRC@", HAP_SOURCE_DIR}, {"@DIR@", dir.path()}});
  ASSERT_EQ(RunPython(dir, script), 0);
  const auto stats = nlohmann::json::parse(ReadFile(dir / "stats.json"));
  SCOPED_TRACE(stats.dump());
  EXPECT_TRUE(stats["finite"].get<bool>());
  EXPECT_GT(stats["feature_std"].get<double>(), 0.5);
  EXPECT_LT(stats["feature_std"].get<double>(), 3.0);
  EXPECT_GT(stats["visual_std"].get<double>(), 0.4);
  EXPECT_LT(stats["visual_std"].get<double>(), 2.5);
  EXPECT_GT(stats["logit_std"].get<double>(), 0.3);
  EXPECT_LT(stats["logit_std"].get<double>(), 3.0);
  ASSERT_EQ(stats["residual_std"].size(), 32u);
  for (size_t l = 0; l < 32; ++l) {
    SCOPED_TRACE(l);
    EXPECT_GT(stats["residual_std"][l].get<double>(), 0.5);
    EXPECT_LT(stats["residual_std"][l].get<double>(), 3.0);
    // Neither uniform (entropy 1) nor one-hot (entropy 0, max prob 1).
    EXPECT_GT(stats["entropy"][l].get<double>(), 0.3);
    EXPECT_LT(stats["entropy"][l].get<double>(), 0.97);
    EXPECT_LT(stats["max_prob"][l].get<double>(), 0.9);
  }
}

}  // namespace
}  // namespace hap
