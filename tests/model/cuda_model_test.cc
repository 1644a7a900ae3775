// The whole model on the CUDA backend (kernels/cuda) executed by the SIMT emulation against the
// CPU backend, on tiny checkpoints in F32 and BF16: image embeddings, the prefill's KV cache and
// the first decode step's logits within the stated tolerance, and for every pruning method and
// budget the same kept visual tokens, the same first token and the same greedy answer. The
// emulated backend refuses any pointer that is not one of its device allocations, so this also
// shows the model keeps its activations, weights and caches in the backend's memory.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/emulation_counts.h"
#include "runtime/engine/decode_engine.h"
#include "runtime/engine/kv_block_pool.h"
#include "runtime/engine/paged_kv.h"
#include "runtime/image/png_encode.h"
#include "runtime/io/config.h"
#include "runtime/model/pipeline.h"
#include "runtime/model/row_sampling.h"
#include "runtime/prune/factory.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/common/pattern_png.h"
#include "tests/common/tiny_checkpoint.h"

namespace hap {
namespace {

// Worst |a − b| / (atol + rtol·|b|) over two arrays (1 = at the tolerance).
double Worst(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_TRUE(std::isfinite(a[i])) << i;
    worst =
        std::max(worst, std::fabs(double{a[i]} - b[i]) / (atol + rtol * std::fabs(double{b[i]})));
  }
  return worst;
}

std::string Png() { return hap::testing::PatternPng(); }

struct Tolerance {
  double atol, rtol;
};

// The bytes a device backend uploads for a checkpoint whose tensors are all stored in `dtype`,
// from the config's shapes: each tensor the model reads, once. The products' weight matrices stay
// in `dtype`; the rest (patch conv, embeddings of the vision tower, norms, biases) is read as F32.
// Vision layers past the feature layer and the unused post-LayerNorm are not read; a tied LM head
// shares the embedding.
int64_t WeightBytes(const LlavaConfig& cfg, DType dtype) {
  const VisionConfig& v = cfg.vision;
  const TextConfig& t = cfg.text;
  const int64_t dv = v.hidden_size, iv = v.intermediate_size;
  const int64_t dt = t.hidden_size, it = t.intermediate_size;
  const int64_t q_out = int64_t{t.num_attention_heads} * t.head_dim;
  const int64_t kv_out = int64_t{t.num_key_value_heads} * t.head_dim;
  const int64_t vision_layers = cfg.vision_layers_used();
  // Matrices: per vision layer q, k, v, out [dv, dv], fc1 [iv, dv], fc2 [dv, iv]; the projector
  // [dt, dv] and [dt, dt]; the embedding (and an untied LM head) [vocab, dt]; per decoder layer
  // q [q_out, dt], o [dt, q_out], k and v [kv_out, dt], gate, up [it, dt] and down [dt, it].
  const int64_t matrices = vision_layers * (4 * dv * dv + 2 * iv * dv) + dt * dv + dt * dt +
                           int64_t{t.vocab_size} * dt * (t.tie_word_embeddings ? 1 : 2) +
                           t.num_hidden_layers * (2 * q_out * dt + 2 * kv_out * dt + 3 * it * dt);
  // F32: the patch conv [dv, c, p, p], class embedding, positions [patches + 1, dv], pre-LN; per
  // vision layer four biases, two LayerNorms, the fc biases; the projector's biases; the final
  // norm and two RMSNorms per decoder layer.
  const int64_t f32 = dv * v.num_channels * v.patch_size * v.patch_size + dv +
                      (int64_t{v.num_patches()} + 1) * dv + 2 * dv +
                      vision_layers * (4 * dv + 2 * 2 * dv + iv + dv) +
                      (cfg.projector_bias ? 2 * dt : 0) + dt + t.num_hidden_layers * 2 * dt;
  return matrices * static_cast<int64_t>(DTypeSize(dtype)) +
         f32 * static_cast<int64_t>(sizeof(float));
}

// The checkpoint these tests share: 4 decoder layers, 112 px (64 visual tokens).
TinyModelOptions SmallModel(uint64_t seed, DType dtype = DType::kF32) {
  const TinyModelOptions o = testing_support::TinyOptions(seed, 4, 112, dtype);
  return o;
}

// SmallModel(seed) written under the build tree as `name` and loaded twice: on the CPU backend
// and on the emulated CUDA one (a member is null where its load failed, which is recorded).
struct ModelPair {
  std::unique_ptr<LlavaModel> cpu, gpu;
  bool ok() const { return cpu != nullptr && gpu != nullptr; }
};
ModelPair LoadPair(const std::string& name, uint64_t seed) {
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/model/" + name;
  EXPECT_TRUE(WriteTinyModel(SmallModel(seed), dir).ok());
  ModelOptions on_cuda;
  on_cuda.backend = *GetCudaBackend();
  auto cpu = LlavaModel::Load(dir, {});
  auto gpu = LlavaModel::Load(dir, on_cuda);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  ModelPair pair;
  if (cpu.ok()) pair.cpu = *std::move(cpu);
  if (gpu.ok()) pair.gpu = *std::move(gpu);
  return pair;
}

// A prefill's cache in host memory: on a device, copied out of the backend's memory.
KvCache HostCache(PrefillResult& pre) {
  if (pre.device_cache == nullptr) return std::move(pre.cache);
  absl::StatusOr<KvCache> host = pre.device_cache->ToHost();
  EXPECT_TRUE(host.ok()) << host.status();
  return host.ok() ? *std::move(host) : KvCache();
}

class CudaModelTest : public ::testing::TestWithParam<DType> {};

TEST_P(CudaModelTest, EveryMethodAndBudgetMatchesTheCpuBackend) {
  const DType dtype = GetParam();
  const std::string dir =
      std::string(HAP_BINARY_DIR) + "/tests/model/cuda_model_" + std::string(DTypeName(dtype));
  const TinyModelOptions o = SmallModel(21, dtype);
  ASSERT_TRUE(WriteTinyModel(o, dir).ok());
  absl::StatusOr<const Backend*> cuda = GetCudaBackend();
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  ModelOptions on_cuda;
  on_cuda.backend = *cuda;
  // The CUDA backend's attention takes the weights' type as its operands' (BackendCaps::
  // narrow_attention); the CPU backend is told to do the same, so both compute one thing.
  ModelOptions on_cpu;
  on_cpu.attention_dtype = dtype;
  auto cpu_model = LlavaModel::Load(dir, on_cpu);
  const int64_t before_load = (*cuda)->DeviceBytesInUse();
  auto cuda_model = LlavaModel::Load(dir, on_cuda);
  ASSERT_TRUE(cpu_model.ok()) << cpu_model.status();
  ASSERT_TRUE(cuda_model.ok()) << cuda_model.status();
  const LlavaModel& cpu = **cpu_model;
  const LlavaModel& gpu = **cuda_model;
  // The weights were uploaded, each once, and nothing else stays allocated.
  EXPECT_EQ((*cuda)->DeviceBytesInUse() - before_load, WeightBytes(gpu.config(), dtype));

  // F32: the CUDA kernels differ from the CPU's in summation order only. BF16: both backends
  // round activations to BF16 before products on BF16 weights, but not always the same ones
  // (the CPU's F32-input paths for short row counts), so the states drift by BF16 rounding.
  const Tolerance tol = dtype == DType::kF32 ? Tolerance{2e-5, 2e-4} : Tolerance{3e-2, 3e-2};
  const std::string png = Png();
  const std::string prompt = "What is in the picture?";
  int cases = 0;
  for (const std::string& method : PruneMethods()) {
    for (auto [retain, tau] : {std::pair{40.0, 1.0}, {24.0, 1.0}, {24.0, 0.05}}) {
      if (method == "none" && retain != 40.0) continue;
      // A concentrated PAQ-softmax (τ = 0.05) for the methods that take one.
      if (tau != 1.0 && !UsesPaqSoftmax(method)) continue;
      SCOPED_TRACE(method + " retain " + std::to_string(retain) + " tau " + std::to_string(tau));
      PruneRequest prune;
      prune.method = method;
      if (method != "none") prune.retain = retain;
      prune.seed = 3;
      prune.paq_temperature = tau;
      auto enc_cpu = EncodeImage(cpu, png, prune);
      auto enc_gpu = EncodeImage(gpu, png, prune);
      ASSERT_TRUE(enc_cpu.ok()) << enc_cpu.status();
      ASSERT_TRUE(enc_gpu.ok()) << enc_gpu.status();
      ASSERT_EQ(enc_cpu->n_vis, enc_gpu->n_vis);
      const double worst_embeds = Worst(enc_gpu->embeds, enc_cpu->embeds, tol.atol, tol.rtol);
      EXPECT_LT(worst_embeds, 1.0) << "embeddings";

      Sampler s_cpu{SamplingParams{}}, s_gpu{SamplingParams{}};
      auto pre_cpu = RunPrefill(cpu, prompt, *enc_cpu, prune, &s_cpu);
      auto pre_gpu = RunPrefill(gpu, prompt, *enc_gpu, prune, &s_gpu);
      ASSERT_TRUE(pre_cpu.ok()) << pre_cpu.status();
      ASSERT_TRUE(pre_gpu.ok()) << pre_gpu.status();
      EXPECT_EQ(pre_gpu->stats.prune.kept_original, pre_cpu->stats.prune.kept_original);
      // Each stage's record, also where the device decided it without the host (HAP's stages,
      // completed once the prefill ended).
      const PruneStats& sg = pre_gpu->stats.prune;
      const PruneStats& sc = pre_cpu->stats.prune;
      ASSERT_EQ(sg.stages.size(), sc.stages.size());
      for (size_t i = 0; i < sc.stages.size(); ++i) {
        EXPECT_EQ(sg.stages[i].after_layer, sc.stages[i].after_layer) << "stage " << i;
        EXPECT_EQ(sg.stages[i].tokens_before, sc.stages[i].tokens_before) << "stage " << i;
        EXPECT_EQ(sg.stages[i].kept_original, sc.stages[i].kept_original) << "stage " << i;
      }
      ASSERT_EQ(sg.hap_groups.size(), sc.hap_groups.size());
      for (size_t i = 0; i < sc.hap_groups.size(); ++i) {
        EXPECT_EQ(sg.hap_groups[i].kept, sc.hap_groups[i].kept) << "group " << i;
        EXPECT_EQ(sg.hap_groups[i].kept_original, sc.hap_groups[i].kept_original) << "group " << i;
        EXPECT_EQ(sg.hap_groups[i].token_scores.size(), sc.hap_groups[i].token_scores.size());
      }
      EXPECT_EQ(pre_gpu->stats.prune.paq_temperature, pre_cpu->stats.prune.paq_temperature);
      // HAP's head and layer weights themselves (the reference's F64 arithmetic on the device).
      ASSERT_EQ(pre_gpu->stats.prune.hap_layers.size(), pre_cpu->stats.prune.hap_layers.size());
      // (F32 only: BF16's drift in the maps moves the PAQs, which 1/τ amplifies.)
      for (size_t i = 0; dtype == DType::kF32 && i < pre_cpu->stats.prune.hap_layers.size(); ++i) {
        const auto& g = pre_gpu->stats.prune.hap_layers[i].head_weights;
        const auto& c = pre_cpu->stats.prune.hap_layers[i].head_weights;
        ASSERT_EQ(g.size(), c.size());
        for (size_t h = 0; h < c.size(); ++h) {
          EXPECT_NEAR(g[h], c[h], 1e-3 + 1e-2 * c[h]) << "layer record " << i << " head " << h;
        }
      }
      EXPECT_EQ(pre_gpu->stats.layer_visual_tokens, pre_cpu->stats.layer_visual_tokens);
      EXPECT_EQ(pre_gpu->first_token, pre_cpu->first_token);
      // The device prefill's cache stays in the backend's memory; its host copy for comparing.
      ASSERT_NE(pre_gpu->device_cache, nullptr);
      EXPECT_EQ(pre_gpu->device_cache->device(), gpu.backend().device());
      EXPECT_EQ(pre_cpu->device_cache, nullptr);
      EXPECT_EQ(pre_gpu->stats.kv_bytes, pre_cpu->stats.kv_bytes);
      EXPECT_EQ(pre_gpu->stats.kv_bytes_unpruned, pre_cpu->stats.kv_bytes_unpruned);
      const KvCache gpu_kv = HostCache(*pre_gpu);
      ASSERT_EQ(gpu_kv.n_layers(), pre_cpu->cache.n_layers());
      EXPECT_EQ(gpu_kv.next_position, pre_cpu->cache.next_position);
      double worst_kv = 0;
      for (int l = 0; l < pre_cpu->cache.n_layers(); ++l) {
        EXPECT_EQ(gpu_kv.layers[l].positions, pre_cpu->cache.layers[l].positions) << l;
        // Made without room for an answer: each layer sized to its own rows.
        EXPECT_EQ(pre_gpu->device_cache->capacity(l), pre_cpu->cache.len(l)) << l;
        worst_kv = std::max(
            {worst_kv, Worst(gpu_kv.layers[l].k, pre_cpu->cache.layers[l].k, tol.atol, tol.rtol),
             Worst(gpu_kv.layers[l].v, pre_cpu->cache.layers[l].v, tol.atol, tol.rtol)});
      }
      EXPECT_LT(worst_kv, 1.0) << "KV cache";

      // One decode step's logits: the host cache on the CPU, a device copy on CUDA (decoding
      // from the host cache is refused with a clear error).
      KvCache host_copy = gpu_kv;
      EXPECT_EQ(gpu.DecodeStep(pre_gpu->first_token, &host_copy).status().code(),
                absl::StatusCode::kFailedPrecondition);
      auto device_kv = DeviceKv::FromCache(gpu.backend(), gpu_kv, 1);
      ASSERT_TRUE(device_kv.ok()) << device_kv.status();
      KvCache cpu_cache = pre_cpu->cache;
      auto logits_cpu = cpu.DecodeStep(pre_cpu->first_token, &cpu_cache);
      auto logits_gpu = gpu.DecodeStep(pre_gpu->first_token, device_kv->get());
      ASSERT_TRUE(logits_cpu.ok()) << logits_cpu.status();
      ASSERT_TRUE(logits_gpu.ok()) << logits_gpu.status();
      const double worst_logits = Worst(*logits_gpu, *logits_cpu, tol.atol, tol.rtol);
      EXPECT_LT(worst_logits, 1.0) << "decode logits";

      // The greedy answer end to end (the decode loop moves the cache into device memory).
      GenerateRequest req;
      req.image_bytes = png;
      req.prompt = prompt;
      req.prune = prune;
      req.stop.max_new_tokens = 6;
      auto gen_cpu = Generate(cpu, req, nullptr);
      auto gen_gpu = Generate(gpu, req, nullptr);
      ASSERT_TRUE(gen_cpu.ok()) << gen_cpu.status();
      ASSERT_TRUE(gen_gpu.ok()) << gen_gpu.status();
      EXPECT_EQ(gen_gpu->decode.tokens, gen_cpu->decode.tokens);
      std::printf(
          "%s %-9s retain %2.0f: worst of tolerance: embeddings %.3f, KV %.3f, logits "
          "%.3f; kept %zu tokens\n",
          std::string(DTypeName(dtype)).c_str(), (method + (tau != 1.0 ? " tau 0.05" : "")).c_str(),
          retain, worst_embeds, worst_kv, worst_logits, pre_gpu->stats.prune.kept_original.size());
      ++cases;
    }
  }
  // Each method at two budgets ("none" once), hap and hap-flat once more at τ = 0.05.
  EXPECT_EQ(cases, 2 * static_cast<int>(PruneMethods().size()) - 1 + 2);
}

// The decode service's path on a device: a KV block pool in the backend's memory (F32 and BF16
// blocks), prefill caches admitted into it, batched steps of sequences with different pruning.
TEST(CudaModelTest, BatchedDecodeOverADevicePoolMatchesTheCpuBackend) {
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/model/cuda_model_pool";
  const TinyModelOptions o = SmallModel(22);
  ASSERT_TRUE(WriteTinyModel(o, dir).ok());
  const Backend* cuda = *GetCudaBackend();
  ModelOptions on_cuda;
  on_cuda.backend = cuda;
  auto cpu = LlavaModel::Load(dir, {});
  auto gpu = LlavaModel::Load(dir, on_cuda);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  const std::string png = Png();
  const int kv_dim = o.kv_heads * (o.hidden / o.heads);
  for (DType kv_dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(kv_dtype)));
    auto cpu_pool = KvBlockPool::Create(16, kv_dim, kv_dtype, int64_t{16} << 20);
    auto gpu_pool = KvBlockPool::Create(16, kv_dim, kv_dtype, int64_t{16} << 20, cuda);
    ASSERT_TRUE(cpu_pool.ok() && gpu_pool.ok());
    {
      std::vector<std::unique_ptr<PagedKv>> on_cpu, on_gpu;
      std::vector<int32_t> tokens;
      for (const char* method : {"none", "hap", "fastv"}) {
        PruneRequest prune;
        prune.method = method;
        if (prune.method != "none") prune.retain = 24;
        for (auto [model, pool, out] : {std::tuple{cpu->get(), cpu_pool->get(), &on_cpu},
                                        {gpu->get(), gpu_pool->get(), &on_gpu}}) {
          auto enc = EncodeImage(*model, png, prune);
          ASSERT_TRUE(enc.ok());
          Sampler sampler{SamplingParams{}};
          auto pre = RunPrefill(*model, "Which shapes are there?", *enc, prune, &sampler);
          ASSERT_TRUE(pre.ok()) << pre.status();
          auto paged = PagedKv::FromCache(pool, HostCache(*pre), 4);
          ASSERT_TRUE(paged.ok()) << paged.status();
          EXPECT_EQ((*paged)->device(), model->backend().device());
          out->push_back(std::move(*paged));
          if (model == cpu->get()) tokens.push_back(pre->first_token);
        }
      }
      std::vector<KvStore*> cpu_stores, gpu_stores;
      for (auto& p : on_cpu) cpu_stores.push_back(p.get());
      for (auto& p : on_gpu) gpu_stores.push_back(p.get());
      for (int step = 0; step < 3; ++step) {
        auto l_cpu = (*cpu)->DecodeBatch(tokens, cpu_stores);
        auto l_gpu = (*gpu)->DecodeBatch(tokens, gpu_stores);
        ASSERT_TRUE(l_cpu.ok()) << l_cpu.status();
        ASSERT_TRUE(l_gpu.ok()) << l_gpu.status();
        // BF16 blocks: both backends round K and V to nearest even (the parity table checks
        // the rounding bit for bit), but a value within F32 noise of a rounding boundary lands
        // on either side, one BF16 ulp (2^-8 relative) apart, and later steps read it.
        const double atol = kv_dtype == DType::kF32 ? 2e-5 : 1e-3;
        const double rtol = kv_dtype == DType::kF32 ? 2e-4 : 1e-2;
        EXPECT_LT(Worst(*l_gpu, *l_cpu, atol, rtol), 1.0) << "step " << step;
        const int vocab = static_cast<int>(l_cpu->size() / tokens.size());
        for (size_t i = 0; i < tokens.size(); ++i) {  // greedy next tokens, from the CPU's logits
          const float* row = l_cpu->data() + i * vocab;
          tokens[i] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
        }
      }
      EXPECT_GT((*gpu_pool)->stats().blocks_in_use, 0);
    }
    EXPECT_EQ((*gpu_pool)->stats().blocks_in_use, 0);  // every block back
    const int64_t held = cuda->DeviceBytesInUse();     // the slabs stay with the pool until it goes
    const int64_t peak_blocks = (*gpu_pool)->stats().blocks_peak;
    gpu_pool->reset();
    // Exactly the pool's slabs come back: 64 blocks each, as many as its peak took, a block being
    // K and V of 16 rows of kv_dim values. A calling thread's scratch area, which the backend
    // keeps and grows for reuse, is the backend's and stays.
    const int64_t slab_bytes = 64 * 2 * 16 * int64_t{kv_dim} * DTypeSize(kv_dtype);
    EXPECT_EQ(held - cuda->DeviceBytesInUse(), (peak_blocks + 63) / 64 * slab_bytes);
  }
}

