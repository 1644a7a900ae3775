// Structural counts of the CUDA backend's work, on the SIMT emulation (ctest -L cuda_structure):
// the kernel launches and products (one cuBLAS call each on a GPU) one decoder layer enqueues, in
// an unpruned prefill and in a decode step — counted as the difference between a 4-layer and a
// 2-layer checkpoint that differ in nothing else, divided by 2, so the embedding, the final norm,
// the LM head and the sampling cancel out — the device→host waits inside a HAP prefill, and the
// device allocations and frees of a request once a first one has run.
#include <algorithm>
#include <bit>
#include <future>
#include <string>
#include <variant>
#include <vector>

#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/emulation_counts.h"
#include "kernels/step.h"
#include "runtime/engine/decode_engine.h"
#include "runtime/engine/kv_block_pool.h"
#include "runtime/model/pipeline.h"
#include "runtime/prune/factory.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/common/pattern_png.h"
#include "tests/common/tiny_checkpoint.h"
#include "tests/kernels/backends.h"

namespace hap {
namespace {

// A tiny checkpoint written to the build tree as cuda_structure_<name>, loaded on the emulated
// CUDA backend with its KV caches in `kv_dtype`.
absl::StatusOr<std::unique_ptr<LlavaModel>> LoadOnCuda(TinyModelOptions o, const std::string& name,
                                                       DType kv_dtype = DType::kF32,
                                                       bool decode_graphs = true) {
  o.corpus_path = std::string(HAP_SOURCE_DIR) + "/data/tokenizer/corpus.txt";
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/model/cuda_structure_" + name;
  if (absl::Status s = WriteTinyModel(o, dir); !s.ok()) return s;
  ModelOptions on_cuda;
  on_cuda.backend = *GetCudaBackend();
  on_cuda.kv_dtype = kv_dtype;
  on_cuda.decode_graphs = decode_graphs;
  return LlavaModel::Load(dir, on_cuda);
}

int64_t Enqueued() { return cuda::emulation::KernelLaunches() + cuda::emulation::Products(); }

struct Counts {
  int64_t prefill = 0;
  int64_t decode_step = 0;
};

// What an unpruned prefill and the first decode step after it enqueue on a `layers`-layer
// checkpoint of `dtype` weights with a KV cache of `kv_dtype`, after a first prefill (what a
// process does once, such as making RoPE's table, is not a layer's).
Counts Count(int layers, DType dtype, DType kv_dtype = DType::kF32) {
  const TinyModelOptions o = testing_support::TinyOptions(5, layers, 56, dtype);
  absl::StatusOr<std::unique_ptr<LlavaModel>> model =
      LoadOnCuda(o,
                 std::to_string(layers) + "_" + std::string(DTypeName(dtype)) + "_kv_" +
                     std::string(DTypeName(kv_dtype)),
                 kv_dtype);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  PruneRequest none;
  none.method = "none";
  absl::StatusOr<EncodeResult> encoded = EncodeImage(**model, hap::testing::PatternPng(), none);
  EXPECT_TRUE(encoded.ok()) << encoded.status();
  if (!encoded.ok()) return {};
  Sampler sampler{SamplingParams{}};
  EXPECT_TRUE(RunPrefill(**model, "What is in the picture?", *encoded, none, &sampler, 4).ok());
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

// Per layer, BF16 weights: 2 RMSNorms that also write their rows rounded for the products after
// them (RmsNormRounded), 4 products (q, k and v as one batched product over weights placed back
// to back, o, gate and up as one, down: 7 one by one), RoPE on q and k in one launch, and a SiLU·up
// that also writes the down product's input rounded = 8, and the attention: rounding before each
// of 7 products, two RoPEs and two residual adds took 24. In the prefill, with BF16 operands
// (ModelOptions::attention_dtype unset on a BF16 checkpoint, on a backend whose caps say
// narrow_attention), the attention is one FlashAttention kernel, which rotates q and k itself
// (FlashAttentionRope: the RoPE launch goes), rounds q, k and v as it loads them and writes the
// o product's input rounded too, and the o and down products add themselves to the residual
// stream as they are written (no Add launches): 8. In a decode step RoPE keeps its launch, and
// the attention is one kernel over the cache, whose output the o product rounds itself (2
// launches) and then leaves to an Add: 12.
TEST(CudaStructure, LaunchesPerDecoderLayerOnBf16Weights) {
  const Counts two = Count(2, DType::kBF16), four = Count(4, DType::kBF16);
  EXPECT_EQ((four.prefill - two.prefill) / 2, 8);
  EXPECT_EQ((four.prefill - two.prefill) % 2, 0);
  // The decode step's layer: the prefill's 7 that are not its attention, RoPE, the new K and V
  // rows stored at their cache slots (one launch for the batch: StoreKvRows), the attention over
  // the cache (one slice: the cache holds fewer than kDecodeRowsPerSplit rows, so no combine
  // launch), the o product's input rounding and the residual Add.
  EXPECT_EQ((four.decode_step - two.decode_step) / 2, 7 + 1 + 4);

  // Into a BF16 cache (what the services keep on a GPU) a prefill layer's K and V rows are rounded
  // as they are stored, both in one launch (Backend::StoreF32PairAs; an F32 cache copies them);
  // a decode step's StoreKvRows rounds its rows already.
  const Counts two16 = Count(2, DType::kBF16, DType::kBF16);
  const Counts four16 = Count(4, DType::kBF16, DType::kBF16);
  EXPECT_EQ((four16.prefill - two16.prefill) / 2, 8 + 1);
  EXPECT_EQ((four16.decode_step - two16.decode_step) / 2, 7 + 1 + 4);
}

// F32 weights multiply in F32: no rounding, so 2 norms, 7 products, RoPE on q and k in one
// launch, 1 attention, 2 adds and 1 SiLU·up = 14; a decode step also stores its KV rows (15).
TEST(CudaStructure, LaunchesPerDecoderLayerOnF32Weights) {
  const Counts two = Count(2, DType::kF32), four = Count(4, DType::kF32);
  EXPECT_EQ((four.prefill - two.prefill) / 2, 14);
  EXPECT_EQ((four.decode_step - two.decode_step) / 2, 15);
}

// A prefill layer's q and k rotation goes into its FlashAttention (FlashAttentionRope): the
// backend's plan of RMSNorm, the q, k and v products, the RoPE pair, the attention, a Call that
// reads q, k, v and the log-sum-exp (as the KV cache and the pruners do) and the o product with
// its residual add gives the op-by-op plan's values bit for bit, launching no RopeKernel. Query
// heads that share kv heads and not (k and v, or q, k and v, one batched product); positions with
// gaps, inside RoPE's table and past it (angles in F64).
TEST(CudaStructure, ARopePairGoesIntoTheFlashAttentionAfterIt) {
  const Backend& b = **GetCudaBackend();
  constexpr int kRows = 130, kD = 64, kHd = 16, kHeads = kD / kHd, kQDim = kHeads * kHd;
  for (int kv_heads : {2, 4}) {
    const int kv_dim = kv_heads * kHd;
    SCOPED_TRACE("kv heads " + std::to_string(kv_heads));
    // q, k and v back to back in one BF16 buffer, as PlacedWeights places a layer's; then o.
    const std::vector<float> qkv =
        testing_support::Random(static_cast<size_t>(kQDim + 2 * kv_dim) * kD, 5, 0.2f);
    const std::vector<float> o = testing_support::Random(size_t{kD} * kQDim, 6, 0.2f);
    std::vector<uint16_t> qkv16(qkv.size()), o16(o.size());
    ConvertFromF32(DType::kBF16, qkv.data(), qkv16.data(), qkv.size());
    ConvertFromF32(DType::kBF16, o.data(), o16.data(), o.size());
    BackendBuffer qkv_storage, o_storage;
    absl::StatusOr<TensorView> wqkv = b.PlaceWeight(
        TensorView(qkv16.data(), DType::kBF16, Device::kCpu, {kQDim + 2 * kv_dim, kD}),
        &qkv_storage);
    absl::StatusOr<TensorView> wo =
        b.PlaceWeight(TensorView(o16.data(), DType::kBF16, Device::kCpu, {kD, kQDim}), &o_storage);
    ASSERT_TRUE(wqkv.ok() && wo.ok());
    const auto* base = static_cast<const uint16_t*>(wqkv->data);
    const TensorView wq(base, DType::kBF16, Device::kCuda, {kQDim, kD});
    const TensorView wk(base + kQDim * kD, DType::kBF16, Device::kCuda, {kv_dim, kD});
    const TensorView wv(base + (kQDim + kv_dim) * kD, DType::kBF16, Device::kCuda, {kv_dim, kD});
    BackendArray<float> norm(b);
    const std::vector<float> norm_host = testing_support::Random(kD, 7, 0.5f);
    ASSERT_TRUE(norm.Assign(norm_host.data(), norm_host.size()).ok());

    StepDesc desc("prefill layer");
    const StepValueId x = desc.Bound("x", StepElem::kF32, int64_t{kRows} * kD);
    const StepValueId pos = desc.Bound("positions", StepElem::kI32, kRows);
    const StepValueId h = desc.Scratch("h", StepElem::kF32, int64_t{kRows} * kD);
    const StepValueId q = desc.Scratch("q", StepElem::kF32, int64_t{kRows} * kQDim);
    const StepValueId k = desc.Scratch("k", StepElem::kF32, int64_t{kRows} * kv_dim);
    const StepValueId v = desc.Scratch("v", StepElem::kF32, int64_t{kRows} * kv_dim);
    const StepValueId attn = desc.Scratch("attn", StepElem::kF32, int64_t{kRows} * kQDim);
    const StepValueId lse = desc.Scratch("lse", StepElem::kF32, int64_t{kHeads} * kRows);
    const LinearRows rows = LinearRows::kOneSequence;
    desc.Add(step_op::RmsNorm{x, h, norm.data(), kRows, kD, 1e-5f});
    desc.Add(step_op::Linear{h, q, wq, nullptr, kRows, rows});
    desc.Add(step_op::Linear{h, k, wk, nullptr, kRows, rows});
    desc.Add(step_op::Linear{h, v, wv, nullptr, kRows, rows});
    desc.Add(step_op::Rope{q, pos, kRows, kHeads, kHd, 1e4f});
    desc.Add(step_op::Rope{k, pos, kRows, kv_heads, kHd, 1e4f});
    step_op::Attention att{q, k, v, attn, lse, {}};
    att.shape.n_q = att.shape.n_kv = kRows;
    att.shape.n_heads = kHeads;
    att.shape.n_kv_heads = kv_heads;
    att.shape.head_dim = kHd;
    att.shape.scale = 0.25f;
    att.shape.causal = true;
    att.shape.operands = DType::kBF16;
    desc.Add(att);
    desc.Add(step_op::Call{1, /*listed=*/true, {q, k, v, lse}});
    desc.Add(step_op::Linear{attn, h, *wo, nullptr, kRows, rows});
    desc.Add(step_op::Add{x, h, int64_t{kRows} * kD});

    // The same step with a Call between the RoPE pair and the attention, which keeps them apart:
    // RopePair, then FlashAttention, with every other fusion as in `desc`.
    StepDesc apart("prefill layer, RoPE apart");
    for (const StepValue& value : desc.values()) {
      if (value.bound) {
        apart.Bound(value.name, value.elem, value.elems);
      } else {
        apart.Scratch(value.name, value.elem, value.elems);
      }
    }
    for (size_t i = 0; i < desc.ops().size(); ++i) {
      if (std::holds_alternative<step_op::Attention>(desc.ops()[i])) {
        apart.Add(step_op::Call{2, /*listed=*/true, {}});
      }
      apart.Add(desc.ops()[i]);
    }

    const std::vector<float> x0 = testing_support::Random(size_t{kRows} * kD, 8);
    for (int first : {0, 5000}) {
      SCOPED_TRACE("positions from " + std::to_string(first));
      std::vector<int32_t> positions(kRows);
      for (int r = 0; r < kRows; ++r) positions[r] = first + r * 2 + r % 3;
      std::vector<float> seen[2][5];  // [apart, fused][q, k, v, lse, x]
      int64_t ropes[2], flash[2];
      for (int fused = 0; fused < 2; ++fused) {
        absl::StatusOr<std::unique_ptr<PlannedStep>> plan = b.Plan(fused == 1 ? desc : apart);
        ASSERT_TRUE(plan.ok()) << plan.status();
        BackendArray<float> dx(b);
        BackendArray<int32_t> dpos(b);
        BackendArray<uint8_t> workspace(b);
        ASSERT_TRUE(dx.Assign(x0.data(), x0.size()).ok());
        ASSERT_TRUE(dpos.Assign(positions.data(), positions.size()).ok());
        ASSERT_TRUE(workspace.Resize((*plan)->workspace_bytes()).ok());
        void* bound[2] = {dx.data(), dpos.data()};
        StepBindings bindings;
        bindings.bound = bound;
        bindings.workspace = workspace.data();
        auto read = [&](StepValueId id, size_t n) {
          std::vector<float> host(n);
          EXPECT_TRUE(
              b.CopyToHost(host.data(), (*plan)->At<float>(id, bindings), n * sizeof(float)).ok());
          return host;
        };
        const StepCallFn call = [&](int id) -> absl::StatusOr<StepControl> {
          if (id != 1) return StepControl::kContinue;
          seen[fused][0] = read(q, size_t{kRows} * kQDim);
          seen[fused][1] = read(k, size_t{kRows} * kv_dim);
          seen[fused][2] = read(v, size_t{kRows} * kv_dim);
          seen[fused][3] = read(lse, size_t{kHeads} * kRows);
          return StepControl::kContinue;
        };
        bindings.call = &call;
        const int64_t rope_launches = cuda::emulation::KernelLaunches("RopeKernel");
        const int64_t flash_launches = cuda::emulation::KernelLaunches("FlashAttentionKernel");
        absl::StatusOr<int> ran = (*plan)->Run(bindings);
        ASSERT_TRUE(ran.ok()) << ran.status();
        ropes[fused] = cuda::emulation::KernelLaunches("RopeKernel") - rope_launches;
        flash[fused] = cuda::emulation::KernelLaunches("FlashAttentionKernel") - flash_launches;
        seen[fused][4].resize(x0.size());
        ASSERT_TRUE(dx.CopyTo(seen[fused][4].data()).ok());
      }
      const char* names[5] = {"q", "k", "v", "lse", "x"};
      for (int i = 0; i < 5; ++i) {
        ASSERT_FALSE(seen[0][i].empty()) << names[i];
        EXPECT_EQ(seen[1][i], seen[0][i]) << names[i];
      }
      // Apart: RopePair, then FlashAttention. Together: FlashAttentionRope alone.
      EXPECT_EQ(ropes[0], 1);
      EXPECT_EQ(ropes[1], 0);
      EXPECT_EQ(flash[0], 1);
      EXPECT_EQ(flash[1], 1);
    }
  }
}

// A decode step copies to the device once, however many layers and sequences it has: the token
// and position ids and every layer's KV row slots and spans, packed in page-locked memory
// (Backend::AllocateHost) that the caller's DecodeWorkspace keeps, as the engine's and a
// generation's do. Once the workspace is warm, a step allocates no device memory either.
TEST(CudaStructure, OneUploadPerDecodeStep) {
  const TinyModelOptions o = testing_support::TinyOptions(9, 4, 112, DType::kBF16);
  absl::StatusOr<std::unique_ptr<LlavaModel>> model = LoadOnCuda(o, "upload", DType::kBF16);
  ASSERT_TRUE(model.ok()) << model.status();
  // Two sequences of different lengths per layer: one unpruned, one pruned by HAP.
  std::vector<PrefillResult> prefills;
  std::vector<int32_t> tokens;
  for (const char* method : {"none", "hap"}) {
    PruneRequest prune;
    prune.method = method;
    if (prune.method == "hap") prune.retain = 24;
    absl::StatusOr<EncodeResult> encoded = EncodeImage(**model, hap::testing::PatternPng(), prune);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    Sampler sampler{SamplingParams{}};
    absl::StatusOr<PrefillResult> prefill =
        RunPrefill(**model, "What is in the picture?", *encoded, prune, &sampler, 8);
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    tokens.push_back(prefill->first_token);
    prefills.push_back(std::move(*prefill));
  }
  ASSERT_NE(prefills[0].kv().len(3), prefills[1].kv().len(3));
  ASSERT_GT(prefills[0].kv().len(0), cuda::kDecodeRowsPerSplit);
  std::vector<KvStore*> caches = {&prefills[0].kv(), &prefills[1].kv()};
  Sampler greedy_a{SamplingParams{}}, greedy_b{SamplingParams{}};
  DecodeWorkspace workspace((*model)->backend());
  for (int step = 0; step < 4; ++step) {
    const int64_t uploads = cuda::emulation::HostToDeviceCopies();
    const int64_t staged = cuda::emulation::StagedHostToDeviceCopies();
    const int64_t allocations = cuda::emulation::DeviceAllocations();
    const int64_t combines = cuda::emulation::KernelLaunches("DecodeAttentionCombineKernel");
    absl::StatusOr<std::vector<int32_t>> next =
        (*model)->DecodeBatchSampled(tokens, caches, {&greedy_a, &greedy_b}, nullptr, &workspace);
    ASSERT_TRUE(next.ok()) << next.status();
    tokens = *next;
    EXPECT_EQ(cuda::emulation::HostToDeviceCopies() - uploads, 1) << "step " << step;
    // The unpruned sequence attends over more than kDecodeRowsPerSplit rows in every layer: each
    // layer's attention is split over the rows and combined (one combine launch per layer).
    EXPECT_EQ(cuda::emulation::KernelLaunches("DecodeAttentionCombineKernel") - combines, o.layers)
        << "step " << step;
    EXPECT_EQ(cuda::emulation::StagedHostToDeviceCopies() - staged, 0) << "step " << step;
#if !defined(__SANITIZE_ADDRESS__)
    if (step > 0) {
      EXPECT_EQ(cuda::emulation::DeviceAllocations() - allocations, 0) << "step " << step;
    }
#endif
  }
}

// A decode step run as a captured graph (ModelOptions::decode_graphs, the default) computes what
// the step run op by op computes, bit for bit: three sequences whose caches are F32, BF16 and F32
// (three runs of one dtype per layer, padded to 4 rows) of different lengths (one pruned by HAP),
// then two of them (another batch size), then the three again. Each shape is captured once and
// every step replays a graph; with decode_graphs off nothing is captured.
TEST(CudaStructure, ACapturedDecodeStepEqualsTheStepRunOpByOp) {
  // F32 weights: the attention's output reaches the o product unrounded.
  const TinyModelOptions o = testing_support::TinyOptions(12, 4, 112, DType::kF32);
  // One checkpoint, loaded three times: prefills into F32 and into BF16 caches, and a decoder
  // without graphs.
  absl::StatusOr<std::unique_ptr<LlavaModel>> f32 = LoadOnCuda(o, "graphs", DType::kF32);
  absl::StatusOr<std::unique_ptr<LlavaModel>> bf16 = LoadOnCuda(o, "graphs", DType::kBF16);
  absl::StatusOr<std::unique_ptr<LlavaModel>> eager =
      LoadOnCuda(o, "graphs", DType::kF32, /*decode_graphs=*/false);
  ASSERT_TRUE(f32.ok()) << f32.status();
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  ASSERT_TRUE(eager.ok()) << eager.status();
  struct Seq {
    LlavaModel* model;
    const char* method;
    const char* prompt;
  };
  const std::vector<Seq> seqs = {{f32->get(), "none", "What is in the picture?"},
                                 {bf16->get(), "hap", "Which colour is the square?"},
                                 {f32->get(), "none", "How many shapes are there?"}};
  // Each side decodes its own caches, prefilled alike.
  struct Side {
    const LlavaModel* decoder;
    std::vector<PrefillResult> prefills;
    std::vector<int32_t> tokens;
    std::unique_ptr<DecodeWorkspace> workspace;
  };
  Side graphs{f32->get(), {}, {}, nullptr}, op_by_op{eager->get(), {}, {}, nullptr};
  for (Side* side : {&graphs, &op_by_op}) {
    for (const Seq& seq : seqs) {
      PruneRequest prune;
      prune.method = seq.method;
      if (prune.method == "hap") prune.retain = 24;
      absl::StatusOr<EncodeResult> encoded =
          EncodeImage(*seq.model, hap::testing::PatternPng(), prune);
      ASSERT_TRUE(encoded.ok()) << encoded.status();
      Sampler sampler{SamplingParams{}};
      absl::StatusOr<PrefillResult> prefill =
          RunPrefill(*seq.model, seq.prompt, *encoded, prune, &sampler, 16);
      ASSERT_TRUE(prefill.ok()) << prefill.status();
      side->tokens.push_back(prefill->first_token);
      side->prefills.push_back(std::move(*prefill));
    }
    side->workspace = std::make_unique<DecodeWorkspace>(side->decoder->backend());
  }
  ASSERT_EQ(graphs.prefills[1].kv().dtype(), DType::kBF16);
  ASSERT_NE(graphs.prefills[0].kv().len(3), graphs.prefills[1].kv().len(3));
  // The longest cache stays within one power of two of rows over the steps below, so each batch
  // size is one shape.
  const int longest = graphs.prefills[0].kv().len(0);
  ASSERT_GT(longest, cuda::kDecodeRowsPerSplit);
  ASSERT_EQ(DecodeRowsFor(3), 4);
  int steps = 0;
  auto step = [&](const std::vector<int>& active) {
    std::vector<std::vector<float>> logits;
    for (Side* side : {&graphs, &op_by_op}) {
      std::vector<int32_t> tokens;
      std::vector<KvStore*> caches;
      std::vector<Sampler> samplers(active.size(), Sampler{SamplingParams{}});
      std::vector<Sampler*> sampler_ptrs;
      for (size_t i = 0; i < active.size(); ++i) {
        tokens.push_back(side->tokens[active[i]]);
        caches.push_back(&side->prefills[active[i]].kv());
        sampler_ptrs.push_back(&samplers[i]);
      }
      absl::StatusOr<std::vector<int32_t>> next = side->decoder->DecodeBatchSampled(
          tokens, caches, sampler_ptrs, nullptr, side->workspace.get());
      ASSERT_TRUE(next.ok()) << next.status();
      for (size_t i = 0; i < active.size(); ++i) side->tokens[active[i]] = (*next)[i];
      const BackendArray<float>& rows = side->workspace->logits();
      ASSERT_EQ(rows.size(), active.size() * (*f32)->text_config().vocab_size);
      logits.emplace_back(rows.size());
      ASSERT_TRUE(rows.CopyTo(logits.back().data()).ok());
    }
    EXPECT_EQ(logits[0], logits[1]) << "step " << steps;
    for (int i : active) EXPECT_EQ(graphs.tokens[i], op_by_op.tokens[i]) << "step " << steps;
    ++steps;
  };
  for (int s = 0; s < 4; ++s) step({0, 1, 2});
  EXPECT_EQ(graphs.workspace->graph_captures(), 1);
  for (int s = 0; s < 2; ++s) step({0, 2});
  EXPECT_EQ(graphs.workspace->graph_captures(), 2);
  for (int s = 0; s < 2; ++s) step({0, 1, 2});
  EXPECT_EQ(graphs.workspace->graph_captures(), 2) << "the batch of three replays its graph";
  EXPECT_EQ(graphs.workspace->graph_replays(), steps);
  EXPECT_EQ(graphs.workspace->graphs_held(), 2);
  EXPECT_EQ(op_by_op.workspace->graph_captures(), 0);
  EXPECT_EQ(op_by_op.workspace->graph_replays(), 0);
  EXPECT_EQ(std::bit_ceil(static_cast<unsigned>(longest)),
            std::bit_ceil(static_cast<unsigned>(graphs.prefills[0].kv().len(0))));
}

// The decode engine's warm-up (hap-decode runs it before it serves) captures a step for each
// batch size and row bound, over caches shaped as the pool's: the steps of the answers that follow
// replay those graphs and capture none, and the answers are those of an engine without a warm-up
// (which captures as it serves). hap-decode warms its engine before it makes the pool, whose size
// within --gpu-memory depends on what the steps hold: that engine is made without a pool, told
// the pool's shape, and given the pool after its warm-up.
TEST(CudaStructure, AWarmedDecodeEngineCapturesNoStepWhileItServes) {
  const TinyModelOptions o = testing_support::TinyOptions(13, 4, 112, DType::kBF16);
  absl::StatusOr<std::unique_ptr<LlavaModel>> model = LoadOnCuda(o, "engine_warm_up", DType::kBF16);
  ASSERT_TRUE(model.ok()) << model.status();
  const TextConfig& text = (*model)->text_config();
  struct Request {
    const char* method;
    const char* prompt;
  };
  const std::vector<Request> requests = {{"none", "What is in the picture?"},
                                         {"hap", "Which colour is the square?"},
                                         {"none", "How many shapes are there?"}};
  std::vector<std::vector<int32_t>> answers[2];
  DecodeEngineStats stats[2];
  DecodeWarmUp warm;
  for (int warmed = 0; warmed < 2; ++warmed) {
    absl::StatusOr<std::unique_ptr<KvBlockPool>> pool =
        KvBlockPool::Create(16, text.num_key_value_heads * text.head_dim, DType::kBF16,
                            int64_t{16} << 20, &(*model)->backend());
    ASSERT_TRUE(pool.ok()) << pool.status();
    DecodeEngineOptions options;
    options.max_batch = 3;
    if (warmed == 1) {
      options.kv_dtype = DType::kBF16;
      options.kv_block_rows = 16;
    } else {
      options.pool = pool->get();
    }
    std::vector<DecodeJob> jobs;
    for (const Request& r : requests) {
      PruneRequest prune;
      prune.method = r.method;
      if (prune.method == "hap") prune.retain = 24;
      absl::StatusOr<EncodeResult> encoded =
          EncodeImage(**model, hap::testing::PatternPng(), prune);
      ASSERT_TRUE(encoded.ok()) << encoded.status();
      DecodeJob job;
      absl::StatusOr<PrefillResult> prefill =
          RunPrefill(**model, r.prompt, *encoded, prune, &job.sampler);
      ASSERT_TRUE(prefill.ok()) << prefill.status();
      ASSERT_NE(prefill->device_cache, nullptr);
      absl::StatusOr<KvCache> host = prefill->device_cache->ToHost();
      ASSERT_TRUE(host.ok()) << host.status();
      // The contexts stay within the warm-up's 256 rows.
      ASSERT_LT(host->len(0), 200);
      job.cache = *std::move(host);
      job.first_token = prefill->first_token;
      job.stop.max_new_tokens = 8;
      jobs.push_back(std::move(job));
    }
    std::vector<std::promise<absl::StatusOr<DecodeResult>>> done(jobs.size());
    {
      DecodeEngine engine(**model, options);
      if (warmed == 1) {
        const int64_t held = (*model)->backend().DeviceBytesInUse();
        absl::StatusOr<DecodeWarmUp> w = engine.WarmUp(256);
        ASSERT_TRUE(w.ok()) << w.status();
        warm = *w;
        // The engine keeps its steps' workspace: at least the logits and hidden states of the
        // largest batch, which is what the device holds more than before.
        EXPECT_GE(warm.device_bytes, int64_t{4} * (text.vocab_size + text.hidden_size) * 4);
        EXPECT_EQ(warm.device_bytes, (*model)->backend().DeviceBytesInUse() - held);
        EXPECT_EQ(engine.pool(), nullptr);
        engine.SetPool(pool->get());
        EXPECT_EQ(engine.pool(), pool->get());
      }
      for (size_t i = 0; i < jobs.size(); ++i) {
        jobs[i].done = [&done, i](absl::StatusOr<DecodeResult> r) {
          done[i].set_value(std::move(r));
        };
        engine.Submit(std::move(jobs[i]));
      }
      for (auto& d : done) {
        absl::StatusOr<DecodeResult> r = d.get_future().get();
        ASSERT_TRUE(r.ok()) << r.status();
        answers[warmed].push_back(r->tokens);
      }
      stats[warmed] = engine.stats();
    }
    EXPECT_GT((*pool)->stats().blocks_peak, 0) << "the sequences decoded in the pool's blocks";
  }
  // Batch sizes 4 (three sequences and a padding row), 2 and 1, at row bounds 256, 128 and 64.
  EXPECT_EQ(warm.steps, 9);
  EXPECT_EQ(warm.graph_captures, 9);
  EXPECT_EQ(warm.batch, 4);
  EXPECT_EQ(warm.context, 256);
  EXPECT_EQ(answers[1], answers[0]);
  EXPECT_GT(stats[0].graph_captures, 0) << "an engine without a warm-up captures as it serves";
  EXPECT_EQ(stats[1].graph_captures, warm.graph_captures) << "no step captured after the warm-up";
  // Each capture replays at once; every step after the warm-up replays.
  EXPECT_EQ(stats[1].graph_replays, warm.graph_captures + stats[1].steps);
  EXPECT_GT(stats[1].steps, 0);
}

// What encoding one image enqueues on a checkpoint of `vision_layers` CLIP layers (BF16).
int64_t EncodeLaunches(int vision_layers) {
  TinyModelOptions o = testing_support::TinyOptions(8, 2, 56, DType::kBF16);
  o.vision_layers = vision_layers;
  absl::StatusOr<std::unique_ptr<LlavaModel>> model =
      LoadOnCuda(o, "vision_" + std::to_string(vision_layers));
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return 0;
  PruneRequest none;
  none.method = "none";
  const int64_t before = Enqueued();
  EXPECT_TRUE(EncodeImage(**model, hap::testing::PatternPng(), none, true).ok());
  return Enqueued() - before;
}

// Per CLIP layer on BF16 weights, the tower being a planned step: 2 LayerNorms that also write
// their rows rounded, q, k and v as one batched product and their 3 biases in one launch,
// FlashAttention (which writes the o product's input rounded), the o, fc1 and fc2 products, a
// quick_gelu that adds fc1's bias and writes fc2's input rounded, and 2 residual adds that add
// the o and fc2 biases = 11 (op by op, a rounding before each of 6 products and a launch per bias
// took 24).
TEST(CudaStructure, LaunchesPerVisionLayerOnBf16Weights) {
  const int64_t two = EncodeLaunches(2), four = EncodeLaunches(4);
  EXPECT_EQ((four - two) / 2, 11);
  EXPECT_EQ((four - two) % 2, 0);
}

// Forwards to a pruner and notes how many device→host copies (each a wait for the stream) the
// process had made when the last layer's AfterLayer returned.
class CopiesUntilFinish final : public Pruner {
 public:
  explicit CopiesUntilFinish(Pruner* inner) : inner_(inner) {}
  absl::StatusOr<std::optional<std::vector<int>>> Begin(const PrefillInput& input) override {
    return inner_->Begin(input);
  }
  bool ReadsInputEmbeddings() const override { return inner_->ReadsInputEmbeddings(); }
  absl::StatusOr<std::optional<std::vector<int>>> AfterLayer(const LayerAttention& att) override {
    ++layers;
    auto keep = inner_->AfterLayer(att);
    copies_after_layer = cuda::emulation::DeviceToHostCopies();
    return keep;
  }
  absl::Status Finish(const std::vector<std::vector<int>>& backend_kept) override {
    stages_given = static_cast<int>(backend_kept.size());
    absl::Status s = inner_->Finish(backend_kept);
    stats_ = inner_->stats();
    return s;
  }
  int64_t copies_after_layer = -1;  // when the last layer's AfterLayer returned
  int stages_given = -1;
  int layers = 0;

 private:
  Pruner* inner_;
};

// The pattern image's question with a HAP pruner keeping `retain` visual tokens.
struct HapPrompt {
  EncodeResult encoded;
  PromptTokens tokens;
  std::unique_ptr<Pruner> hap;
};
absl::StatusOr<HapPrompt> HapPromptFor(const LlavaModel& model, double retain) {
  PruneRequest prune;
  prune.method = "hap";
  prune.retain = retain;
  HapPrompt p;
  HAP_ASSIGN_OR_RETURN(p.encoded, EncodeImage(model, hap::testing::PatternPng(), prune));
  HAP_ASSIGN_OR_RETURN(p.tokens,
                       model.Tokenize(PromptText{"What is in the picture?"}, p.encoded.n_vis));
  prune.text_tokens = static_cast<int>(p.tokens.ids.size()) - p.tokens.n_vis;
  HAP_ASSIGN_OR_RETURN(p.hap, MakePruner(prune, DimsOf(model.config())));
  return p;
}

// A prefill plans each run of layers once per shape: HAP at 16 of the visual tokens stops after
// every layer of a 6-layer model, so its first prefill plans a run per stage, and the same prompt
// again plans none, with the same kept tokens, cache and first token.
TEST(CudaStructure, APrefillOfAShapeSeenBeforePlansNoRunAgain) {
  const TinyModelOptions o = testing_support::TinyOptions(7, 6, 112, DType::kBF16);
  absl::StatusOr<std::unique_ptr<LlavaModel>> model = LoadOnCuda(o, "hap_plans");
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<int> kept[2];
  int32_t first_token[2] = {-1, -1};
  std::vector<int32_t> positions[2];
  int64_t planned[2];
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<HapPrompt> p = HapPromptFor(**model, 16.0);
    ASSERT_TRUE(p.ok()) << p.status();
    Sampler sampler{SamplingParams{}};
    const int64_t before = (*model)->prefill_plans_made();
    absl::StatusOr<PrefillOutput> out =
        (*model)->Prefill(p->tokens, p->encoded.embeds, p->hap.get(), &sampler);
    ASSERT_TRUE(out.ok()) << out.status();
    planned[round] = (*model)->prefill_plans_made() - before;
    kept[round] = p->hap->stats().kept_original;
    first_token[round] = out->first_token;
    const KvStore& kv = out->kv();
    positions[round].resize(kv.len(o.layers - 1));
    std::vector<uint16_t> k(positions[round].size() * 256), v(k.size());
    ASSERT_TRUE(kv.ReadRows(o.layers - 1, 0, kv.len(o.layers - 1), k.data(), v.data(),
                            positions[round].data())
                    .ok());
  }
  EXPECT_GE(planned[0], 5) << "a run per stage";
  EXPECT_EQ(planned[1], 0);
  EXPECT_EQ(kept[1], kept[0]);
  EXPECT_EQ(first_token[1], first_token[0]);
  EXPECT_EQ(positions[1], positions[0]);
}

// A HAP prefill waits for the device nowhere between its start and its end: every stage's top-k,
// the compaction of the hidden states and position ids and the KV rows stay on the device (the
// planner fixed each stage's count), and what the host reports — the kept indices, the positions
// of the cache's visual rows, the explain record — comes back after the last layer. A HAP plan of
// a stage after every layer but the last shows it does not depend on the number of stages.
TEST(CudaStructure, NoDeviceToHostWaitInsideAHapPrefill) {
  const TinyModelOptions o = testing_support::TinyOptions(7, 6, 112, DType::kBF16);
  absl::StatusOr<std::unique_ptr<LlavaModel>> model = LoadOnCuda(o, "hap");
  ASSERT_TRUE(model.ok()) << model.status();
  for (double retain : {32.0, 16.0}) {
    SCOPED_TRACE("retain " + std::to_string(retain));
    absl::StatusOr<HapPrompt> p = HapPromptFor(**model, retain);
    ASSERT_TRUE(p.ok()) << p.status();
    CopiesUntilFinish pruner(p->hap.get());
    Sampler sampler{SamplingParams{}};
    const int64_t start = cuda::emulation::DeviceToHostCopies();
    absl::StatusOr<PrefillOutput> out =
        (*model)->Prefill(p->tokens, p->encoded.embeds, &pruner, &sampler);
    ASSERT_TRUE(out.ok()) << out.status();
    const int64_t end = cuda::emulation::DeviceToHostCopies();
    const PruneStats& stats = p->hap->stats();
    const int stages = static_cast<int>(stats.stages.size());
    std::printf("retain %.0f: %d stages, %d layers\n", retain, stages, pruner.layers);
    EXPECT_GE(stages, retain == 16.0 ? 5 : 1);
    EXPECT_EQ(pruner.layers, o.layers);
    EXPECT_EQ(pruner.stages_given, stages);  // every stage was decided on the device
    EXPECT_EQ(pruner.copies_after_layer - start, 0);
    // After it: the stages' kept indices, HAP's explain scalars, the first token's id.
    EXPECT_EQ(end - start, 3);
    // And the host learned what it reports: each stage's tokens, the cache's positions.
    for (const PruneStage& st : stats.stages) {
      EXPECT_EQ(static_cast<int>(st.kept_original.size()), st.tokens_kept);
    }
    const KvStore& kv = out->kv();
    std::vector<int32_t> positions(kv.len(o.layers - 1));
    std::vector<uint16_t> k(positions.size() * 256), v(k.size());
    ASSERT_TRUE(
        kv.ReadRows(o.layers - 1, 0, kv.len(o.layers - 1), k.data(), v.data(), positions.data())
            .ok());
    const int vis_begin = p->tokens.vis_begin;
    ASSERT_EQ(static_cast<int>(positions.size()), static_cast<int>(p->tokens.ids.size()) -
                                                      p->tokens.n_vis +
                                                      static_cast<int>(stats.kept_original.size()));
    for (size_t r = 0; r < stats.kept_original.size(); ++r) {
      EXPECT_EQ(positions[vis_begin + r], vis_begin + stats.kept_original[r]) << r;
    }
  }
}

// HAP scores a layer in three launches: its text→visual rows with their entropies and the heads'
// PAQ (TextVisualAttentionPaq), the head weights made with the layer's map (PaqSoftmaxSum) and the
// layer map's PAQ; a stage adds one, its token scores made with its selection (TokenScoresTopK),
// and its compaction one more (the hidden states and positions together, GatherKeptRowsPair). A
// group of one layer makes its map, the map's PAQ, the scores and the selection in one launch
// (PaqSoftmaxSumScoresTopK): two launches for the layer and its stage, and the compaction. The
// kernels those replace are not launched. Retaining 16 of 64 tokens over 6 layers takes groups of
// one layer; 32, larger ones.
TEST(CudaStructure, HapScoresALayerInThreeLaunchesAndAStageInOne) {
  const TinyModelOptions o = testing_support::TinyOptions(7, 6, 112, DType::kBF16);
  absl::StatusOr<std::unique_ptr<LlavaModel>> model = LoadOnCuda(o, "hap_scoring");
  ASSERT_TRUE(model.ok()) << model.status();
  for (double retain : {16.0, 32.0}) {
    SCOPED_TRACE("retain " + std::to_string(retain));
    absl::StatusOr<HapPrompt> p = HapPromptFor(**model, retain);
    ASSERT_TRUE(p.ok()) << p.status();
    const std::vector<const char*> kernels = {
        "TextVisualAttentionKernel", "PaqKernel",
        "PaqSoftmaxSumKernel",       "TokenScoresTopKKernel",
        "PaqSoftmaxKernel",          "WeightedSumKernel",
        "GatherKeptRowsPairKernel",  "PaqSoftmaxSumScoresTopKKernel",
        "TokenScoresKernel",         "StableTopKByRankKernel",
        "StableTopKKernel",          "GatherKeptRowsKernel"};
    std::vector<int64_t> before;
    for (const char* k : kernels) before.push_back(cuda::emulation::KernelLaunches(k));
    Sampler sampler{SamplingParams{}};
    absl::StatusOr<PrefillOutput> out =
        (*model)->Prefill(p->tokens, p->encoded.embeds, p->hap.get(), &sampler);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<int64_t> n;
    for (size_t i = 0; i < kernels.size(); ++i) {
      n.push_back(cuda::emulation::KernelLaunches(kernels[i]) - before[i]);
    }
    const PruneStats& stats = p->hap->stats();
    const int64_t layers = static_cast<int64_t>(stats.hap_layers.size());
    const int64_t stages = static_cast<int64_t>(stats.hap_groups.size());
    int64_t single = 0, multi_layer_stages = 0;
    for (const HapGroupExplain& g : stats.hap_groups) {
      single += g.n_layers == 1;
      multi_layer_stages += g.n_layers > 1;
    }
    std::printf("retain %.0f: %lld scored layers, %lld stages, %lld of one layer\n", retain,
                static_cast<long long>(layers), static_cast<long long>(stages),
                static_cast<long long>(single));
    ASSERT_GE(stages, 2);
    EXPECT_EQ(n[0], layers);               // text→visual rows
    EXPECT_EQ(n[1], layers - single);      // the layer map's PAQ (not at a stage)
    EXPECT_EQ(n[2], layers - single);
    EXPECT_EQ(n[3], stages - single);
    EXPECT_EQ(n[7], single);  // a group of one layer: map, PAQ, scores and selection
    // Groups of several layers weigh their maps with PaqSoftmaxWeights and WeightedSumMaps.
    EXPECT_EQ(n[4], multi_layer_stages);
    EXPECT_EQ(n[5], multi_layer_stages);
    // The compaction after each stage: the hidden states and positions in one launch.
    EXPECT_EQ(n[6], stages);
    for (size_t i = 8; i < kernels.size(); ++i) EXPECT_EQ(n[i], 0) << kernels[i];
    if (retain == 16.0) {
      EXPECT_EQ(single, stages);
    } else {
      EXPECT_GT(multi_layer_stages, 0);
    }
  }
}

// After one request has run, the same request again allocates and frees no device memory: the
// encoder's activations, the prefill's workspace, HAP's maps and scores, the KV cache's layers, a
// decode step's workspace and logits all come out of the block cache and go back to it.
TEST(CudaStructure, NoDeviceAllocationOrFreeAfterWarmUp) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the block cache caches nothing under AddressSanitizer (it checks the frees)";
#endif
  const TinyModelOptions o = testing_support::TinyOptions(6, 4, 112, DType::kBF16);
  absl::StatusOr<std::unique_ptr<LlavaModel>> model = LoadOnCuda(o, "warm");
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

// The warm-up step a service runs before it serves (hap-decode sizes its KV pool within
// --gpu-memory by it): it runs a step of the batch on fresh caches and reports what that step
// holds on the device: at least its logits and hidden states.
TEST(CudaStructure, WarmUpDecodeReportsTheStepsWorkspace) {
  const TinyModelOptions o = testing_support::TinyOptions(10, 2, 56, DType::kBF16);
  absl::StatusOr<std::unique_ptr<LlavaModel>> model = LoadOnCuda(o, "warm_up");
  ASSERT_TRUE(model.ok()) << model.status();
  const TextConfig& text = (*model)->config().text;
  const int64_t held = (*model)->backend().DeviceBytesInUse();
  int64_t workspace = 0;
  absl::StatusOr<double> ms = WarmUpDecode(**model, 8, DType::kBF16, &workspace);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GE(*ms, 0);
  EXPECT_GE(workspace, int64_t{8} * (text.vocab_size + text.hidden_size) * 4);
  // Nothing of the step stays in use once it returns.
  EXPECT_EQ((*model)->backend().DeviceBytesInUse(), held);
}

}  // namespace
}  // namespace hap
