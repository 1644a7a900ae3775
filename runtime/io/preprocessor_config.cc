// preprocessor_config.json: CLIPImageProcessor settings, read and written as transformers does.
#include "runtime/io/preprocessor_config.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/io/json_fields.h"

namespace hap {
namespace {

using Json = nlohmann::json;
using io_internal::Brief;
using io_internal::FieldReader;
using io_internal::ToInt;

// A side of a size dict: a positive integer up to 4096 (ClipPreprocess's bound).
absl::Status SizeValue(const FieldReader& r, const Json& obj, const char* dict, const char* key,
                       int& out) {
  const Json& v = obj[key];
  if (!ToInt(v, out) || out <= 0 || out > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(r.where(), dict, ".", key, " is ", Brief(v),
                                                   ", expected an integer in 1..4096"));
  }
  return absl::OkStatus();
}

// size: {"shortest_edge": s} | {"height": h, "width": w} | s (get_size_dict turns a plain
// integer into shortest_edge for CLIP, which resizes with default_to_square=False).
absl::Status ParseSize(const FieldReader& r, ImageProcessorConfig& c) {
  if (!r.Has("size")) return absl::OkStatus();
  const Json& v = r.Get("size");
  const char* expected = "{\"shortest_edge\": N}, {\"height\": H, \"width\": W} or an integer";
  if (v.is_number_integer()) {
    int n = 0;
    if (!ToInt(v, n) || n <= 0 || n > 4096) {
      return r.TypeError("size", v,
                         "{\"shortest_edge\": N}, {\"height\": H, \"width\": W} or an "
                         "integer in 1..4096");
    }
    c.shortest_edge = n;
    c.resize_height = c.resize_width = 0;
    return absl::OkStatus();
  }
  if (!v.is_object()) return r.TypeError("size", v, expected);
  if (v.contains("shortest_edge")) {
    c.resize_height = c.resize_width = 0;
    return SizeValue(r, v, "size", "shortest_edge", c.shortest_edge);
  }
  if (v.contains("height") && v.contains("width")) {
    c.shortest_edge = 0;
    HAP_RETURN_IF_ERROR(SizeValue(r, v, "size", "height", c.resize_height));
    return SizeValue(r, v, "size", "width", c.resize_width);
  }
  return r.TypeError("size", v, expected);
}

// crop_size: {"height": h, "width": w} | n.
absl::Status ParseCropSize(const FieldReader& r, ImageProcessorConfig& c) {
  if (!r.Has("crop_size")) return absl::OkStatus();
  const Json& v = r.Get("crop_size");
  if (v.is_number_integer()) {
    int n = 0;
    if (!ToInt(v, n) || n <= 0 || n > 4096) {
      return r.TypeError("crop_size", v, "{\"height\": H, \"width\": W} or an integer in 1..4096");
    }
    c.crop_height = c.crop_width = n;
    return absl::OkStatus();
  }
  if (!v.is_object() || !v.contains("height") || !v.contains("width")) {
    return r.TypeError("crop_size", v, "{\"height\": H, \"width\": W} or an integer");
  }
  HAP_RETURN_IF_ERROR(SizeValue(r, v, "crop_size", "height", c.crop_height));
  return SizeValue(r, v, "crop_size", "width", c.crop_width);
}

// image_mean / image_std: a list of 3 numbers, or one number for every channel (transformers'
// normalize broadcasts a scalar).
absl::Status ParseChannels(const FieldReader& r, const char* key, bool nonzero,
                           std::array<double, 3>& out) {
  if (!r.Has(key)) return absl::OkStatus();
  const Json& v = r.Get(key);
  const char* expected = nonzero ? "a list of 3 non-zero numbers (or one number)"
                                 : "a list of 3 numbers (or one number)";
  std::array<double, 3> values;
  if (v.is_number()) {
    values.fill(v.get<double>());
  } else if (v.is_array() && v.size() == 3) {
    for (int i = 0; i < 3; ++i) {
      if (!v[i].is_number()) return r.TypeError(key, v, expected);
      values[i] = v[i].get<double>();
    }
  } else {
    return r.TypeError(key, v, expected);
  }
  for (double x : values) {
    // Used as float32: a value that is 0 or not finite there is no divisor.
    const float f = static_cast<float>(x);
    if (!std::isfinite(f) || (nonzero && f == 0.0f)) return r.TypeError(key, v, expected);
  }
  out = values;
  return absl::OkStatus();
}

// PIL's resampling filter numbers.
const char* ResampleName(int code) {
  switch (code) {
    case 0:
      return "NEAREST";
    case 1:
      return "LANCZOS";
    case 2:
      return "BILINEAR";
    case 3:
      return "BICUBIC";
    case 4:
      return "BOX";
    case 5:
      return "HAMMING";
    default:
      return nullptr;
  }
}

// resample: a PIL filter number, of which bilinear and bicubic are implemented.
absl::Status ParseResample(const FieldReader& r, const std::string& source, ResampleFilter& out) {
  if (!r.Has("resample")) return absl::OkStatus();
  const Json& v = r.Get("resample");
  int code = -1;
  if (!ToInt(v, code) || ResampleName(code) == nullptr) {
    return r.TypeError("resample", v, "a PIL filter number (2 = BILINEAR, 3 = BICUBIC)");
  }
  if (code != 2 && code != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": resample = ", code, " (", ResampleName(code),
                     ") is not supported (supported: 2 = BILINEAR, 3 = BICUBIC)"));
  }
  out = static_cast<ResampleFilter>(code);
  return absl::OkStatus();
}