// What comes back to the host. A prefill: its first token's id (greedy) and per pruning stage
// its kept indices — for HAP also, once at the end, one copy of every stage's PAQs, weights and
// token scores —; not the prompt's embeddings (spliced with the image's in the backend's
// memory), no PAQ scalar per layer, no wait per HAP stage and nothing of its KV cache, which
// stays there too. A decode
// step that samples on the device: the greedy rows' ids and the other rows' candidates (one copy
// each), and a row of logits only for a row counted in full_rows; each row's token is exactly
// Sampler::Sample's on the same backend's logits, with the same seed, batched or not, and a seeded
// answer equals the CPU backend's.
TEST(CudaModelTest, PrefillAndDecodeStepsCopyBackOnlyWhatTheHostNeeds) {
  const ModelPair models = LoadPair("cuda_model_syncs", 23);
  ASSERT_TRUE(models.ok());
  const LlavaModel& cpu = *models.cpu;
  const LlavaModel& gpu = *models.gpu;
  const std::string png = Png();
  const std::string prompt = "What is in the picture?";

  PrefillResult prefill;
  for (const char* method : {"none", "fastv", "hap", "uniform"}) {
    SCOPED_TRACE(method);
    PruneRequest prune;
    prune.method = method;
    if (prune.method != "none") prune.retain = 24;
    auto enc = EncodeImage(gpu, png, prune);
    ASSERT_TRUE(enc.ok()) << enc.status();
    Sampler sampler{SamplingParams{}};
    const int64_t before = cuda::emulation::DeviceToHostCopies();
    auto pre = RunPrefill(gpu, prompt, *enc, prune, &sampler);
    const int64_t copies = cuda::emulation::DeviceToHostCopies() - before;
    ASSERT_TRUE(pre.ok()) << pre.status();
    const int stages = static_cast<int>(pre->stats.prune.stages.size());
    const bool hap = prune.method == "hap" || prune.method == "uniform";
    if (prune.method != "none") {
      EXPECT_GT(stages, 0);
    }
    if (hap) {
      EXPECT_EQ(static_cast<int>(pre->stats.prune.hap_groups.size()), stages);
    }
    // The cache stays in device memory: no copy per layer. A stage decided on the host waits
    // for its kept indices; HAP's stay on the device, and after the last layer one copy brings
    // back every stage's indices and one HAP's explain scalars, however many stages there were.
    EXPECT_EQ(copies, hap ? 3 : 1 + stages);
    EXPECT_EQ(pre->first_token_sampling.argmax, 1);
    if (prune.method == "hap") prefill = std::move(*pre);
  }

  const int vocab = cpu.config().text.vocab_size;
  ASSERT_GT(vocab, kMaxTopLogits + 44);  // so that top_k 300 is between the bound and vocab
  // Greedy, top-k, top-p (no top-k), the full distribution, top-k above the candidate bound.
  const std::vector<SamplingParams> params = {{0.f, 1.f, 0, 0},       {0.8f, 1.f, 40, 11},
                                              {1.f, 0.9f, 0, 12},     {0.7f, 1.f, 0, 13},
                                              {1.2f, 0.95f, 300, 14}, {0.5f, 0.5f, 3, 15}};
  // Batches: greedy only, candidates only, every kind at once.
  const std::vector<std::vector<int>> batches = {{0}, {1, 2, 3, 5}, {0, 1, 2, 3, 4, 5}};
  for (const std::vector<int>& batch : batches) {
    SCOPED_TRACE("batch of " + std::to_string(batch.size()));
    // Each sequence twice from the prefill's cache: one decoded by DecodeBatch with the logits
    // copied out and sampled on the host, the other by DecodeBatchSampled.
    std::vector<std::unique_ptr<DeviceKv>> host_kv, device_kv;
    std::vector<KvStore*> host_stores, device_stores;
    std::vector<Sampler> host_samplers, device_samplers;
    for (int i : batch) {
      for (auto* kv : {&host_kv, &device_kv}) {
        auto copy = DeviceKv::FromCache(gpu.backend(), prefill.kv(), 4);
        ASSERT_TRUE(copy.ok()) << copy.status();
        kv->push_back(std::move(*copy));
      }
      host_stores.push_back(host_kv.back().get());
      device_stores.push_back(device_kv.back().get());
      host_samplers.emplace_back(params[i]);
      device_samplers.emplace_back(params[i]);
    }
    std::vector<Sampler*> device_pointers;
    for (Sampler& s : device_samplers) device_pointers.push_back(&s);
    const int n = static_cast<int>(batch.size());
    bool greedy = false, top = false;
    for (const Sampler& s : device_samplers) {
      greedy |= s.Needs(vocab) == Sampler::Need::kArgMax;
      top |= s.Needs(vocab) == Sampler::Need::kTop;
    }
    std::vector<int32_t> tokens(n, prefill.first_token);
    for (int step = 0; step < 3; ++step) {
      auto logits = gpu.DecodeBatch(tokens, host_stores);
      ASSERT_TRUE(logits.ok()) << logits.status();
      std::vector<int32_t> want(n);
      for (int i = 0; i < n; ++i) {
        want[i] = host_samplers[i].Sample(logits->data() + int64_t{i} * vocab, vocab);
      }
      RowSamplingCounts counts;
      const int64_t before = cuda::emulation::DeviceToHostCopies();
      auto got = gpu.DecodeBatchSampled(tokens, device_stores, device_pointers, &counts);
      const int64_t copies = cuda::emulation::DeviceToHostCopies() - before;
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, want) << "step " << step;
      EXPECT_EQ(copies, int{greedy} + int{top} + counts.full_rows) << "step " << step;
      int row_bound = 0;  // top_k 300: no bounded candidate set, the row comes back
      for (int i : batch) row_bound += params[i].top_k == 300;
      EXPECT_GE(counts.full_rows, row_bound);
      std::printf("batch of %d, step %d: %d argmax, %d by candidates, %d rows copied\n", n, step,
                  counts.argmax, counts.top, counts.full_rows);
      if (batch.size() == 1) {
        EXPECT_EQ(copies, 1);  // greedy: the token id alone
      }
      tokens = want;
    }
  }

  // A seeded answer with top-p sampling: on the device as on the CPU.
  GenerateRequest req;
  req.image_bytes = png;
  req.prompt = prompt;
  req.prune.method = "hap";
  req.prune.retain = 24;
  req.sampling = {0.8f, 0.9f, 0, 42};
  req.stop.max_new_tokens = 8;
  auto gen_cpu = Generate(cpu, req, nullptr);
  auto gen_gpu = Generate(gpu, req, nullptr);
  ASSERT_TRUE(gen_cpu.ok()) << gen_cpu.status();
  ASSERT_TRUE(gen_gpu.ok()) << gen_gpu.status();
  EXPECT_EQ(gen_gpu->decode.tokens, gen_cpu->decode.tokens);
}

