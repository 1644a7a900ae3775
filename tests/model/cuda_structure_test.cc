// Structural counts of the CUDA backend's work, on the SIMT emulation (ctest -L cuda_structure):
// the kernel launches and products (one cuBLAS call each on a GPU) one decoder layer enqueues, in
// an unpruned prefill and in a decode step — counted as the difference between a 4-layer and a
// 2-layer checkpoint that differ in nothing else, divided by 2, so the embedding, the final norm,
// the LM head and the sampling cancel out — and the device allocations and frees of a request
// once a first one has run.
#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/emulation_counts.h"
#include "runtime/model/pipeline.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/common/pattern_png.h"

namespace hap {
namespace {

int64_t Enqueued() { return cuda::emulation::KernelLaunches() + cuda::emulation::Products(); }

struct Counts {
  int64_t prefill = 0;
  int64_t decode_step = 0;
};

// What an unpruned prefill and the first decode step after it enqueue on a `layers`-layer
// checkpoint of `dtype` weights.
Counts Count(int layers, DType dtype) {
  TinyModelOptions o;
  o.seed = 5;
  o.layers = layers;
  o.image_size = 56;
  o.dtype = dtype;
  o.corpus_path = std::string(HAP_SOURCE_DIR) + "/data/tokenizer/corpus.txt";
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/model/cuda_structure_" +
                          std::to_string(layers) + "_" + std::string(DTypeName(dtype));
  EXPECT_TRUE(WriteTinyModel(o, dir).ok());
  ModelOptions on_cuda;
  on_cuda.backend = *GetCudaBackend();
  absl::StatusOr<std::unique_ptr<LlavaModel>> model = LlavaModel::Load(dir, on_cuda);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  PruneRequest none;
  none.method = "none";
  absl::StatusOr<EncodeResult> encoded = EncodeImage(**model, hap::testing::PatternPng(), none);
  EXPECT_TRUE(encoded.ok()) << encoded.status();
  if (!encoded.ok()) return {};
  Sampler sampler{SamplingParams{}};
  Counts counts;
  int64_t before = Enqueued();
  absl::StatusOr<PrefillResult> prefill =
      RunPrefill(**model, "What is in the picture?", *encoded, none, &sampler, 4);
  EXPECT_TRUE(prefill.ok()) << prefill.status();
  if (!prefill.ok()) return {};
  counts.prefill = Enqueued() - before;
  before = Enqueued();
  EXPECT_TRUE((*model)->DecodeStep(prefill->first_token, &prefill->kv()).ok());
  counts.decode_step = Enqueued() - before;
  return counts;
}

// Per layer, BF16 weights: 2 RMSNorms that also round their rows for the products after them
// (RmsNormRounded), 7 products, the rounding of the o and down products' inputs (2), RoPE on q
// and k (2), 2 residual adds and 1 SiLU·up = 16 (rounding before each product took 21), and the
// attention. In a decode step that is one kernel over the cache: 17. In the prefill, with BF16
// operands (ModelOptions::attention_dtype unset on a BF16 checkpoint, on a backend whose caps
// say narrow_attention), it is q, k and v rounded (one launch), the q·kᵀ and p·v products (2)
// and the softmax between them (1): 20.
TEST(CudaStructure, LaunchesPerDecoderLayerOnBf16Weights) {
  const Counts two = Count(2, DType::kBF16), four = Count(4, DType::kBF16);
  EXPECT_EQ((four.prefill - two.prefill) / 2, 16 + 4);
  EXPECT_EQ((four.prefill - two.prefill) % 2, 0);
  EXPECT_EQ((four.decode_step - two.decode_step) / 2, 17);
}

// F32 weights multiply in F32: no rounding, so 2 norms, 7 products, 2 RoPE, 1 attention, 2 adds
// and 1 SiLU·up = 15.
TEST(CudaStructure, LaunchesPerDecoderLayerOnF32Weights) {
  const Counts two = Count(2, DType::kF32), four = Count(4, DType::kF32);
  EXPECT_EQ((four.prefill - two.prefill) / 2, 15);
  EXPECT_EQ((four.decode_step - two.decode_step) / 2, 15);
}

// After one request has run, the same request again allocates and frees no device memory: the
// encoder's activations, the prefill's workspace, HAP's maps and scores, the KV cache's layers, a
// decode step's workspace and logits all come out of the block cache and go back to it.
TEST(CudaStructure, NoDeviceAllocationOrFreeAfterWarmUp) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the block cache caches nothing under AddressSanitizer (it checks the frees)";
#endif
  TinyModelOptions o;
  o.seed = 6;
  o.layers = 4;
  o.image_size = 112;  // 64 visual tokens
  o.dtype = DType::kBF16;
  o.corpus_path = std::string(HAP_SOURCE_DIR) + "/data/tokenizer/corpus.txt";
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/model/cuda_structure_warm";
  ASSERT_TRUE(WriteTinyModel(o, dir).ok());
  ModelOptions on_cuda;
  on_cuda.backend = *GetCudaBackend();
  absl::StatusOr<std::unique_ptr<LlavaModel>> model = LlavaModel::Load(dir, on_cuda);
  ASSERT_TRUE(model.ok()) << model.status();
  for (const char* method : {"none", "hap"}) {
    PruneRequest prune;
    prune.method = method;
    if (prune.method == "hap") prune.retain = 24;
    auto request = [&] {
      absl::StatusOr<EncodeResult> encoded =
          EncodeImage(**model, hap::testing::PatternPng(), prune);
      ASSERT_TRUE(encoded.ok()) << encoded.status();
      Sampler sampler{SamplingParams{}};
      absl::StatusOr<PrefillResult> prefill =
          RunPrefill(**model, "What is in the picture?", *encoded, prune, &sampler, 3);
      ASSERT_TRUE(prefill.ok()) << prefill.status();
      int32_t token = prefill->first_token;
      for (int step = 0; step < 3; ++step) {
        absl::StatusOr<std::vector<float>> logits = (*model)->DecodeStep(token, &prefill->kv());
        ASSERT_TRUE(logits.ok()) << logits.status();
        token = static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) -
                                     logits->begin());
      }
    };
    const int64_t cold = cuda::emulation::DeviceAllocations();
    request();  // warm-up
    // The first request on the model takes its memory from the device (the counter counts).
    if (prune.method == "none") {
      EXPECT_GT(cuda::emulation::DeviceAllocations() - cold, 0);
    }
    const int64_t allocations = cuda::emulation::DeviceAllocations();
    const int64_t frees = cuda::emulation::DeviceFrees();
    request();
    EXPECT_EQ(cuda::emulation::DeviceAllocations() - allocations, 0) << method;
    EXPECT_EQ(cuda::emulation::DeviceFrees() - frees, 0) << method;
  }
}

}  // namespace
}  // namespace hap