// The rescale and normalisation keys every transformers image processor shares.
template <typename Config>
absl::Status ParsePixelValues(const FieldReader& r, Config& c) {
  HAP_RETURN_IF_ERROR(r.Bool("do_rescale", c.do_rescale));
  HAP_RETURN_IF_ERROR(r.Double("rescale_factor", c.rescale_factor));
  if (!(c.rescale_factor > 0)) {
    return r.TypeError("rescale_factor", r.Get("rescale_factor"), "a positive number (1/255)");
  }
  HAP_RETURN_IF_ERROR(r.Bool("do_normalize", c.do_normalize));
  HAP_RETURN_IF_ERROR(ParseChannels(r, "image_mean", /*nonzero=*/false, c.image_mean));
  HAP_RETURN_IF_ERROR(ParseChannels(r, "image_std", /*nonzero=*/true, c.image_std));
  return r.Bool("do_convert_rgb", c.do_convert_rgb);
}

std::string SizeText(int h, int w) { return absl::StrCat("{height: ", h, ", width: ", w, "}"); }

// Every image must come out image_size x image_size, the vision tower's input.
absl::Status CheckAgainstModel(const ImageProcessorConfig& c, const std::string& source,
                               bool crop_given, bool size_given, int image_size) {
  const std::string where = absl::StrCat(source, ": ");
  const std::string model =
      absl::StrCat("config.json's vision_config.image_size is ", image_size,
                   " (the vision tower takes ", image_size, "x", image_size, " pixels)");
  if (c.do_center_crop) {
    if (c.crop_height != image_size || c.crop_width != image_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "crop_size is ", SizeText(c.crop_height, c.crop_width),
          crop_given ? "" : " (CLIPImageProcessor's default: the file has no crop_size)", ", but ",
          model));
    }
    if (!c.do_resize) return absl::OkStatus();  // each image is checked when it comes
    const bool covers = c.shortest_edge > 0
                            ? c.shortest_edge >= image_size
                            : c.resize_height >= image_size && c.resize_width >= image_size;
    if (!covers) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "size ",
                       c.shortest_edge > 0 ? absl::StrCat("{shortest_edge: ", c.shortest_edge, "}")
                                           : SizeText(c.resize_height, c.resize_width),
                       size_given ? "" : " (CLIPImageProcessor's default: the file has no size)",
                       " is smaller than crop_size ", SizeText(c.crop_height, c.crop_width),
                       "; transformers would zero-pad the crop, which is not supported"));
    }
    return absl::OkStatus();
  }
  if (!c.do_resize || c.shortest_edge > 0 || c.resize_height != image_size ||
      c.resize_width != image_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "do_center_crop is false, so do_resize must be true with size ",
                     SizeText(image_size, image_size), " for every image to come out ", image_size,
                     "x", image_size, "; ", model));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImageProcessorConfig> ParsePreprocessorConfig(std::string_view json_text,
                                                             std::string_view source_view,
                                                             int image_size) {
  const std::string source(source_view);
  HAP_ASSIGN_OR_RETURN(const Json root, io_internal::ParseJsonObject(json_text, source));
  FieldReader r(root, source, "");
  std::string type = "CLIPImageProcessor";
  HAP_RETURN_IF_ERROR(r.String("image_processor_type", type));
  // The fast variant names the same preprocessing (it resamples with torchvision; the pixels
  // here follow the slow processor's PIL resampling).
  HAP_RETURN_IF_ERROR(io_internal::CheckSupported(
      r.where(), "image_processor_type", type, {"CLIPImageProcessor", "CLIPImageProcessorFast"}));
  std::string processor_class;
  HAP_RETURN_IF_ERROR(r.String("processor_class", processor_class));

  ImageProcessorConfig c;  // CLIPImageProcessor's defaults
  HAP_RETURN_IF_ERROR(r.Bool("do_resize", c.do_resize));
  HAP_RETURN_IF_ERROR(ParseSize(r, c));
  HAP_RETURN_IF_ERROR(ParseResample(r, source, c.resample));
  HAP_RETURN_IF_ERROR(r.Bool("do_center_crop", c.do_center_crop));
  HAP_RETURN_IF_ERROR(ParseCropSize(r, c));
  HAP_RETURN_IF_ERROR(ParsePixelValues(r, c));
  HAP_RETURN_IF_ERROR(CheckAgainstModel(c, source, r.Has("crop_size"), r.Has("size"), image_size));
  return c;
}

