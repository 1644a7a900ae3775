// Deterministic random llava-hf checkpoints for tests, benchmarks and `hapctl make-tiny`.
#include "runtime/tiny/tiny_checkpoint.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "base/rng.h"
#include "base/status_macros.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/weights.h"

namespace hap {
namespace {

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

// Q/K gain: with unit-variance inputs the attention logits q.k/sqrt(hd) get std ~gain^2 = 1.56,
// so softmax rows are peaked but not one-hot.
constexpr double kQKGain = 1.25;
// After GELU the second moment of a unit normal drops to ~0.43; sqrt(2) brings the projector's
// output (the visual tokens) back near the unit scale of the text embeddings.
constexpr double kProjectorOutGain = std::numbers::sqrt2;

TensorInit InitFor(const ExpectedTensor& t, const LlavaConfig& cfg) {
  const std::string& n = t.name;
  if (absl::EndsWith(n, ".bias")) return {0.0, 0.02};
  if (t.shape.size() == 1 && absl::StrContains(n, "norm")) return {1.0, 0.05};
  if (absl::EndsWith(n, "class_embedding") || absl::EndsWith(n, "position_embedding.weight") ||
      absl::EndsWith(n, "embed_tokens.weight")) {
    return {0.0, 1.0};
  }
  // Linear [out, in] or conv [out, C, P, P]: fan_in is everything after the first dimension.
  int64_t fan_in = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) fan_in *= t.shape[i];
  double gain = 1.0;
  const bool vision = absl::StartsWith(n, "vision_tower.");
  if (absl::StrContains(n, "out_proj") || absl::StrContains(n, "fc2") ||
      absl::StrContains(n, "o_proj") || absl::StrContains(n, "down_proj")) {
    // Residual writers: 2 per layer, each adding at most ~1/(2L) variance, so the residual
    // stream stays within ~2x its input variance however deep the stack.
    const int layers = vision ? cfg.vision.num_hidden_layers : cfg.text.num_hidden_layers;
    gain = 1.0 / std::sqrt(2.0 * layers);
  } else if (absl::StrContains(n, "q_proj") || absl::StrContains(n, "k_proj")) {
    gain = kQKGain;
  } else if (absl::StrContains(n, "linear_2")) {
    gain = kProjectorOutGain;
  }
  return {0.0, gain / std::sqrt(static_cast<double>(std::max<int64_t>(fan_in, 1)))};
}

std::vector<float> RandomTensor(const ExpectedTensor& t, const TensorInit& init, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  Rng rng(seed ^ Fnv1a64(t.name));
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = static_cast<float>(init.mean + init.stddev * rng.Normal());
  return values;
}

// Checkpoint files of an earlier run in `dir` that this run does not rewrite would be picked
// up by the loader (an old index wins over a new model.safetensors), so they are removed.
absl::Status RemoveStaleCheckpointFiles(const std::string& dir) {
  static const std::regex kShard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "model.safetensors" || name == "model.safetensors.index.json" ||
        std::regex_match(name, kShard)) {
      std::filesystem::remove(entry.path(), ec);
      if (ec)
        return absl::UnavailableError(absl::StrCat(entry.path().string(), ": ", ec.message()));
    }
  }
  if (ec) return absl::UnavailableError(absl::StrCat(dir, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status CheckShards(int shards, size_t tensors) {
  if (shards >= 1 && static_cast<size_t>(shards) <= tensors) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("shards = ", shards, " must be in [1, ", tensors, "] (the tensor count)"));
}

}  // namespace

const char* TorchDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kF32: break;
  }
  return "float32";
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::Status WriteRandomLlavaCheckpoint(
    const LlavaConfig& cfg_in, const std::string& dir, uint64_t seed, DType dtype, int shards,
    const std::function<void(const CheckpointProgress&)>& progress) {
  LlavaConfig cfg = cfg_in;
  cfg.torch_dtype = TorchDTypeName(dtype);
  // Only configs the loader accepts are written: validate through the JSON we will write.
  const std::string config_json = LlavaConfigToJson(cfg);
  HAP_RETURN_IF_ERROR(ParseLlavaConfig(config_json, "config").status());
  const std::vector<ExpectedTensor> tensors = ExpectedLlavaTensors(cfg);
  HAP_RETURN_IF_ERROR(CheckShards(shards, tensors.size()));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  HAP_RETURN_IF_ERROR(WriteTextFile(dir + "/config.json", config_json));
  return WriteRandomTensors(
      tensors, [&](const ExpectedTensor& t) { return InitFor(t, cfg); }, dir, seed, dtype, shards,
      progress);
}

absl::Status WriteRandomTensors(const std::vector<ExpectedTensor>& tensors,
                                const std::function<TensorInit(const ExpectedTensor&)>& init,
                                const std::string& dir, uint64_t seed, DType dtype, int shards,
                                const std::function<void(const CheckpointProgress&)>& progress) {
  HAP_RETURN_IF_ERROR(CheckShards(shards, tensors.size()));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  HAP_RETURN_IF_ERROR(RemoveStaleCheckpointFiles(dir));

  // Shard k takes the tensors whose running byte offset falls in the k-th equal slice of the
  // total, each shard getting at least one tensor.
  std::vector<uint64_t> bytes(tensors.size());
  uint64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t n = DTypeSize(dtype);
    for (int64_t d : tensors[i].shape) n *= static_cast<uint64_t>(d);
    bytes[i] = n;
    total += n;
  }
  std::vector<int> shard_of(tensors.size());
  int s = 0;
  bool current_empty = true;
  uint64_t before = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t remaining = tensors.size() - i;
    const bool past_slice =
        static_cast<double>(before) * shards >= static_cast<double>(total) * (s + 1);
    if (!current_empty && s < shards - 1 &&
        (past_slice || remaining == static_cast<size_t>(shards - 1 - s))) {
      ++s;
    }
    shard_of[i] = s;
    current_empty = false;
    before += bytes[i];
  }

  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t written = 0;
  for (int k = 0; k < shards; ++k) {
    const std::string file_name =
        shards == 1 ? "model.safetensors"
                    : absl::StrFormat("model-%05d-of-%05d.safetensors", k + 1, shards);
    // One shard's values in memory at a time.
    std::vector<std::vector<float>> values;
    std::vector<TensorToWrite> to_write;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (shard_of[i] != k) continue;
      values.push_back(RandomTensor(tensors[i], init(tensors[i]), seed));
      weight_map[tensors[i].name] = file_name;
    }
    size_t j = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (shard_of[i] != k) continue;
      to_write.push_back({tensors[i].name, tensors[i].shape, values[j++].data()});
      written += bytes[i];
    }
    HAP_RETURN_IF_ERROR(WriteSafetensors(dir + "/" + file_name, to_write, dtype, metadata));
    if (progress) progress({file_name, k + 1, shards, written, total});
  }
  if (shards > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                    {"weight_map", std::move(weight_map)}};
    HAP_RETURN_IF_ERROR(WriteTextFile(dir + "/model.safetensors.index.json", index.dump(2) + "\n"));
  }
  return absl::OkStatus();
}

}  // namespace hap
