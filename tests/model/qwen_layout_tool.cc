// Command-line access to the Qwen2.5-VL index functions for the PyTorch parity test
// (qwen_layout_parity.py). Reads one JSON object per line on stdin:
//   {"grids": [[t, h, w], ...], "patch_size": P, "merge": M, "window_size": W,
//    "ids": [...], "image_token_id": I}
// and writes one JSON line: {"row", "col", "window_index", "window_bounds", "frame_bounds",
// "mrope": {"t", "h", "w", "next"}} or {"error": message} (for the window layout or positions).
// A line {"rope": {"x", "positions": [[axis 0], ...], "heads", "head_dim", "theta",
// "sections", "per_section"}} applies the CPU backend's RopeAxes instead: {"x": rotated}.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "runtime/model/mrope_positions.h"
#include "runtime/model/qwen_vision_layout.h"

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    const nlohmann::json in = nlohmann::json::parse(line);
    if (in.contains("rope")) {
      const nlohmann::json& r = in["rope"];
      std::vector<float> x = r["x"].get<std::vector<float>>();
      // Given axis by axis ([axes][rows]); RopeAxes reads them row by row.
      const auto by_axis = r["positions"].get<std::vector<std::vector<int32_t>>>();
      std::vector<int32_t> positions;
      for (size_t row = 0; row < by_axis[0].size(); ++row) {
        for (const auto& axis : by_axis) positions.push_back(axis[row]);
      }
      hap::RopeAxesArgs a;
      a.x = x.data();
      a.positions = positions.data();
      a.rows = static_cast<int>(r["positions"][0].size());
      a.n_heads = r["heads"].get<int>();
      a.head_dim = r["head_dim"].get<int>();
      a.theta = r["theta"].get<float>();
      for (int i = 0; i < 3; ++i) a.sections[i] = r["sections"][i].get<int>();
      a.per_section_frequencies = r["per_section"].get<bool>();
      const absl::Status s = hap::CpuBackend().RopeAxes(a);
      const nlohmann::json out =
          s.ok() ? nlohmann::json{{"x", x}} : nlohmann::json{{"error", std::string(s.message())}};
      std::printf("%s\n", out.dump().c_str());
      std::fflush(stdout);
      continue;
    }
    std::vector<hap::ImageGrid> grids;
    for (const auto& g : in["grids"])
      grids.push_back({g[0].get<int>(), g[1].get<int>(), g[2].get<int>()});
    const int merge = in["merge"].get<int>();
    nlohmann::json out;
    const hap::VisionPatchPositions pos = hap::QwenVisionPatchPositions(grids, merge);
    out["row"] = pos.row;
    out["col"] = pos.col;
    auto layout = hap::QwenVisionWindowLayout(grids, in["patch_size"].get<int>(), merge,
                                              in["window_size"].get<int>());
    if (!layout.ok()) {
      out = {{"error", std::string(layout.status().message())}};
    } else {
      out["window_index"] = layout->window_index;
      out["window_bounds"] = layout->window_bounds;
      out["frame_bounds"] = layout->frame_bounds;
      auto mrope = hap::QwenMropePositions(in["ids"].get<std::vector<int32_t>>(), grids, merge,
                                           in["image_token_id"].get<int>());
      if (!mrope.ok()) {
        out = {{"error", std::string(mrope.status().message())}};
      } else {
        out["mrope"] = {{"t", mrope->t}, {"h", mrope->h}, {"w", mrope->w}, {"next", mrope->next}};
      }
    }
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
