// preprocessor_config.json of a llava-hf checkpoint (transformers' CLIPImageProcessor): parsing
// with CLIPImageProcessor's defaults for absent keys, the check against config.json, writing.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/image/clip_preprocess.h"
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

// model_dir/preprocessor_config.json; when the file is absent, ClipImageProcessorConfig of the
// vision tower's image_size (CLIP's values, what llava-hf ships).
absl::StatusOr<ImageProcessorConfig> LoadPreprocessorConfig(const std::string& model_dir,
                                                            const LlavaConfig& config);

// The file in llava-hf's form (keys sorted, as transformers saves them, with image_processor_type
// "CLIPImageProcessor" and processor_class "LlavaProcessor"); ParsePreprocessorConfig reads it
// back to an equal config.
std::string PreprocessorConfigToJson(const ImageProcessorConfig& config);

}  // namespace hap
