// KvCache with BF16 rows: the rounding of appended F32 rows is the one a BF16 KvBlockPool applies
// (bit for bit, specials included), sizes and spans count the real bytes, the dtype is fixed once
// rows are in, and the caches made from it (DeviceKv, PagedKv) hold the same bits, on the CPU
// and on the emulated CUDA backend, where a BF16 DeviceKv decodes exactly like BF16 blocks.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "runtime/engine/kv_block_pool.h"
#include "runtime/engine/paged_kv.h"
#include "runtime/model/llava_model.h"
#include "runtime/prune/model_dims.h"
#include "runtime/prune/planner.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/common/tiny_checkpoint.h"

namespace hap {
namespace {

constexpr int kKvDim = 8;

// F32 rows [rows, kKvDim] with the values where rounding is delicate: ties to even both ways,
// the largest finite values, subnormals, signed zeros, infinities and NaN, then ordinary ones.
std::vector<float> Rows(int rows, float scale) {
  const float specials[] = {0.f,
                            -0.f,
                            1.f + 1.f / 256,  // a tie, rounds down to even
                            1.f + 3.f / 256,  // a tie, rounds up to even
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(),
                            -1e-40f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> x(static_cast<size_t>(rows) * kKvDim);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = i < std::size(specials) ? specials[i]
                                   : scale * std::sin(0.37f * static_cast<float>(i)) * (1 + i % 7);
  }
  return x;
}

std::vector<int32_t> Positions(int first, int n) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = first + 2 * i;
  return p;
}

std::vector<uint16_t> Rounded(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  ConvertFromF32(DType::kBF16, x.data(), out.data(), x.size());
  return out;
}

// The rows of a KvStore's layer, copied to the host as raw bytes of its dtype.
std::vector<uint8_t> LayerBytes(const Backend& backend, const KvStore& kv, int layer, bool v) {
  std::vector<KvSpan> spans;
  kv.Spans(layer, &spans);
  const size_t row_bytes = kKvDim * DTypeSize(kv.dtype());
  std::vector<uint8_t> out;
  for (const KvSpan& s : spans) {
    const size_t at = out.size();
    out.resize(at + s.rows * row_bytes);
    EXPECT_TRUE(backend.CopyToHost(out.data() + at, v ? s.v : s.k, s.rows * row_bytes).ok());
  }
  return out;
}

template <typename T>
std::vector<uint8_t> AsBytes(const std::vector<T>& x) {
  const auto* p = reinterpret_cast<const uint8_t*>(x.data());
  return std::vector<uint8_t>(p, p + x.size() * sizeof(T));
}

TEST(KvCacheTest, Bf16RowsAreThePoolsRoundingBitForBit) {
  const std::vector<float> k = Rows(21, 3.f), v = Rows(21, -0.01f);
  const std::vector<int32_t> pos = Positions(0, 21);
  KvCache cache;
  ASSERT_TRUE(cache.SetDType(DType::kBF16).ok());
  cache.kv_dim = kKvDim;
  cache.layers.resize(2);
  // Layer 0 in two appends (a prefill, then a decode step), layer 1 in one.
  ASSERT_TRUE(cache.Append(CpuBackend(), 0, k.data(), v.data(), pos.data(), 20).ok());
  ASSERT_TRUE(cache
                  .Append(CpuBackend(), 0, k.data() + 20 * kKvDim, v.data() + 20 * kKvDim,
                          pos.data() + 20, 1)
                  .ok());
  ASSERT_TRUE(cache.Append(CpuBackend(), 1, v.data(), k.data(), pos.data(), 21).ok());
  EXPECT_EQ(cache.dtype(), DType::kBF16);
  EXPECT_EQ(cache.layers[0].k_bf16, Rounded(k));
  EXPECT_EQ(cache.layers[0].v_bf16, Rounded(v));
  EXPECT_EQ(cache.layers[1].k_bf16, Rounded(v));
  EXPECT_TRUE(cache.layers[0].k.empty() && cache.layers[0].v.empty());
  EXPECT_EQ(cache.layers[0].positions, pos);
  // NaN stays NaN, the ties went to even, infinities and -0 survive.
  const std::vector<uint16_t>& bits = cache.layers[0].k_bf16;
  EXPECT_EQ(bits[1], 0x8000);
  EXPECT_EQ(bits[2], 0x3F80);
  EXPECT_EQ(bits[3], 0x3F82);
  EXPECT_EQ(bits[8], 0x7F80);
  EXPECT_TRUE(std::isnan(BF16ToF32(bits[10])));

  // Real bytes: 2 per value.
  EXPECT_EQ(cache.row_bytes(), kKvDim * 2);
  EXPECT_EQ(cache.total_rows(), 42);
  EXPECT_EQ(cache.bytes(), 42 * 2 * kKvDim * 2);
  std::vector<KvSpan> spans;
  cache.Spans(0, &spans);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].k, cache.layers[0].k_bf16.data());
  EXPECT_EQ(spans[0].v, cache.layers[0].v_bf16.data());
  EXPECT_EQ(spans[0].rows, 21);

  // A BF16 pool given the same F32 rows holds the same bits.
  auto pool = KvBlockPool::Create(4, kKvDim, DType::kBF16, 1 << 20);
  ASSERT_TRUE(pool.ok());
  auto blocks = PagedKv::Reserve(pool->get(), {21}, 0);
  ASSERT_TRUE(blocks.ok());
  ASSERT_TRUE((*blocks)->AppendHost(0, k.data(), v.data(), pos.data(), 21).ok());
  EXPECT_EQ(LayerBytes(CpuBackend(), **blocks, 0, false), AsBytes(cache.layers[0].k_bf16));
  EXPECT_EQ(LayerBytes(CpuBackend(), **blocks, 0, true), AsBytes(cache.layers[0].v_bf16));
}