// In process (hapctl run, Generate) the image embeddings stay in device memory between the
// encoder and the prefill: encoding copies nothing back, and the prefill spliced from them is
// the one spliced from their host copy — also for a method that reads the input embeddings on
// the host (DivPrune), which gets them copied there. The CPU backend keeps them on the host.
TEST(CudaModelTest, EmbeddingsKeptInDeviceMemoryPrefillAsFromTheHost) {
  const ModelPair models = LoadPair("cuda_model_device_embeds", 29);
  ASSERT_TRUE(models.ok());
  const LlavaModel& gpu = *models.gpu;
  const std::string png = Png();
  for (const char* method : {"none", "hap", "divprune"}) {
    SCOPED_TRACE(method);
    PruneRequest prune;
    prune.method = method;
    if (prune.method != "none") prune.retain = 24;
    auto on_host = EncodeImage(gpu, png, prune);
    const int64_t before = cuda::emulation::DeviceToHostCopies();
    auto on_device = EncodeImage(gpu, png, prune, /*keep_in_backend=*/true);
    EXPECT_EQ(cuda::emulation::DeviceToHostCopies() - before, 0);
    ASSERT_TRUE(on_host.ok()) << on_host.status();
    ASSERT_TRUE(on_device.ok()) << on_device.status();
    EXPECT_TRUE(on_device->embeds.empty());
    ASSERT_NE(on_device->embeds_in_backend, nullptr);
    EXPECT_EQ(on_device->n_vis, on_host->n_vis);
    std::vector<float> copied(on_device->embeds_in_backend->size());
    ASSERT_TRUE(on_device->embeds_in_backend->CopyTo(copied.data()).ok());
    EXPECT_EQ(copied, on_host->embeds);
    Sampler s_host{SamplingParams{}}, s_device{SamplingParams{}};
    auto from_host = RunPrefill(gpu, "What is in the picture?", *on_host, prune, &s_host);
    auto from_device = RunPrefill(gpu, "What is in the picture?", *on_device, prune, &s_device);
    ASSERT_TRUE(from_host.ok()) << from_host.status();
    ASSERT_TRUE(from_device.ok()) << from_device.status();
    EXPECT_EQ(from_device->first_token, from_host->first_token);
    EXPECT_EQ(from_device->stats.prune.kept_original, from_host->stats.prune.kept_original);
    const KvCache a = HostCache(*from_host), b = HostCache(*from_device);
    for (int l = 0; l < a.n_layers(); ++l) {
      EXPECT_EQ(b.layers[l].k, a.layers[l].k) << l;
      EXPECT_EQ(b.layers[l].positions, a.layers[l].positions) << l;
    }
  }
  auto on_cpu = EncodeImage(*models.cpu, png, PruneRequest{}, /*keep_in_backend=*/true);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  EXPECT_EQ(on_cpu->embeds_in_backend, nullptr);
  EXPECT_FALSE(on_cpu->embeds.empty());
}

