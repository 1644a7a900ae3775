// The rescale and normalisation step transformers' image processors share: a uint8 channel value
// becomes float32(double(u) * rescale_factor), then (x - mean) / std in float32 (the mean and
// std cast to float32 first, as transformers' normalize casts them).
#pragma once

#include <array>
#include <cstdint>

namespace hap {

class PixelNormalizer {
 public:
  PixelNormalizer(bool do_rescale, double rescale_factor, bool do_normalize,
                  const std::array<double, 3>& mean, const std::array<double, 3>& std_dev)
      : do_rescale_(do_rescale), rescale_factor_(rescale_factor), do_normalize_(do_normalize) {
    for (int ch = 0; ch < 3; ++ch) {
      mean_[ch] = static_cast<float>(mean[ch]);
      std_[ch] = static_cast<float>(std_dev[ch]);
    }
  }

  float operator()(uint8_t u, int channel) const {
    // Rescaling in float64 then casting to float32 equals u / 255.0f for 1/255.
    float x = do_rescale_ ? static_cast<float>(static_cast<double>(u) * rescale_factor_)
                          : static_cast<float>(u);
    if (do_normalize_) x = (x - mean_[channel]) / std_[channel];
    return x;
  }

 private:
  bool do_rescale_;
  double rescale_factor_;
  bool do_normalize_;
  float mean_[3];
  float std_[3];
};

}  // namespace hap