TEST(KvCacheTest, TheDtypeIsF32OrBf16AndFixedOnceRowsAreIn) {
  KvCache cache;
  EXPECT_EQ(cache.dtype(), DType::kF32);
  EXPECT_EQ(cache.SetDType(DType::kF16).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(cache.SetDType(DType::kBF16).ok());
  cache.kv_dim = kKvDim;
  cache.layers.resize(1);
  const std::vector<float> k = Rows(3, 1.f);
  const std::vector<int32_t> pos = Positions(4, 3);
  ASSERT_TRUE(cache.Append(CpuBackend(), 0, k.data(), k.data(), pos.data(), 3).ok());
  const absl::Status s = cache.SetDType(DType::kF32);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(cache.SetDType(DType::kBF16).ok());  // no change
  cache.Clear();
  EXPECT_EQ(cache.dtype(), DType::kBF16);  // Clear keeps it for the next prefill
  EXPECT_TRUE(cache.SetDType(DType::kF32).ok());
}

// A HAP request at 5.6% of LLaVA-1.5-7B's shapes (32 layers, 576 visual tokens) holds, in a
// block pool of 16-row blocks, exactly its planned per-group lengths (text + N_v(g) + the
// answer's rows) rounded up to blocks, each layer of a group alike, and gives them all back.
TEST(KvCacheTest, AHapRequestAt5Point6PercentHoldsItsPlannedLengthsInBlocks) {
  const ModelDims dims = ModelDims::Llava15_7B();
  auto budget = ParseRetain("5.6%", dims.n_visual_tokens);
  ASSERT_TRUE(budget.ok()) << budget.status();
  const int text = 40, answer = 64, block_rows = 16;
  auto plan = MakePlan(dims, *budget, text);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT(plan->M, 1);
  KvCache cache;
  cache.kv_dim = kKvDim;
  cache.layers.resize(dims.n_layers);
  for (int l = 0; l < dims.n_layers; ++l) {
    const int rows = text + plan->layer_visual_tokens[l];
    const std::vector<float> k = Rows(rows, 1.f);
    const std::vector<int32_t> pos = Positions(0, rows);
    ASSERT_TRUE(cache.Append(CpuBackend(), l, k.data(), k.data(), pos.data(), rows).ok());
  }
  int64_t want = 0;
  for (const PlanGroup& g : plan->groups) {
    want += int64_t{g.n_layers} * ((text + g.visual_tokens + answer + block_rows - 1) / block_rows);
  }
  const int64_t unpruned = int64_t{dims.n_layers} *
                           ((text + dims.n_visual_tokens + answer + block_rows - 1) / block_rows);
  auto pool = KvBlockPool::Create(block_rows, kKvDim, DType::kF32, int64_t{64} << 20);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto paged = PagedKv::FromCache(pool->get(), cache, answer);
  ASSERT_TRUE(paged.ok()) << paged.status();
  EXPECT_EQ((*paged)->blocks_held(), want);
  EXPECT_EQ((*pool)->stats().blocks_in_use, want);
  // The pool counts the rows its blocks hold: every layer's prompt rows, then one per layer for
  // each decode step's slot.
  int64_t rows = 0;
  for (int l = 0; l < dims.n_layers; ++l) rows += cache.len(l);
  EXPECT_EQ((*pool)->stats().rows_in_use, rows);
  ASSERT_TRUE((*paged)->AppendRowSlot(0, 1000).ok());
  ASSERT_TRUE((*paged)->AppendRowSlot(5, 1000).ok());
  EXPECT_EQ((*pool)->stats().rows_in_use, rows + 2);
  // The plan (`hapctl plan --preset llava-1.5-7b --retain 5.6%`: M = 32 groups of one layer,
  // 576, 144, 64, 36, 23, 16, 12, 9, 7, 6, 5, 4, 3, 3, 3, then 2 four times and 1 thirteen
  // times visual tokens) gives 43 + 16 + 11 + 9 + 4·8 + 24·7 = 279 blocks against 1,376.
  EXPECT_EQ(plan->M, 32);
  EXPECT_EQ(want, 279);
  EXPECT_EQ(unpruned, 1376);
  for (const PlanGroup& g : plan->groups) {
    for (int l = g.first_layer; l <= g.last_layer(); ++l) {
      EXPECT_EQ((*paged)->blocks(l),
                (text + g.visual_tokens + answer + block_rows - 1) / block_rows)
          << "layer " << l;
    }
  }
  paged->reset();
  EXPECT_EQ((*pool)->stats().blocks_in_use, 0);
  EXPECT_EQ((*pool)->stats().rows_in_use, 0);
}

// ReadRows refuses a layer or a row range outside the cache, including a range whose end
// overflows int, before copying anything.
TEST(KvCacheTest, ReadRowsRefusesLayersAndRangesOutsideTheCache) {
  KvCache cache;
  cache.kv_dim = kKvDim;
  cache.layers.resize(2);
  const std::vector<float> k = Rows(5, 1.f);
  const std::vector<int32_t> pos = Positions(0, 5);
  ASSERT_TRUE(cache.Append(CpuBackend(), 1, k.data(), k.data(), pos.data(), 5).ok());
  std::vector<float> out_k(5 * kKvDim, 7.f), out_v(5 * kKvDim, 7.f);
  std::vector<int32_t> out_pos(5, -1);
  auto read = [&](int layer, int row, int n) {
    return cache.ReadRows(layer, row, n, out_k.data(), out_v.data(), out_pos.data());
  };
  EXPECT_TRUE(read(1, 1, 4).ok());
  EXPECT_EQ(out_pos[0], pos[1]);
  for (auto [layer, row, n] : {std::tuple{2, 0, 1},
                               {-1, 0, 1},
                               {1, 2, 4},
                               {1, -1, 1},
                               {1, 1, -1},
                               {0, 0, 1},
                               {1, 1, std::numeric_limits<int>::max()}}) {
    const absl::Status s = read(layer, row, n);
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << layer << " " << row << " " << n << s;
  }
  EXPECT_EQ(out_pos[4], -1);  // nothing past the last good read was written
}

// One check (CheckKvDType) refuses a KV dtype other than F32 or BF16 wherever one is chosen: the
// host cache, the device cache, the block pool and LlavaModel::Load, with one message naming it.
TEST(KvCacheTest, OneDtypeCheckForEveryCacheAndTheModel) {
  EXPECT_TRUE(CheckKvDType(DType::kF32).ok());
  EXPECT_TRUE(CheckKvDType(DType::kBF16).ok());
  const absl::Status want = CheckKvDType(DType::kF16);
  EXPECT_EQ(want.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(want.message(), "KV cache dtype F16 is not supported (F32 or BF16)");

  KvCache cache;
  EXPECT_EQ(cache.SetDType(DType::kF16), want);
  EXPECT_EQ(DeviceKv::Create(CpuBackend(), 1, kKvDim, DType::kF16, 0).status(), want);
  EXPECT_EQ(KvBlockPool::Create(4, kKvDim, DType::kF16, 1 << 20).status(), want);
  ModelOptions f16;
  f16.kv_dtype = DType::kF16;
  EXPECT_EQ(LlavaModel::Load(".", f16).status(), want);  // before any file is read
}

// The --kv-dtype spelling shared by hapctl and prefill_bench: lower-case f32 or bf16 only, and
// an error naming the flag, the value and what is accepted.
TEST(KvCacheTest, KvDtypeFlagValues) {
  EXPECT_EQ(*ParseKvDTypeFlagValue("--kv-dtype", "f32"), DType::kF32);
  EXPECT_EQ(*ParseKvDTypeFlagValue("--kv-dtype", "bf16"), DType::kBF16);
  for (const std::string bad : {"f16", "x", "", "BF16", "bf16 "}) {
    SCOPED_TRACE(bad);
    const absl::StatusOr<DType> d = ParseKvDTypeFlagValue("--kv-dtype", bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(d.status().message(), "--kv-dtype '" + bad + "' is not f32 or bf16");
  }
}

// Rows that arrive as bytes (the KV transfer) at any alignment, and the caches made from a BF16
// host cache: a BF16 pool copies the bits, an F32 pool widens them exactly, a DeviceKv on the
// CPU keeps them and rounds what decode appends as the pool would.
TEST(KvCacheTest, HostRowsAndCachesMadeFromABf16Cache) {
  const std::vector<uint16_t> k = Rounded(Rows(9, 2.f)), v = Rounded(Rows(9, -5.f));
  const std::vector<int32_t> pos = Positions(1, 9);
  KvCache cache;
  ASSERT_TRUE(cache.SetDType(DType::kBF16).ok());
  cache.kv_dim = kKvDim;
  cache.next_position = 30;
  cache.layers.resize(1);
  // Unaligned sources: one byte into a buffer.
  std::vector<uint8_t> kb(1 + k.size() * 2), vb(1 + v.size() * 2);
  std::memcpy(kb.data() + 1, k.data(), k.size() * 2);
  std::memcpy(vb.data() + 1, v.data(), v.size() * 2);
  cache.AppendHostRows(0, kb.data() + 1, vb.data() + 1, pos.data(), 5, 9);
  cache.AppendHostRows(0, kb.data() + 1 + 5 * kKvDim * 2, vb.data() + 1 + 5 * kKvDim * 2,
                       pos.data() + 5, 4);
  EXPECT_EQ(cache.layers[0].k_bf16, k);
  EXPECT_EQ(cache.layers[0].v_bf16, v);
  EXPECT_EQ(cache.layers[0].positions, pos);

  for (DType pool_dtype : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(std::string(DTypeName(pool_dtype)));
    auto pool = KvBlockPool::Create(4, kKvDim, pool_dtype, 1 << 20);
    ASSERT_TRUE(pool.ok());
    auto paged = PagedKv::FromCache(pool->get(), cache, 2);
    ASSERT_TRUE(paged.ok()) << paged.status();
    EXPECT_EQ((*paged)->next_position, 30);
    EXPECT_EQ((*paged)->positions(0), pos);
    if (pool_dtype == DType::kBF16) {
      EXPECT_EQ(LayerBytes(CpuBackend(), **paged, 0, false), AsBytes(k));
      EXPECT_EQ(LayerBytes(CpuBackend(), **paged, 0, true), AsBytes(v));
    } else {
      std::vector<float> wide(k.size());
      ConvertToF32(DType::kBF16, k.data(), wide.data(), k.size());
      EXPECT_EQ(LayerBytes(CpuBackend(), **paged, 0, false), AsBytes(wide));
    }
  }

  auto device = DeviceKv::FromCache(CpuBackend(), cache, 1);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->dtype(), DType::kBF16);
  EXPECT_EQ((*device)->next_position, 30);
  const std::vector<float> more = Rows(1, 7.f);
  const int32_t next = 30;
  ASSERT_TRUE((*device)->Append(CpuBackend(), 0, more.data(), more.data(), &next, 1).ok());
  EXPECT_EQ((*device)->Append(CpuBackend(), 0, more.data(), more.data(), &next, 1).code(),
            absl::StatusCode::kFailedPrecondition);  // past the reserved row
  std::vector<uint16_t> want = k;
  const std::vector<uint16_t> more_bits = Rounded(more);
  want.insert(want.end(), more_bits.begin(), more_bits.end());
  EXPECT_EQ(LayerBytes(CpuBackend(), **device, 0, false), AsBytes(want));
}

// On a device: a prefill's rows copied out of the device into a BF16 host cache are rounded as
// the device rounds them into a pool, and a decode step over a BF16 DeviceKv gives exactly the
// logits of the same rows in BF16 blocks of a device pool.
TEST(KvCacheTest, Bf16CachesOnTheEmulatedCudaBackend) {
  absl::StatusOr<const Backend*> cuda = GetCudaBackend();
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  const Backend& gpu = **cuda;
  const std::vector<float> k = Rows(6, 1.5f), v = Rows(6, -0.25f);
  const std::vector<int32_t> pos = Positions(0, 6);
  auto d_k = BackendBuffer::Allocate(gpu, k.size() * sizeof(float));
  auto d_v = BackendBuffer::Allocate(gpu, v.size() * sizeof(float));
  ASSERT_TRUE(d_k.ok() && d_v.ok());
  ASSERT_TRUE(gpu.CopyToBackend(d_k->data(), k.data(), k.size() * sizeof(float)).ok());
  ASSERT_TRUE(gpu.CopyToBackend(d_v->data(), v.data(), v.size() * sizeof(float)).ok());
  KvCache cache;
  ASSERT_TRUE(cache.SetDType(DType::kBF16).ok());
  cache.kv_dim = kKvDim;
  cache.layers.resize(1);
  ASSERT_TRUE(cache.Append(gpu, 0, d_k->as<float>(), d_v->as<float>(), pos.data(), 6).ok());
  EXPECT_EQ(cache.layers[0].k_bf16, Rounded(k));
  EXPECT_EQ(cache.layers[0].v_bf16, Rounded(v));
  auto pool = KvBlockPool::Create(4, kKvDim, DType::kBF16, 1 << 20, &gpu);
  ASSERT_TRUE(pool.ok());
  auto blocks = PagedKv::Reserve(pool->get(), {6}, 0);
  ASSERT_TRUE(blocks.ok());
  ASSERT_TRUE((*blocks)->Append(gpu, 0, d_k->as<float>(), d_v->as<float>(), pos.data(), 6).ok());
  EXPECT_EQ(LayerBytes(gpu, **blocks, 0, false), AsBytes(cache.layers[0].k_bf16));
  EXPECT_EQ(LayerBytes(gpu, **blocks, 0, true), AsBytes(cache.layers[0].v_bf16));

  // A whole model: the prefill's BF16 cache, decoded from a DeviceKv and from device blocks.
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/model/kv_cache_bf16";
  const TinyModelOptions o = testing_support::TinyOptions(9, 3, 112);
  ASSERT_TRUE(WriteTinyModel(o, dir).ok());
  ModelOptions options;
  options.backend = &gpu;
  options.kv_dtype = DType::kBF16;
  auto model = LlavaModel::Load(dir, options);
  ASSERT_TRUE(model.ok()) << model.status();
  const LlavaModel& m = **model;
  const int n_vis = m.config().num_visual_tokens();
  std::vector<float> embeds(static_cast<size_t>(n_vis) * m.config().text.hidden_size);
  for (size_t i = 0; i < embeds.size(); ++i) embeds[i] = 0.02f * std::cos(0.1f * i);
  auto tokens = m.Tokenize("What is in the picture?", n_vis);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  auto prefill = m.Prefill(*tokens, embeds, nullptr);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  // The prefill's own cache, in device memory with no room to spare, grows there for 3 steps.
  ASSERT_NE(prefill->device_cache, nullptr);
  DeviceKv& device_kv = *prefill->device_cache;
  ASSERT_EQ(device_kv.dtype(), DType::kBF16);
  auto host = device_kv.ToHost();
  ASSERT_TRUE(host.ok()) << host.status();
  auto model_pool = KvBlockPool::Create(16, host->kv_dim, DType::kBF16, 8 << 20, &gpu);
  ASSERT_TRUE(model_pool.ok());
  auto paged = PagedKv::FromCache(model_pool->get(), *host, 3);
  ASSERT_TRUE(paged.ok());
  const int rows = device_kv.len(0);
  EXPECT_EQ(device_kv.capacity(0), rows);
  ASSERT_TRUE(device_kv.ReserveRows(3).ok());
  EXPECT_EQ(device_kv.capacity(0), rows + 3);
  auto moved = device_kv.ToHost();  // the rows moved within device memory, bit for bit
  ASSERT_TRUE(moved.ok());
  for (int l = 0; l < device_kv.n_layers(); ++l) {
    EXPECT_EQ(moved->layers[l].k_bf16, host->layers[l].k_bf16) << l;
    EXPECT_EQ(moved->layers[l].v_bf16, host->layers[l].v_bf16) << l;
    EXPECT_EQ(moved->layers[l].positions, host->layers[l].positions) << l;
  }
  int32_t token = 5;
  for (int step = 0; step < 3; ++step) {
    auto a = m.DecodeStep(token, &device_kv);
    auto b = m.DecodeStep(token, paged->get());
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    ASSERT_EQ(a->size(), b->size());
    ASSERT_EQ(std::memcmp(a->data(), b->data(), a->size() * sizeof(float)), 0) << step;
    token = static_cast<int32_t>(std::max_element(a->begin(), a->end()) - a->begin());
  }
}

}  // namespace
}  // namespace hap