// hapctl run and the in-process pipeline on a device: the prefill's cache is made with room for
// the answer, and the decode loop decodes from it in place — no copy through the host, no second
// allocation — giving the CPU backend's tokens, greedy and sampled.
TEST(CudaModelTest, TheDecodeLoopDecodesFromThePrefillsDeviceCache) {
  const ModelPair models = LoadPair("cuda_model_decode_loop", 26);
  ASSERT_TRUE(models.ok());
  const LlavaModel& cpu = *models.cpu;
  const LlavaModel& gpu = *models.gpu;
  GenerateRequest req;
  req.image_bytes = Png();
  req.prompt = "What is in the picture?";
  req.prune.method = "hap";
  req.prune.retain = 24;
  req.stop.max_new_tokens = 6;
  auto enc = EncodeImage(gpu, req.image_bytes, req.prune);
  ASSERT_TRUE(enc.ok()) << enc.status();
  for (const SamplingParams& sampling :
       {SamplingParams{0.f, 1.f, 0, 0}, SamplingParams{0.8f, 0.9f, 0, 42}}) {
    const bool greedy = sampling.temperature == 0.f;
    SCOPED_TRACE(greedy ? "greedy" : "top-p");
    req.sampling = sampling;
    auto want = Generate(cpu, req, nullptr);
    ASSERT_TRUE(want.ok()) << want.status();

    Sampler sampler(sampling);
    auto pre = RunPrefill(gpu, req.prompt, *enc, req.prune, &sampler, req.stop.max_new_tokens);
    ASSERT_TRUE(pre.ok()) << pre.status();
    ASSERT_NE(pre->device_cache, nullptr);
    const DeviceKv& kv = *pre->device_cache;
    std::vector<int> rows;
    std::vector<const void*> k_rows;
    std::vector<KvSpan> spans;
    for (int l = 0; l < kv.n_layers(); ++l) {
      rows.push_back(kv.len(l));
      EXPECT_EQ(kv.capacity(l), kv.len(l) + req.stop.max_new_tokens) << l;
      kv.Spans(l, &spans);
      k_rows.push_back(spans[0].k);
    }
    EXPECT_LT(rows.back(), rows.front());  // HAP: layers of their own lengths

    const int64_t before = cuda::emulation::DeviceToHostCopies();
    auto got = ContinueDecodeLoop(gpu, &pre->kv(), pre->first_token, sampler, req.stop, nullptr);
    const int64_t copies = cuda::emulation::DeviceToHostCopies() - before;
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->tokens, want->decode.tokens);
    const int steps = static_cast<int>(got->tokens.size()) - 1;
    EXPECT_GT(steps, 0);
    // The steps' rows landed in the prefill's own allocation.
    for (int l = 0; l < kv.n_layers(); ++l) {
      EXPECT_EQ(kv.len(l), rows[l] + steps) << l;
      kv.Spans(l, &spans);
      EXPECT_EQ(spans[0].k, k_rows[l]) << l;
    }
    // Nothing of the cache came back: a greedy step copies its token id alone, a sampled one
    // its candidates (and a row of logits only where they cannot decide).
    if (greedy) {
      EXPECT_EQ(copies, steps);
    } else {
      EXPECT_GE(copies, steps);
      EXPECT_LE(copies, 2 * steps);
    }
  }
}

