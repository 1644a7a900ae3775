// The model runs every op through the backend it is given (ModelOptions::backend): a backend
// that counts and forwards to the CPU one gives bit-identical results, and a decode step makes
// exactly the calls its layers need — no op reaches a kernel around the interface (VisionZip's
// compression included).
#include <map>
#include <mutex>
#include <string>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/pipeline.h"
#include "runtime/model/tiny_model.h"

namespace hap {
namespace {

class CountingBackend final : public Backend {
 public:
  Device device() const override { return cpu_.device(); }
  std::string_view name() const override { return "counting"; }
  int count(const std::string& op) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = counts_.find(op);
    return it == counts_.end() ? 0 : it->second;
  }
  void Reset() {
    std::lock_guard<std::mutex> lock(mu_);
    counts_.clear();
  }

#define HAP_FORWARD(op, params, args) \
  absl::Status op params const override { \
    Count(#op);                          \
    return cpu_.op args;                 \
  }
  absl::StatusOr<void*> Allocate(size_t bytes) const override { return cpu_.Allocate(bytes); }
  void Free(void* p) const override { cpu_.Free(p); }
  HAP_FORWARD(CopyToBackend, (void* d, const void* s, size_t n), (d, s, n))
  HAP_FORWARD(CopyToHost, (void* d, const void* s, size_t n), (d, s, n))
  HAP_FORWARD(Copy, (void* d, const void* s, size_t n), (d, s, n))
  HAP_FORWARD(Synchronize, (), ())
  absl::StatusOr<TensorView> PlaceWeight(const TensorView& h, BackendBuffer* s) const override {
    return cpu_.PlaceWeight(h, s);
  }
  int64_t DeviceBytesInUse() const override { return cpu_.DeviceBytesInUse(); }
  HAP_FORWARD(StoreF32As, (DType t, const float* s, void* d, int64_t n), (t, s, d, n))
  HAP_FORWARD(Embedding, (const TensorView& t, const int32_t* ids, int n, float* o),
              (t, ids, n, o))
  HAP_FORWARD(Linear,
              (const float* x, const TensorView& w, const float* b, float* y, int m, LinearRows r),
              (x, w, b, y, m, r))
  HAP_FORWARD(RmsNorm, (const float* x, const float* w, float* y, int r, int d, float e),
              (x, w, y, r, d, e))
  HAP_FORWARD(LayerNorm,
              (const float* x, const float* w, const float* b, float* y, int r, int d, float e),
              (x, w, b, y, r, d, e))
  HAP_FORWARD(Rope, (float* x, const int32_t* p, int r, int h, int hd, float t), (x, p, r, h, hd, t))
  HAP_FORWARD(Activate, (Activation k, float* x, int64_t n), (k, x, n))
  HAP_FORWARD(SiluMul, (float* g, const float* u, int64_t n), (g, u, n))
  HAP_FORWARD(Add, (float* y, const float* x, int64_t n), (y, x, n))
  HAP_FORWARD(Attention, (const AttentionArgs& a), (a))
  HAP_FORWARD(DecodeAttention, (const DecodeAttentionArgs& a), (a))
  HAP_FORWARD(GatherRows, (const void* s, int64_t n, size_t rb, const int* i, int64_t ni, void* d),
              (s, n, rb, i, ni, d))
  HAP_FORWARD(TextVisualAttention, (const kernels::TextVisualAttentionArgs& a), (a))
  HAP_FORWARD(Paq, (const float* m, int n, int t, int v, float* p), (m, n, t, v, p))
  HAP_FORWARD(PaqFromRowEntropies,
              (const float* m, const double* e, int n, int t, int v, float* p), (m, e, n, t, v, p))
  HAP_FORWARD(PaqSoftmaxWeights, (const float* p, int n, float* w), (p, n, w))
  HAP_FORWARD(WeightedSumMaps, (const float* const* m, const float* w, int n, int64_t s, float* o),
              (m, w, n, s, o))
  HAP_FORWARD(WeightedSumContiguous, (const float* m, const float* w, int n, int64_t s, float* o),
              (m, w, n, s, o))
  HAP_FORWARD(TokenScores, (const float* m, int64_t r, int v, float* s), (m, r, v, s))
  HAP_FORWARD(TokenScoresOfRows, (const float* m, int64_t r, int v, const int* rs, int n, float* s),
              (m, r, v, rs, n, s))
  HAP_FORWARD(StableTopK, (const float* s, int n, int k, int* kept), (s, n, k, kept))
  HAP_FORWARD(VisionZipMerge, (const kernels::VisionZipMergeArgs& a), (a))
#undef HAP_FORWARD

 private:
  void Count(const char* op) const {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[op];
  }
  const Backend& cpu_ = CpuBackend();
  mutable std::mutex mu_;
  mutable std::map<std::string, int> counts_;
};

TEST(BackendRouting, EveryOpGoesThroughTheGivenBackend) {
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/model/backend_routing";
  TinyModelOptions o;
  o.seed = 9;
  o.layers = 4;
  o.image_size = 112;  // 64 visual tokens
  o.corpus_path = std::string(HAP_SOURCE_DIR) + "/data/tokenizer/corpus.txt";
  ASSERT_TRUE(WriteTinyModel(o, dir).ok());
  CountingBackend counting;
  ModelOptions with;
  with.backend = &counting;
  auto cpu_model = LlavaModel::Load(dir, {});
  auto counted_model = LlavaModel::Load(dir, with);
  ASSERT_TRUE(cpu_model.ok() && counted_model.ok());
  EXPECT_EQ((*counted_model)->backend().name(), "counting");

  RgbImage img;
  img.width = img.height = 64;
  img.pixels.resize(64 * 64 * 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>((i * 31) % 251);
  const std::string png = EncodePng(img).value();
  PruneRequest prune;
  prune.method = "hap";
  prune.retain = 32;

  struct Run {
    PrefillResult prefill;
    std::vector<float> step;
  };
  auto run = [&](const LlavaModel& model) {
    auto encoded = EncodeImage(model, png, prune);
    EXPECT_TRUE(encoded.ok()) << encoded.status();
    Sampler sampler{SamplingParams{}};
    auto prefill = RunPrefill(model, "What is in the picture?", *encoded, prune, &sampler);
    EXPECT_TRUE(prefill.ok()) << prefill.status();
    Run r{std::move(*prefill), {}};
    auto step = model.DecodeStep(r.prefill.first_token, &r.prefill.cache);
    EXPECT_TRUE(step.ok()) << step.status();
    r.step = std::move(*step);
    return r;
  };
  const Run plain = run(**cpu_model);
  // The prefill's pruning ran through the backend too (checked before the decode step resets).
  const Run counted = [&] {
    auto encoded = EncodeImage(**counted_model, png, prune);
    EXPECT_TRUE(encoded.ok());
    // The vision layers up to the feature layer (-2 of 2: one), the projector's two products.
    EXPECT_EQ(counting.count("Attention"), o.vision_layers - 1);
    EXPECT_GT(counting.count("Linear"), 0);
    counting.Reset();
    Sampler sampler{SamplingParams{}};
    auto prefill = RunPrefill(**counted_model, "What is in the picture?", *encoded, prune, &sampler);
    EXPECT_TRUE(prefill.ok());
    EXPECT_EQ(counting.count("Attention"), o.layers);
    EXPECT_GT(counting.count("TextVisualAttention"), 0);
    EXPECT_GT(counting.count("StableTopK"), 0);
    EXPECT_EQ(counting.count("GatherRows"), 2 * counting.count("StableTopK"));
    counting.Reset();
    Run r{std::move(*prefill), {}};
    auto step = (*counted_model)->DecodeStep(r.prefill.first_token, &r.prefill.cache);
    EXPECT_TRUE(step.ok());
    r.step = std::move(*step);
    return r;
  }();
  EXPECT_EQ(plain.prefill.first_token, counted.prefill.first_token);
  EXPECT_EQ(plain.step, counted.step);  // bit for bit

  // One decode step: per layer q, k, v, o, gate, up, down and the LM head; two norms per layer
  // and the final one; RoPE on q and k; two residual adds; one SiLU·up; one attention.
  const int L = o.layers;
  EXPECT_EQ(counting.count("Linear"), 7 * L + 1);
  EXPECT_EQ(counting.count("RmsNorm"), 2 * L + 1);
  EXPECT_EQ(counting.count("Rope"), 2 * L);
  EXPECT_EQ(counting.count("Add"), 2 * L);
  EXPECT_EQ(counting.count("SiluMul"), L);
  EXPECT_EQ(counting.count("DecodeAttention"), L);
  EXPECT_EQ(counting.count("Attention"), 0);
  EXPECT_EQ(counting.count("Embedding"), 1);

  // VisionZip compresses the feature layer on the backend: one CLS attention row per head, its
  // sum over heads, one top-k, the dominant rows gathered, one merge; bit-identical features.
  PruneRequest zip;
  zip.method = "visionzip";
  zip.retain = 24;
  counting.Reset();
  auto zip_counted = EncodeImage(**counted_model, png, zip);
  ASSERT_TRUE(zip_counted.ok()) << zip_counted.status();
  EXPECT_EQ(counting.count("TextVisualAttention"), 1);
  EXPECT_EQ(counting.count("WeightedSumContiguous"), 1);
  EXPECT_EQ(counting.count("StableTopK"), 1);
  EXPECT_EQ(counting.count("GatherRows"), 1);
  EXPECT_EQ(counting.count("VisionZipMerge"), 1);
  auto zip_plain = EncodeImage(**cpu_model, png, zip);
  ASSERT_TRUE(zip_plain.ok()) << zip_plain.status();
  EXPECT_EQ(zip_counted->n_vis, 24);
  EXPECT_EQ(zip_plain->embeds, zip_counted->embeds);
}

}  // namespace
}  // namespace hap
