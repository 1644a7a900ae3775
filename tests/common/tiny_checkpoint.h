// The tiny LLaVA checkpoints the model and end-to-end tests write (make-tiny's defaults, with the
// tokenizer trained on the shipped corpus; HAP_SOURCE_DIR is set by hap_test), and the synthetic
// images they feed them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/llava_model.h"
#include "runtime/tiny/tiny_model.h"

namespace hap::testing_support {

// `layers` text layers, images of `image_size` px ((image_size / 14)² visual tokens), weights
// in `dtype`.
inline TinyModelOptions TinyOptions(uint64_t seed, int layers, int image_size = 56,
                                    DType dtype = DType::kF32) {
  TinyModelOptions o;
  o.seed = seed;
  o.layers = layers;
  o.image_size = image_size;
  o.dtype = dtype;
  o.corpus_path = std::string(HAP_SOURCE_DIR) + "/data/tokenizer/corpus.txt";
  return o;
}

// TinyOptions with grouped-query attention (4 query heads of width 16 share 2 KV heads) and
// 112 px images: 8 × 8 = 64 visual tokens.
inline TinyModelOptions GqaTinyOptions(uint64_t seed, int layers, DType dtype = DType::kF32) {
  TinyModelOptions o = TinyOptions(seed, layers, 112, dtype);
  o.hidden = 64;
  o.heads = 4;
  o.kv_heads = 2;
  return o;
}

// The checkpoint of `tiny` written into `dir`, then loaded with `load`.
inline absl::StatusOr<std::unique_ptr<LlavaModel>> WriteAndLoadTiny(const TinyModelOptions& tiny,
                                                                    const std::string& dir,
                                                                    const ModelOptions& load = {}) {
  if (absl::Status s = WriteTinyModel(tiny, dir); !s.ok()) return s;
  return LlavaModel::Load(dir, load);
}

// A width × height PNG whose RGB bytes are byte(0), byte(1), …: a fixed input that is not a
// plain colour.
inline absl::StatusOr<std::string> SyntheticPng(int width, int height,
                                                const std::function<uint8_t(size_t)>& byte) {
  RgbImage img;
  img.width = width;
  img.height = height;
  img.pixels.resize(size_t(width) * height * 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = byte(i);
  return EncodePng(img);
}

}  // namespace hap::testing_support