// The prefill's first token is drawn where the logits are: a greedy row sends back its id, a
// sampled one its candidates (and the row only where they cannot decide: top_k 300 here), never
// the row of logits a prefill without a sampler copies out. The token is the one the sampler
// draws from that row, its random stream moves as Sample's does, and the CPU backend (which
// samples its host logits in place) draws the same token with the same seed.
TEST(CudaModelTest, ThePrefillSamplesItsFirstTokenWhereTheLogitsAre) {
  const ModelPair models = LoadPair("cuda_model_first_token", 24);
  ASSERT_TRUE(models.ok());
  const LlavaModel& cpu = *models.cpu;
  const LlavaModel& gpu = *models.gpu;
  const int vocab = gpu.config().text.vocab_size;
  ASSERT_GT(vocab, kMaxTopLogits + 44);
  const std::string png = Png();
  const std::string prompt = "What is in the picture?";
  // Greedy, top-k, top-p (no top-k: the device's denominator), the full distribution, top-k
  // above the candidate bound (the row comes back).
  const std::vector<SamplingParams> params = {{0.f, 1.f, 0, 0},
                                              {0.8f, 1.f, 40, 11},
                                              {1.f, 0.9f, 0, 12},
                                              {0.7f, 1.f, 0, 13},
                                              {1.2f, 0.95f, 300, 14}};
  for (const char* method : {"none", "hap"}) {
    SCOPED_TRACE(method);
    PruneRequest prune;
    prune.method = method;
    if (prune.method != "none") prune.retain = 24;
    auto enc_cpu = EncodeImage(cpu, png, prune);
    auto enc_gpu = EncodeImage(gpu, png, prune);
    ASSERT_TRUE(enc_cpu.ok() && enc_gpu.ok());
    // The unpruned prefill without a sampler: the same ops, then the row of logits copied out.
    std::vector<float> row;
    int64_t copies_with_row = 0, bytes_with_row = 0;
    if (prune.method == "none") {
      auto tokens = gpu.Tokenize(prompt, enc_gpu->n_vis);
      ASSERT_TRUE(tokens.ok()) << tokens.status();
      const int64_t c0 = cuda::emulation::DeviceToHostCopies(),
                    b0 = cuda::emulation::DeviceToHostBytes();
      auto out = gpu.Prefill(*tokens, enc_gpu->embeds, nullptr);
      copies_with_row = cuda::emulation::DeviceToHostCopies() - c0;
      bytes_with_row = cuda::emulation::DeviceToHostBytes() - b0;
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(out->first_token, -1);
      row = out->logits;
      ASSERT_EQ(static_cast<int>(row.size()), vocab);
    }
    for (const SamplingParams& p : params) {
      SCOPED_TRACE("temperature " + std::to_string(p.temperature) + " top_k " +
                   std::to_string(p.top_k) + " top_p " + std::to_string(p.top_p));
      Sampler s_cpu(p), s_gpu(p);
      auto pre_cpu = RunPrefill(cpu, prompt, *enc_cpu, prune, &s_cpu);
      const int64_t c0 = cuda::emulation::DeviceToHostCopies(),
                    b0 = cuda::emulation::DeviceToHostBytes();
      auto pre_gpu = RunPrefill(gpu, prompt, *enc_gpu, prune, &s_gpu);
      const int64_t copies = cuda::emulation::DeviceToHostCopies() - c0;
      const int64_t bytes = cuda::emulation::DeviceToHostBytes() - b0;
      ASSERT_TRUE(pre_cpu.ok()) << pre_cpu.status();
      ASSERT_TRUE(pre_gpu.ok()) << pre_gpu.status();
      EXPECT_EQ(pre_gpu->first_token, pre_cpu->first_token);
      const RowSamplingCounts& c = pre_gpu->first_token_sampling;
      EXPECT_EQ(c.host, 0);
      EXPECT_EQ(pre_cpu->first_token_sampling.host, 1);
      EXPECT_EQ(pre_cpu->first_token_sampling.argmax + pre_cpu->first_token_sampling.top +
                    pre_cpu->first_token_sampling.full_rows,
                0);
      const Sampler::Need need = s_gpu.Needs(vocab);
      EXPECT_EQ(c.argmax, need == Sampler::Need::kArgMax ? 1 : 0);
      EXPECT_EQ(c.argmax + c.top + c.full_rows, 1);
      if (need == Sampler::Need::kRow) {
        EXPECT_EQ(c.full_rows, 1);
      }
      // Both random streams are where one Sample() leaves them.
      EXPECT_EQ(s_gpu.Draw(), s_cpu.Draw());
      if (prune.method == "none") {
        // The same token as sampling the copied row, with one draw.
        Sampler s_row(p);
        EXPECT_EQ(pre_gpu->first_token, s_row.Sample(row));
        // The end of the prefill: the id (I32), or the candidates (F32 values and I32 ids
        // [k], then the F64 denominator, in one copy), plus the row on a fallback; the rest is
        // the same as the prefill that copied out its row.
        int64_t end_copies = c.full_rows, end_bytes = int64_t{c.full_rows} * 4 * vocab;
        if (need == Sampler::Need::kArgMax) {
          end_copies += 1;
          end_bytes += 4;
        } else if (need == Sampler::Need::kTop) {
          end_copies += 1;
          end_bytes += 8 * s_gpu.TopCount(vocab) + 8;
        }
        EXPECT_EQ(copies - copies_with_row, end_copies - 1);
        EXPECT_EQ(bytes - bytes_with_row, end_bytes - int64_t{4} * vocab);
      } else {
        // HAP: at the end, every stage's kept indices in one copy and its scalars in another,
        // however many stages there were.
        EXPECT_GT(pre_gpu->stats.prune.stages.size(), 1u);
        EXPECT_EQ(copies, 2 + (need == Sampler::Need::kRow ? 0 : 1) + c.full_rows);
      }
      std::printf(
          "%s, first token %d: %d argmax, %d by candidates, %d rows copied; %lld copies, "
          "%lld bytes\n",
          method, pre_gpu->first_token, c.argmax, c.top, c.full_rows,
          static_cast<long long>(copies), static_cast<long long>(bytes));
    }
  }
}

