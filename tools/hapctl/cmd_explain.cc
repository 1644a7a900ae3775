// hapctl explain: runs one request with HAP (or uniform) and writes what it kept and why —
// explain.json (per layer: head PAQ and weights; per group: layer weights, token scores, kept
// tokens) and PNGs: the image with the kept patches highlighted, and a heat map of each
// group's token scores.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/common/status_macros.h"
#include "runtime/image/clip_preprocess.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/pipeline.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"
#include "tools/hapctl/model_dir.h"
#include "tools/hapctl/run_options.h"

namespace hap::cli {
namespace {

// The preprocessed crop the model saw, as RGB8: pixel = (x·std + mean)·255.
RgbImage Denormalise(const std::vector<float>& pixels, int size) {
  RgbImage img;
  img.width = img.height = size;
  img.pixels.resize(static_cast<size_t>(size) * size * 3);
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < size * size; ++i) {
      const float v = (pixels[static_cast<size_t>(c) * size * size + i] * kClipStd[c] + kClipMean[c]) * 255.f;
      img.pixels[static_cast<size_t>(i) * 3 + c] =
          static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
    }
  }
  return img;
}

// Kept patches keep their colours; dropped ones are darkened and desaturated; a grid marks the
// patch boundaries.
RgbImage HighlightKept(const RgbImage& base, int grid, const std::vector<int>& kept) {
  RgbImage out = base;
  std::vector<bool> keep(static_cast<size_t>(grid) * grid, false);
  for (int k : kept) {
    if (k >= 0 && k < grid * grid) keep[k] = true;
  }
  const int patch = base.width / grid;
  for (int y = 0; y < base.height; ++y) {
    for (int x = 0; x < base.width; ++x) {
      const int gy = std::min(y / patch, grid - 1), gx = std::min(x / patch, grid - 1);
      uint8_t* p = &out.pixels[(static_cast<size_t>(y) * base.width + x) * 3];
      const bool border = (y % patch == 0) || (x % patch == 0);
      if (!keep[gy * grid + gx]) {
        const int gray = (p[0] + p[1] + p[2]) / 3;
        for (int c = 0; c < 3; ++c) p[c] = static_cast<uint8_t>(gray / 4);
      } else if (border) {
        p[0] = 255;
        p[1] = 210;
        p[2] = 0;
      }
    }
  }
  return out;
}

// Heat map of scores (one per patch; -1 = not present) over the image: a black→red→yellow
// ramp blended 70/30 with the image; absent patches are black.
RgbImage HeatMap(const RgbImage& base, int grid, const std::vector<float>& scores) {
  RgbImage out = base;
  float hi = 0;
  for (float s : scores) hi = std::max(hi, s);
  const int patch = base.width / grid;
  for (int y = 0; y < base.height; ++y) {
    for (int x = 0; x < base.width; ++x) {
      const int gy = std::min(y / patch, grid - 1), gx = std::min(x / patch, grid - 1);
      const float s = scores[gy * grid + gx];
      uint8_t* p = &out.pixels[(static_cast<size_t>(y) * base.width + x) * 3];
      if (s < 0) {
        p[0] = p[1] = p[2] = 0;
        continue;
      }
      const float t = hi > 0 ? std::sqrt(s / hi) : 0.f;
      const float r = std::min(1.f, 2 * t) * 255, g = std::max(0.f, 2 * t - 1) * 255;
      p[0] = static_cast<uint8_t>(0.7f * r + 0.3f * p[0]);
      p[1] = static_cast<uint8_t>(0.7f * g + 0.3f * p[1]);
      p[2] = static_cast<uint8_t>(0.3f * p[2]);
    }
  }
  return out;
}