absl::StatusOr<Qwen2VLImageProcessorConfig> ParseQwen2VLPreprocessorConfig(
    std::string_view json_text, std::string_view source_view) {
  const std::string source(source_view);
  HAP_ASSIGN_OR_RETURN(const Json root, io_internal::ParseJsonObject(json_text, source));
  FieldReader r(root, source, "");
  std::string type = "Qwen2VLImageProcessor";
  HAP_RETURN_IF_ERROR(r.String("image_processor_type", type));
  if (type != "Qwen2VLImageProcessor" && type != "Qwen2VLImageProcessorFast") {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": image_processor_type '", type,
                     "' is not supported for Qwen2-VL models (supported: Qwen2VLImageProcessor, "
                     "Qwen2VLImageProcessorFast)"));
  }
  Qwen2VLImageProcessorConfig c;  // Qwen2VLImageProcessor's defaults
  HAP_RETURN_IF_ERROR(r.Bool("do_resize", c.do_resize));
  // size: {"shortest_edge": min, "longest_edge": max}; min_pixels / max_pixels win over it.
  if (r.Has("size")) {
    const Json& v = r.Get("size");
    int64_t lo = 0, hi = 0;
    if (!v.is_object() || !v.contains("shortest_edge") || !v.contains("longest_edge") ||
        !v["shortest_edge"].is_number_integer() || !v["longest_edge"].is_number_integer() ||
        (lo = v["shortest_edge"].get<int64_t>()) < 0 ||
        (hi = v["longest_edge"].get<int64_t>()) <= 0) {
      return r.TypeError("size", v,
                         "{\"shortest_edge\": min pixels, \"longest_edge\": max pixels}");
    }
    c.min_pixels = lo;
    c.max_pixels = hi;
  }
  for (const auto& [key, out] :
       {std::pair{"min_pixels", &c.min_pixels}, std::pair{"max_pixels", &c.max_pixels}}) {
    if (!r.Has(key)) continue;
    const Json& v = r.Get(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return r.TypeError(key, v, "a non-negative integer (pixels)");
    }
    *out = v.get<int64_t>();
  }
  if (c.min_pixels > c.max_pixels || c.max_pixels == 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": min_pixels ", c.min_pixels,
                                                   " and max_pixels ", c.max_pixels,
                                                   ": expected 0 < max_pixels, min <= max"));
  }
  for (const auto& [key, out] : {std::pair{"patch_size", &c.patch_size},
                                 std::pair{"temporal_patch_size", &c.temporal_patch_size},
                                 std::pair{"merge_size", &c.merge_size}}) {
    HAP_RETURN_IF_ERROR(r.Int(key, *out));
    if (*out <= 0 || *out > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", key, " is ", *out, ", expected an integer in 1..64"));
    }
  }
  HAP_RETURN_IF_ERROR(ParseResample(r, source, c.resample));
  HAP_RETURN_IF_ERROR(ParsePixelValues(r, c));
  return c;
}

