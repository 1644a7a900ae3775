// hapctl explain: runs one request with HAP (or uniform, or either over the flat schedule) and
// writes what it kept and why — explain.json (per layer: head PAQ and weights; per group: layer
// weights, token scores, kept tokens) and PNGs: the image with the kept patches highlighted, and
// a heat map of each group's token scores. explain.json also holds "head_stats": per layer and
// head, the quantities behind the sink / dispersed / optimal head taxonomy (PAQ, mutual
// information, spatial entropy, visual attention mass), measured on a second, unpruned prefill
// so every layer sees all V visual tokens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "kernels/cpu/prune/attention_rows.h"
#include "kernels/cpu/prune/paq.h"
#include "kernels/cpu/prune/paq_softmax.h"
#include "kernels/cpu/prune/weighted_sum.h"
#include "nlohmann/json.hpp"
#include "runtime/image/png_encode.h"
#include "runtime/io/model_dir.h"
#include "runtime/model/vision_language_model.h"
#include "runtime/prune/pruner_base.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"
#include "tools/hapctl/run_options.h"

namespace hap::cli {
namespace {

// The cell of `layout` that pixel (x, y) of its image lies in, as a token index.
int CellOf(const VisualTokenLayout& layout, int x, int y) {
  const int cell_w = layout.image.width / layout.cols, cell_h = layout.image.height / layout.rows;
  const int gy = std::min(y / cell_h, layout.rows - 1), gx = std::min(x / cell_w, layout.cols - 1);
  return gy * layout.cols + gx;
}

// Kept tokens' cells keep their colours; dropped ones are darkened and desaturated; a grid marks
// the cell boundaries.
RgbImage HighlightKept(const VisualTokenLayout& layout, const std::vector<int>& kept) {
  const RgbImage& base = layout.image;
  RgbImage out = base;
  const int n = layout.rows * layout.cols;
  std::vector<bool> keep(static_cast<size_t>(n), false);
  for (int k : kept) {
    if (k >= 0 && k < n) keep[k] = true;
  }
  const int cell_w = base.width / layout.cols, cell_h = base.height / layout.rows;
  for (int y = 0; y < base.height; ++y) {
    for (int x = 0; x < base.width; ++x) {
      uint8_t* p = &out.pixels[(static_cast<size_t>(y) * base.width + x) * 3];
      const bool border = (y % cell_h == 0) || (x % cell_w == 0);
      if (!keep[CellOf(layout, x, y)]) {
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

// Heat map of scores (one per token's cell; -1 = not present) over the image: a
// black→red→yellow ramp blended 70/30 with the image; absent cells are black.
RgbImage HeatMap(const VisualTokenLayout& layout, const std::vector<float>& scores) {
  const RgbImage& base = layout.image;
  RgbImage out = base;
  float hi = 0;
  for (float s : scores) hi = std::max(hi, s);
  for (int y = 0; y < base.height; ++y) {
    for (int x = 0; x < base.width; ++x) {
      const float s = scores[CellOf(layout, x, y)];
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

// Per-head statistics of one layer's text→visual attention (docs/design.md §3 maps: rows = the
// query text after the image, Â_h renormalised over the visual tokens;
// p_h(v) = mean_j Â_h(j, v)).
struct HeadStatsLayer {
  int layer = 0;
  int n_vis = 0;
  std::vector<float> paq;               // [H] PAQ(Â_h) = I / H(V)
  std::vector<double> mutual_info;      // [H] I(V;T) in nats = H(V) − H(V|T)
  std::vector<double> spatial_entropy;  // [H] H(V) = −Σ_v p_h(v) ln p_h(v), nats
  std::vector<double> row_entropy;      // [H] H(V|T) = mean_j H(Â_h(j,:)), nats
  std::vector<double> max_token_mass;   // [H] max_v p_h(v)
  std::vector<int> argmax_token;        // [H] argmax_v p_h(v), index into the V tokens
  std::vector<double> visual_mass;      // [H] mean_j Σ_v α_jv (un-renormalised softmax mass)
  std::vector<float> weights;           // [H] PAQ-softmax weights of the heads (at the request's τ)
  float layer_paq = 0;                  // PAQ(Σ_h w_h Â_h)
};

// A pruner that never prunes: after each layer it computes HeadStatsLayer from Q, K and the
// log-sum-exp the engine passes, so the statistics come from the unpruned model. The head
// weights use the request's PAQ-softmax temperature, as the pruner does.
class HeadStatsObserver : public Pruner {
 public:
  explicit HeadStatsObserver(double paq_temperature) : paq_temperature_(paq_temperature) {}

  absl::StatusOr<std::optional<std::vector<int>>> AfterLayer(const LayerAttention& att) override {
    const int text_begin = att.vis_begin + att.n_vis;
    const int n_text = att.n_tokens - text_begin, n_vis = att.n_vis, H = att.n_heads;
    if (n_vis <= 0 || n_text <= 0) return std::optional<std::vector<int>>();
    kernels::TextVisualAttentionArgs a = TextVisualRowsOf(att, text_begin, n_text, true);
    const int64_t map_size = int64_t{n_text} * n_vis;
    std::vector<float> maps(static_cast<size_t>(H) * map_size), raw(maps.size());
    a.out = maps.data();
    HAP_RETURN_IF_ERROR(kernels::TextVisualAttention(a));
    a.renormalize = false;
    a.out = raw.data();
    HAP_RETURN_IF_ERROR(kernels::TextVisualAttention(a));

    HeadStatsLayer s;
    s.layer = att.layer;
    s.n_vis = n_vis;
    s.paq.resize(H);
    s.weights.resize(H);
    HAP_RETURN_IF_ERROR(kernels::Paq(maps.data(), H, n_text, n_vis, s.paq.data()));
    HAP_RETURN_IF_ERROR(
        kernels::PaqSoftmaxWeights(s.paq.data(), H, paq_temperature_, s.weights.data()));
    std::vector<double> pv(n_vis);
    for (int h = 0; h < H; ++h) {
      const float* m = maps.data() + h * map_size;
      const float* r = raw.data() + h * map_size;
      std::fill(pv.begin(), pv.end(), 0.0);
      double row_h = 0, vis_mass = 0;
      for (int j = 0; j < n_text; ++j) {
        for (int i = 0; i < n_vis; ++i) {
          const double x = m[int64_t{j} * n_vis + i];
          pv[i] += x / n_text;
          if (x > 0) row_h -= x * std::log(x) / n_text;
          vis_mass += static_cast<double>(r[int64_t{j} * n_vis + i]) / n_text;
        }
      }
      double hv = 0;
      int arg = 0;
      for (int i = 0; i < n_vis; ++i) {
        if (pv[i] > 0) hv -= pv[i] * std::log(pv[i]);
        if (pv[i] > pv[arg]) arg = i;
      }
      s.spatial_entropy.push_back(hv);
      s.row_entropy.push_back(row_h);
      s.mutual_info.push_back(std::max(0.0, hv - row_h));
      s.max_token_mass.push_back(pv[arg]);
      s.argmax_token.push_back(arg);
      s.visual_mass.push_back(vis_mass);
    }
    std::vector<float> layer_map(map_size);
    HAP_RETURN_IF_ERROR(kernels::WeightedSumContiguous(maps.data(), s.weights.data(), H, map_size,
                                                       layer_map.data()));
    HAP_RETURN_IF_ERROR(kernels::Paq(layer_map.data(), 1, n_text, n_vis, &s.layer_paq));
    layers_.push_back(std::move(s));
    return std::optional<std::vector<int>>();
  }

  const std::vector<HeadStatsLayer>& layers() const { return layers_; }

 private:
  double paq_temperature_;
  std::vector<HeadStatsLayer> layers_;
};

// Runs the prompt once more without pruning and returns the "head_stats" object of explain.json.
absl::StatusOr<nlohmann::json> HeadStatsJson(const VisionLanguageModel& model,
                                             const GenerateRequest& req) {
  PruneRequest none;
  none.method = "none";
  HAP_ASSIGN_OR_RETURN(EncodeResult encoded, model.EncodeImage(req.image_bytes, none));
  HAP_ASSIGN_OR_RETURN(PromptTokens tokens, model.Tokenize(req.prompt, encoded));
  HeadStatsObserver observer(req.prune.paq_temperature);
  HAP_RETURN_IF_ERROR(model.Prefill(req.prompt, encoded, &observer).status());
  nlohmann::json layers = nlohmann::json::array();
  for (const HeadStatsLayer& s : observer.layers()) {
    const int H = static_cast<int>(s.weights.size());
    double w2 = 0, kl = 0;
    for (float w : s.weights) {
      w2 += static_cast<double>(w) * w;
      if (w > 0) kl += w * std::log(static_cast<double>(w) * H);
    }
    std::vector<double> hv_norm;
    for (double hv : s.spatial_entropy) {
      hv_norm.push_back(s.n_vis > 1 ? hv / std::log(static_cast<double>(s.n_vis)) : 0.0);
    }
    layers.push_back({{"layer", s.layer},
                      {"visual_tokens", s.n_vis},
                      {"head_paq", s.paq},
                      {"head_mutual_info", s.mutual_info},
                      {"head_spatial_entropy", s.spatial_entropy},
                      {"head_spatial_entropy_norm", hv_norm},
                      {"head_row_entropy", s.row_entropy},
                      {"head_max_token_mass", s.max_token_mass},
                      {"head_argmax_token", s.argmax_token},
                      {"head_visual_mass", s.visual_mass},
                      {"head_weights", s.weights},
                      {"effective_heads", w2 > 0 ? 1.0 / w2 : 0.0},
                      {"weights_kl_uniform", kl},
                      {"layer_paq", s.layer_paq}});
  }
  return nlohmann::json{{"pass", "unpruned"},
                        {"paq_temperature", req.prune.paq_temperature},
                        {"text_tokens", static_cast<int>(tokens.ids.size()) - tokens.vis_begin -
                                            tokens.n_vis},
                        {"visual_tokens", encoded.n_vis},
                        {"layers", layers}};
}

absl::Status Explain(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(std::string out_dir, flags.Required("out"));
  HAP_ASSIGN_OR_RETURN(
      std::unique_ptr<VisionLanguageModel> model,
      VisionLanguageModel::Load(ResolveModelDir(flags.GetOr("model", "")), ModelOptions{}));
  // A budget in % is of this image's visual tokens (they follow its size on Qwen2.5-VL).
  HAP_ASSIGN_OR_RETURN(GenerateRequest req,
                       ParseGenerateRequest(flags, [&](std::string_view image) {
                         return model->VisualTokensOf(image);
                       }));
  if (req.prune.method == "none") req.prune.method = "hap";
  if (req.prune.method != "hap" && req.prune.method != "uniform" &&
      req.prune.method != "hap-flat" && req.prune.method != "uniform-flat") {
    return absl::InvalidArgumentError(
        "explain supports --method hap, uniform, hap-flat or uniform-flat");
  }
  if (!req.prune.retain && !req.prune.flops) {
    return absl::InvalidArgumentError("explain needs a budget: --retain K|P% or --flops F");
  }
  // Where each visual token lies on the image (before the model runs: a layout this model's
  // tokens do not have fails first).
  HAP_ASSIGN_OR_RETURN(const VisualTokenLayout layout, model->TokenLayoutOf(req.image_bytes));
  HAP_ASSIGN_OR_RETURN(GenerateResult result, model->Generate(req, nullptr));
  const PruneStats& ps = result.stats.prune;
  HAP_RETURN_IF_ERROR(CreateDirectories(out_dir));
  const auto path = [&](const std::string& name) {
    return (std::filesystem::path(out_dir) / name).string();
  };

  nlohmann::json j;
  j["prompt"] = req.prompt;
  j["answer"] = result.decode.text;
  j["method"] = req.prune.method;
  // The PAQ-softmax temperature of the head and layer weights below (1 = the paper's).
  j["paq_temperature"] = ps.paq_temperature;
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
  if (!flags.Bool("no-head-stats")) {
    HAP_ASSIGN_OR_RETURN(j["head_stats"], HeadStatsJson(*model, req));
  }

  const int n_cells = layout.rows * layout.cols;
  HAP_RETURN_IF_ERROR(WritePng(path("image.png"), layout.image));
  nlohmann::json groups = nlohmann::json::array();
  for (const HapGroupExplain& g : ps.hap_groups) {
    // Scores are over the tokens present in the group; map them back to image patches.
    std::vector<int> present_original;
    if (g.group == 0) {
      for (int i = 0; i < n_cells; ++i) present_original.push_back(i);
    } else {
      present_original = ps.hap_groups[g.group - 1].kept_original;
    }
    std::vector<float> patch_scores(static_cast<size_t>(n_cells), -1.f);
    for (size_t i = 0; i < g.token_scores.size() && i < present_original.size(); ++i) {
      patch_scores[present_original[i]] = g.token_scores[i];
    }
    const std::string heat = absl::StrFormat("group%02d_scores.png", g.group);
    HAP_RETURN_IF_ERROR(WritePng(path(heat), HeatMap(layout, patch_scores)));
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
  // No pruning step (M = 1, e.g. --retain 100%): every patch stays.
  std::vector<int> final_kept;
  if (ps.hap_groups.empty()) {
    for (int i = 0; i < n_cells; ++i) final_kept.push_back(i);
  } else {
    final_kept = ps.hap_groups.back().kept_original;
  }
  HAP_RETURN_IF_ERROR(WritePng(path("kept.png"), HighlightKept(layout, final_kept)));
  j["final_kept_tokens"] = final_kept;
  // Token k covers cell (k / grid_cols, k % grid_cols) of image.png.
  j["grid_rows"] = layout.rows;
  j["grid_cols"] = layout.cols;
  std::ofstream(path("explain.json")) << j.dump(2) << "\n";
  std::printf("answer: %s\n", result.decode.text.c_str());
  std::printf(
      "wrote %s: explain.json, image.png, kept.png (%zu of %d patches kept at the end), "
      "%zu group heat maps\n",
      out_dir.c_str(), final_kept.size(), n_cells, ps.hap_groups.size());
  return absl::OkStatus();
}

int CmdExplain(const std::vector<std::string>& args) {
  std::set<std::string> value_flags = {"model", "image", "prompt", "out"};
  AddGenerationFlags(&value_flags);
  auto flags = Flags::Parse(args, value_flags, {"no-head-stats"});
  if (!flags.ok()) return Fail("explain", flags.status());
  if (absl::Status s = Explain(*flags); !s.ok()) return Fail("explain", s);
  return 0;
}

}  // namespace

HAP_COMMAND(explain, "Show what HAP kept and why (explain.json + PNG heat maps)", CmdExplain);

}  // namespace hap::cli