absl::Status Explain(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(std::string out_dir, flags.Required("out"));
  HAP_ASSIGN_OR_RETURN(auto model, LlavaModel::Load(ResolveModelDir(flags.GetOr("model", "")), {}));
  const LlavaConfig& cfg = model->config();
  HAP_ASSIGN_OR_RETURN(GenerateRequest req, ParseGenerateRequest(flags, cfg.num_visual_tokens()));
  if (req.prune.method == "none") req.prune.method = "hap";
  if (req.prune.method != "hap" && req.prune.method != "uniform") {
    return absl::InvalidArgumentError("explain supports --method hap or uniform");
  }
  if (!req.prune.retain && !req.prune.flops) {
    return absl::InvalidArgumentError("explain needs a budget: --retain K|P% or --flops F");
  }
  if (cfg.vision_feature_select_strategy != "default") {
    return absl::InvalidArgumentError("explain maps tokens to patches only for strategy 'default'");
  }
  HAP_ASSIGN_OR_RETURN(GenerateResult result, Generate(*model, req, nullptr));
  const PruneStats& ps = result.stats.prune;
  std::filesystem::create_directories(out_dir);
  const auto path = [&](const std::string& name) {
    return (std::filesystem::path(out_dir) / name).string();
  };

  nlohmann::json j;
  j["prompt"] = req.prompt;
  j["answer"] = result.decode.text;
  j["method"] = req.prune.method;
  j["pruning"] = PrefillStatsJson(result.stats);
  nlohmann::json layers = nlohmann::json::array();
  for (const HapLayerExplain& l : ps.hap_layers) {
    double w2 = 0;
    for (float w : l.head_weights) w2 += static_cast<double>(w) * w;
    layers.push_back({{"layer", l.layer},
                      {"visual_tokens", l.n_vis},
                      {"head_paq", l.head_paq},
                      {"head_weights", l.head_weights},
                      {"effective_heads", w2 > 0 ? 1.0 / w2 : 0.0},
                      {"layer_paq", l.layer_paq}});
  }
  j["layers"] = layers;

  HAP_ASSIGN_OR_RETURN(std::vector<float> pixels, model->PreprocessImage(req.image_bytes));
  const int size = cfg.vision.image_size;
  const int grid = size / cfg.vision.patch_size;
  const RgbImage base = Denormalise(pixels, size);
  HAP_RETURN_IF_ERROR(WritePng(path("image.png"), base));
  nlohmann::json groups = nlohmann::json::array();
  for (const HapGroupExplain& g : ps.hap_groups) {
    // Scores are over the tokens present in the group; map them back to image patches.
    std::vector<int> present_original;
    if (g.group == 0) {
      for (int i = 0; i < grid * grid; ++i) present_original.push_back(i);
    } else {
      present_original = ps.hap_groups[g.group - 1].kept_original;
    }
    std::vector<float> patch_scores(static_cast<size_t>(grid) * grid, -1.f);
    for (size_t i = 0; i < g.token_scores.size() && i < present_original.size(); ++i) {
      patch_scores[present_original[i]] = g.token_scores[i];
    }
    const std::string heat = absl::StrFormat("group%02d_scores.png", g.group);
    HAP_RETURN_IF_ERROR(WritePng(path(heat), HeatMap(base, grid, patch_scores)));
    groups.push_back({{"group", g.group},
                      {"layers", {g.first_layer, g.first_layer + g.n_layers - 1}},
                      {"layer_paq", g.layer_paq},
                      {"layer_weights", g.layer_weights},
                      {"present_tokens", present_original},
                      {"token_scores", g.token_scores},
                      {"kept_tokens", g.kept_original},
                      {"heatmap", heat}});
  }
  j["groups"] = groups;
  const std::vector<int>& final_kept =
      ps.hap_groups.empty() ? std::vector<int>() : ps.hap_groups.back().kept_original;
  HAP_RETURN_IF_ERROR(WritePng(path("kept.png"), HighlightKept(base, grid, final_kept)));
  j["final_kept_tokens"] = final_kept;
  j["grid"] = grid;
  std::ofstream(path("explain.json")) << j.dump(2) << "\n";
  std::printf("answer: %s\n", result.decode.text.c_str());
  std::printf("wrote %s: explain.json, image.png, kept.png (%zu of %d patches kept at the end), "
              "%zu group heat maps\n",
              out_dir.c_str(), final_kept.size(), grid * grid, ps.hap_groups.size());
  return absl::OkStatus();
}

int CmdExplain(const std::vector<std::string>& args) {
  std::set<std::string> value_flags = {"model", "image", "prompt", "out"};
  AddGenerationFlags(&value_flags);
  auto flags = Flags::Parse(args, value_flags, {});
  if (!flags.ok()) return Fail("explain", flags.status());
  if (absl::Status s = Explain(*flags); !s.ok()) return Fail("explain", s);
  return 0;
}

}  // namespace

HAP_COMMAND(explain, "Show what HAP kept and why (explain.json + PNG heat maps)", CmdExplain);

}  // namespace hap::cli
