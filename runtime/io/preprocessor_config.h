// preprocessor_config.json of a llava-hf checkpoint (transformers' CLIPImageProcessor): parsing
// with CLIPImageProcessor's defaults for absent keys, the check against config.json, writing.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/image/clip_preprocess.h"
#include "runtime/image/qwen2vl_preprocess.h"
#include "runtime/io/config.h"

namespace hap {

inline constexpr char kPreprocessorConfigFile[] = "preprocessor_config.json";

// Reads crop_size, size, do_resize, resample (2 = bilinear, 3 = bicubic), do_center_crop,
// do_rescale, rescale_factor, do_normalize, image_mean, image_std, do_convert_rgb, as
// transformers' get_size_dict reads them (size and crop_size may also be plain integers, as in
// the original CLIP checkpoints). `image_size` is config.json's vision_config.image_size: the
// processor must turn every image into image_size x image_size pixels (a crop of that size, or
// without a crop a resize to exactly that size). Errors are InvalidArgument and start with
// `source_name`, then name the field and what was expected.
absl::StatusOr<ImageProcessorConfig> ParsePreprocessorConfig(std::string_view json_text,
                                                             std::string_view source_name,
                                                             int image_size);

// preprocessor_config.json of a Qwen2-VL / Qwen2.5-VL checkpoint (transformers'
// Qwen2VLImageProcessor, or its Fast variant, whose pixels the slow one's PIL resampling stands
// for): min_pixels / max_pixels (or size {shortest_edge, longest_edge}, which they override),
// patch_size, temporal_patch_size, merge_size, resample, do_resize, do_rescale, rescale_factor,
// do_normalize, image_mean, image_std, do_convert_rgb; absent keys take the processor's
// defaults. Errors are InvalidArgument, start with `source_name` and name the field.
absl::StatusOr<Qwen2VLImageProcessorConfig> ParseQwen2VLPreprocessorConfig(
    std::string_view json_text, std::string_view source_name);

// The file as Qwen2.5-VL ships it (keys sorted); ParseQwen2VLPreprocessorConfig reads it back to
// an equal config.
std::string Qwen2VLPreprocessorConfigToJson(const Qwen2VLImageProcessorConfig& config);

// model_dir/preprocessor_config.json; when the file is absent, ClipImageProcessorConfig of the
// vision tower's image_size (CLIP's values, what llava-hf ships).
absl::StatusOr<ImageProcessorConfig> LoadPreprocessorConfig(const std::string& model_dir,
                                                            const LlavaConfig& config);

// The file in llava-hf's form (keys sorted, as transformers saves them, with image_processor_type
// "CLIPImageProcessor" and processor_class "LlavaProcessor"); ParsePreprocessorConfig reads it
// back to an equal config.
std::string PreprocessorConfigToJson(const ImageProcessorConfig& config);

}  // namespace hap