// hap-decode's sampling metric comes from the engine's report after each step: on a device each
// row is an id, candidates or (fallback) a row of logits; on the CPU backend every row is
// sampled in place. Every row a step sampled is counted once: each answer's tokens but the
// first (the prefill's).
TEST(CudaModelTest, TheDecodeEngineReportsHowEachStepsRowsWereSampled) {
  const TinyModelOptions o = SmallModel(25);
  const ModelPair models = LoadPair("cuda_model_engine", 25);
  ASSERT_TRUE(models.ok());
  const std::string png = Png();
  const int kv_dim = o.kv_heads * (o.hidden / o.heads);
  // Greedy, top-k (candidates), top-k above the candidate bound (rows).
  const std::vector<SamplingParams> params = {
      {0.f, 1.f, 0, 0}, {0.8f, 1.f, 40, 11}, {1.2f, 0.95f, 300, 14}};
  std::vector<std::vector<int32_t>> answers[2];
  for (const LlavaModel* model : {models.cpu.get(), models.gpu.get()}) {
    const bool device = model->backend().device() != Device::kCpu;
    SCOPED_TRACE(device ? "cuda" : "cpu");
    auto pool = KvBlockPool::Create(16, kv_dim, DType::kF32, int64_t{16} << 20, &model->backend());
    ASSERT_TRUE(pool.ok()) << pool.status();
    RowSamplingCounts total;
    int steps_reported = 0;
    std::vector<absl::StatusOr<DecodeResult>> results;
    {
      DecodeEngineOptions options;
      options.max_batch = 4;
      options.pool = pool->get();
      options.on_sampled = [&](const RowSamplingCounts& c) {  // the engine thread
        total.argmax += c.argmax;
        total.top += c.top;
        total.full_rows += c.full_rows;
        total.host += c.host;
        ++steps_reported;
      };
      DecodeEngine engine(*model, options);
      std::vector<std::promise<absl::StatusOr<DecodeResult>>> done(params.size());
      PruneRequest prune;
      prune.method = "hap";
      prune.retain = 24;
      auto enc = EncodeImage(*model, png, prune);
      ASSERT_TRUE(enc.ok()) << enc.status();
      for (size_t i = 0; i < params.size(); ++i) {
        DecodeJob job;
        job.sampler = Sampler(params[i]);
        auto pre = RunPrefill(*model, "Which shapes are there?", *enc, prune, &job.sampler);
        ASSERT_TRUE(pre.ok()) << pre.status();
        job.cache = HostCache(*pre);
        job.first_token = pre->first_token;
        job.stop.max_new_tokens = 6;
        job.done = [&done, i](absl::StatusOr<DecodeResult> r) { done[i].set_value(std::move(r)); };
        engine.Submit(std::move(job));
      }
      for (auto& d : done) results.push_back(d.get_future().get());
    }                          // the engine's thread has ended: `total` is complete
    std::vector<int> sampled;  // rows each answer's steps sampled
    for (const auto& r : results) {
      ASSERT_TRUE(r.ok()) << r.status();
      sampled.push_back(static_cast<int>(r->tokens.size()) - 1);
      answers[device].push_back(r->tokens);
    }
    // One report per step: at least the longest answer's steps, at most one per row.
    EXPECT_GE(steps_reported, *std::max_element(sampled.begin(), sampled.end()));
    EXPECT_LE(steps_reported, sampled[0] + sampled[1] + sampled[2]);
    if (device) {
      EXPECT_EQ(total.argmax, sampled[0]);
      EXPECT_EQ(total.top + total.full_rows, sampled[1] + sampled[2]);
      EXPECT_GE(total.full_rows, sampled[2]);
      EXPECT_EQ(total.host, 0);
    } else {
      EXPECT_EQ(total.host, sampled[0] + sampled[1] + sampled[2]);
      EXPECT_EQ(total.argmax + total.top + total.full_rows, 0);
    }
    EXPECT_GT(sampled[0] + sampled[1] + sampled[2], 0);
    std::printf("%s engine: %d steps; %d argmax, %d by candidates, %d rows, %d in place\n",
                device ? "cuda" : "cpu", steps_reported, total.argmax, total.top, total.full_rows,
                total.host);
  }
  EXPECT_EQ(answers[1], answers[0]);  // same seeds, same answers
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaModelTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace hap