std::string Qwen2VLPreprocessorConfigToJson(const Qwen2VLImageProcessorConfig& c) {
  auto channels = [](const std::array<double, 3>& v) { return Json::array({v[0], v[1], v[2]}); };
  Json root = {{"do_convert_rgb", c.do_convert_rgb},
               {"do_normalize", c.do_normalize},
               {"do_rescale", c.do_rescale},
               {"do_resize", c.do_resize},
               {"image_mean", channels(c.image_mean)},
               {"image_processor_type", "Qwen2VLImageProcessor"},
               {"image_std", channels(c.image_std)},
               {"max_pixels", c.max_pixels},
               {"merge_size", c.merge_size},
               {"min_pixels", c.min_pixels},
               {"patch_size", c.patch_size},
               {"processor_class", "Qwen2_5_VLProcessor"},
               {"resample", static_cast<int>(c.resample)},
               {"rescale_factor", c.rescale_factor},
               {"size", {{"longest_edge", c.max_pixels}, {"shortest_edge", c.min_pixels}}},
               {"temporal_patch_size", c.temporal_patch_size}};
  return root.dump(2) + "\n";
}

absl::StatusOr<ImageProcessorConfig> LoadPreprocessorConfig(const std::string& model_dir,
                                                            const LlavaConfig& config) {
  const std::string path = absl::StrCat(model_dir, "/", kPreprocessorConfigFile);
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (absl::IsNotFound(text.status())) return ClipImageProcessorConfig(config.vision.image_size);
  if (!text.ok()) return text.status();
  return ParsePreprocessorConfig(*text, path, config.vision.image_size);
}

std::string PreprocessorConfigToJson(const ImageProcessorConfig& c) {
  // nlohmann::json keeps keys sorted, as transformers' save_pretrained writes them.
  Json size = c.shortest_edge > 0 ? Json{{"shortest_edge", c.shortest_edge}}
                                  : Json{{"height", c.resize_height}, {"width", c.resize_width}};
  auto channels = [](const std::array<double, 3>& v) { return Json::array({v[0], v[1], v[2]}); };
  Json root = {{"crop_size", {{"height", c.crop_height}, {"width", c.crop_width}}},
               {"do_center_crop", c.do_center_crop},
               {"do_convert_rgb", c.do_convert_rgb},
               {"do_normalize", c.do_normalize},
               {"do_rescale", c.do_rescale},
               {"do_resize", c.do_resize},
               {"image_mean", channels(c.image_mean)},
               {"image_processor_type", "CLIPImageProcessor"},
               {"image_std", channels(c.image_std)},
               {"processor_class", "LlavaProcessor"},
               {"resample", static_cast<int>(c.resample)},
               {"rescale_factor", c.rescale_factor},
               {"size", std::move(size)}};
  return root.dump(2) + "\n";
}

}  // namespace hap
