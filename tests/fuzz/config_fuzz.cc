// Fuzzes config.json parsing (runtime/io/config.cc ParseLlavaConfig). A config that parses must
// give sane derived sizes and survive a round trip: LlavaConfigToJson and back gives the same
// config.
#include <string>

#include "runtime/io/config.h"
#include "runtime/io/weights.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/json_mutator.h"

HAP_FUZZ_JSON_MUTATOR()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto config = hap::ParseLlavaConfig(hap::fuzz::AsView(data, size), "config.json");
  if (!config.ok()) {
    HAP_FUZZ_CHECK(absl::IsInvalidArgument(config.status()), "unexpected error code: %s",
                   config.status().ToString().c_str());
    return 0;
  }
  const hap::LlavaConfig& c = *config;
  HAP_FUZZ_CHECK(c.num_visual_tokens() > 0, "num_visual_tokens %d", c.num_visual_tokens());
  const int used = c.vision_layers_used();
  HAP_FUZZ_CHECK(used >= 0 && used <= c.vision.num_hidden_layers, "vision_layers_used %d of %d",
                 used, c.vision.num_hidden_layers);
  // The loader's list of tensors and their shapes from the accepted sizes (a list as long as
  // the layer counts, so only for counts a checkpoint could have).
  if (c.text.num_hidden_layers <= 256 && c.vision.num_hidden_layers <= 256) {
    for (const hap::ExpectedTensor& t : hap::ExpectedLlavaTensors(c)) {
      for (int64_t d : t.shape) {
        HAP_FUZZ_CHECK(d > 0, "tensor %s has a dimension %lld", t.name.c_str(),
                       static_cast<long long>(d));
      }
    }
  }
  const std::string json = hap::LlavaConfigToJson(c);
  auto again = hap::ParseLlavaConfig(json, "round trip");
  HAP_FUZZ_CHECK(again.ok(), "the written config does not parse: %s\n%s",
                 again.status().ToString().c_str(), json.c_str());
  const std::string json2 = hap::LlavaConfigToJson(*again);
  HAP_FUZZ_CHECK(json == json2, "round trip differs:\n%s\n%s", json.c_str(), json2.c_str());
  return 0;
}
