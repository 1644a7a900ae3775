// Every Backend runs every op against the plain references (kernels/cpu *Reference functions
// and the formulas written out here): the CPU backend and the CUDA backend on the SIMT
// emulation (kernels/cuda), which also rejects any pointer that is not its device memory, so
// each case moves its data through the backend's own buffers as the model must.
#include "kernels/backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/decode_attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/prune/attention_rows.h"
#include "kernels/cpu/prune/paq.h"
#include "kernels/cpu/prune/paq_softmax.h"
#include "kernels/cpu/prune/visionzip_merge.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/kernels/attention_args.h"
#include "tests/kernels/backends.h"

namespace hap {
namespace {

using testing_support::Random;

// A host array mirrored in a backend's memory.
template <typename T>
class On {
 public:
  On(const Backend& b, const std::vector<T>& host) : On(b, host.size()) {
    EXPECT_TRUE(b.CopyToBackend(buf_.data(), host.data(), host.size() * sizeof(T)).ok());
  }
  On(const Backend& b, size_t n) : b_(b), n_(n) {
    buf_ = *BackendBuffer::Allocate(b, std::max<size_t>(n, 1) * sizeof(T));
  }
  T* p() const { return buf_.as<T>(); }
  std::vector<T> Host() const {
    std::vector<T> h(n_);
    EXPECT_TRUE(b_.CopyToHost(h.data(), buf_.data(), n_ * sizeof(T)).ok());
    return h;
  }

 private:
  const Backend& b_;
  size_t n_;
  BackendBuffer buf_;
};

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-3) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst =
        std::max(worst, std::fabs(double{a[i]} - b[i]) / std::max(floor, std::fabs(double{b[i]})));
  }
  return worst;
}

class BackendTest : public ::testing::TestWithParam<const Backend*> {
 protected:
  const Backend& b() const { return *GetParam(); }
};

TEST_P(BackendTest, LinearOnEveryWeightDtypeAndRowCount) {
  const int k = 70, n = 45;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<float> w = Random(size_t{n} * k, 1, 0.3f);
    std::vector<uint16_t> bits(w.size());
    if (dtype != DType::kF32) {
      ConvertFromF32(dtype, w.data(), bits.data(), w.size());
      ConvertToF32(dtype, bits.data(), w.data(), w.size());
    }
    TensorView host_view{dtype == DType::kF32 ? static_cast<const void*>(w.data()) : bits.data(),
                         dtype,
                         Device::kCpu,
                         {n, k}};
    BackendBuffer storage;
    absl::StatusOr<TensorView> view = b().PlaceWeight(host_view, &storage);
    ASSERT_TRUE(view.ok()) << view.status();
    auto bias = Random(n, 2);
    On<float> d_bias(b(), bias);
    for (LinearRows rows : {LinearRows::kIndependent, LinearRows::kOneSequence})
      for (int m : {1, 5, 40, 200}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " m=" << m << " one sequence "
                                          << (rows == LinearRows::kOneSequence));
        auto x = Random(size_t(m) * k, 3 + m);
        std::vector<float> ref(size_t(m) * n);
        On<float> d_x(b(), x), d_y(b(), ref.size());
        ASSERT_TRUE(b().Linear(d_x.p(), *view, d_bias.p(), d_y.p(), m, rows).ok());
        const std::vector<float> y = d_y.Host();
        // Products on BF16 weights round x to BF16 where the CPU has BF16 dot products, and the
        // CUDA backend rounds x to the weights' narrow type (cuBLAS multiplies one type): the
        // reference then takes the rounded x; either way the sum must match to F32 rounding.
        std::vector<float> x_ref = x;
        const bool cuda = b().device() == Device::kCuda;
        if (dtype != DType::kF32 && (cuda || (dtype == DType::kBF16 && cpu::HasBf16DotProduct()))) {
          for (float& v : x_ref) {
            v = dtype == DType::kBF16 ? BF16ToF32(F32ToBF16(v)) : F16ToF32(F32ToF16(v));
          }
        }
        cpu::LinearReference(x_ref.data(), w.data(), bias.data(), ref.data(), m, k, n);
        EXPECT_LT(MaxRelDiff(y, ref, 0.1), 1e-4);
      }
  }
}

// A strided weight (columns 7..56 of a [45, 70] BF16 matrix, as a column range of a fused
// weight would be) is refused by the ops as it is, and once placed (packed into the backend's
// memory) multiplies exactly like a contiguous copy of the same columns.
TEST_P(BackendTest, StridedWeightsArePackedByPlaceWeight) {
  const int k_full = 70, n = 45, col0 = 7, k = 50, m = 3;
  std::vector<float> w = Random(size_t{n} * k_full, 11, 0.3f);
  std::vector<uint16_t> bits(w.size());
  ConvertFromF32(DType::kBF16, w.data(), bits.data(), w.size());
  const TensorView full{bits.data(), DType::kBF16, Device::kCpu, {n, k_full}};
  absl::StatusOr<TensorView> cols = full.Narrow(1, col0, k);
  ASSERT_TRUE(cols.ok()) << cols.status();
  ASSERT_FALSE(cols->contiguous());
  std::vector<uint16_t> packed_bits(size_t{n} * k);
  for (size_t r = 0; r < static_cast<size_t>(n); ++r) {
    std::memcpy(&packed_bits[r * k], &bits[r * k_full + col0], k * 2);
  }
  const TensorView packed{packed_bits.data(), DType::kBF16, Device::kCpu, {n, k}};

  auto x = Random(size_t{m} * k, 12);
  On<float> d_x(b(), x), d_y(b(), size_t{m} * n), d_ref(b(), size_t{m} * n);
  if (b().device() == Device::kCpu) {  // a device backend refuses a host view anyway
    const absl::Status refused =
        b().Linear(d_x.p(), *cols, nullptr, d_y.p(), m, LinearRows::kIndependent);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_NE(refused.message().find("strides [70, 1]"), std::string::npos) << refused;
  }
  BackendBuffer cols_storage, packed_storage;
  absl::StatusOr<TensorView> placed = b().PlaceWeight(*cols, &cols_storage);
  absl::StatusOr<TensorView> placed_ref = b().PlaceWeight(packed, &packed_storage);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_TRUE(placed_ref.ok()) << placed_ref.status();
  EXPECT_TRUE(placed->contiguous());
  EXPECT_EQ(placed->shape, (std::vector<int64_t>{n, k}));
  ASSERT_TRUE(b().Linear(d_x.p(), *placed, nullptr, d_y.p(), m, LinearRows::kIndependent).ok());
  ASSERT_TRUE(
      b().Linear(d_x.p(), *placed_ref, nullptr, d_ref.p(), m, LinearRows::kIndependent).ok());
  EXPECT_EQ(d_y.Host(), d_ref.Host());  // the same bits in, the same arithmetic: equal
}

TEST_P(BackendTest, NormsActivationsAndAdd) {
  const int rows = 3, d = 37;
  auto x = Random(rows * d, 4), w = Random(d, 5), bias = Random(d, 6);
  std::vector<float> y(x.size()), ref(x.size());
  On<float> d_x(b(), x), d_w(b(), w), d_bias(b(), bias), d_y(b(), x.size());
  ASSERT_TRUE(b().RmsNorm(d_x.p(), d_w.p(), d_y.p(), rows, d, 1e-5f).ok());
  y = d_y.Host();
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += double{x[r * d + i]} * x[r * d + i];
    const double inv = 1.0 / std::sqrt(ss / d + 1e-5);
    for (int i = 0; i < d; ++i) ref[r * d + i] = static_cast<float>(x[r * d + i] * inv * w[i]);
  }
  EXPECT_LT(MaxRelDiff(y, ref), 1e-5);
  ASSERT_TRUE(b().LayerNorm(d_x.p(), d_w.p(), d_bias.p(), d_y.p(), rows, d, 1e-5f).ok());
  y = d_y.Host();
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < d; ++i) mean += x[r * d + i];
    mean /= d;
    for (int i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean);
    const double inv = 1.0 / std::sqrt(var / d + 1e-5);
    for (int i = 0; i < d; ++i)
      ref[r * d + i] = static_cast<float>((x[r * d + i] - mean) * inv * w[i] + bias[i]);
  }
  EXPECT_LT(MaxRelDiff(y, ref), 1e-5);

  struct Act {
    Activation kind;
    double (*f)(double);
  };
  const Act acts[] = {
      {Activation::kQuickGelu, [](double v) { return v / (1 + std::exp(-1.702 * v)); }},
      {Activation::kGelu, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
      {Activation::kGeluTanh, [](double v) {
         return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
       }}};
  for (const Act& a : acts) {
    On<float> d_a(b(), x);
    ASSERT_TRUE(b().Activate(a.kind, d_a.p(), static_cast<int64_t>(x.size())).ok());
    y = d_a.Host();
    for (size_t i = 0; i < x.size(); ++i) ref[i] = static_cast<float>(a.f(x[i]));
    EXPECT_LT(MaxRelDiff(y, ref), 1e-5) << static_cast<int>(a.kind);
  }
  auto up = Random(x.size(), 7);
  On<float> d_up(b(), up), d_g(b(), x);
  ASSERT_TRUE(b().SiluMul(d_g.p(), d_up.p(), static_cast<int64_t>(x.size())).ok());
  y = d_g.Host();
  for (size_t i = 0; i < x.size(); ++i)
    ref[i] = static_cast<float>(x[i] / (1 + std::exp(-double{x[i]})) * up[i]);
  EXPECT_LT(MaxRelDiff(y, ref), 1e-5);
  On<float> d_sum(b(), x);
  ASSERT_TRUE(b().Add(d_sum.p(), d_up.p(), static_cast<int64_t>(x.size())).ok());
  y = d_sum.Host();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i] + up[i]);
}

// RoPE rotate-half with original position ids: pair (i, i + hd/2) turns by pos · θ^(-2i/hd).
TEST_P(BackendTest, RopeUsesEachRowsPositionId) {
  const int rows = 3, heads = 2, hd = 8;
  const float theta = 10000.f;
  const std::vector<int32_t> pos = {0, 7, 3};
  auto x = Random(rows * heads * hd, 8);
  On<float> d_y(b(), x);
  On<int32_t> d_pos(b(), pos);
  ASSERT_TRUE(b().Rope(d_y.p(), d_pos.p(), rows, heads, hd, theta).ok());
  const std::vector<float> y = d_y.Host();
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float* in = x.data() + (r * heads + h) * hd;
      const float* out = y.data() + (r * heads + h) * hd;
      for (int i = 0; i < hd / 2; ++i) {
        const double ang = pos[r] * std::pow(double{theta}, -2.0 * i / hd);
        EXPECT_NEAR(out[i], in[i] * std::cos(ang) - in[i + hd / 2] * std::sin(ang), 1e-5);
        EXPECT_NEAR(out[i + hd / 2], in[i + hd / 2] * std::cos(ang) + in[i] * std::sin(ang), 1e-5);
      }
    }
  }
}

TEST_P(BackendTest, AttentionWithLogSumExpAndDecodeOverSpans) {
  const int n = 19, heads = 4, kv_heads = 2, hd = 16;
  auto q = Random(n * heads * hd, 9), k = Random(n * kv_heads * hd, 10),
       v = Random(n * kv_heads * hd, 11);
  std::vector<float> ref(q.size()), lse_ref(heads * n);
  On<float> d_q(b(), q), d_k(b(), k), d_v(b(), v), d_out(b(), q.size()), d_lse(b(), heads * n);
  AttentionArgs a = testing_support::SelfAttention(d_q.p(), d_k.p(), d_v.p(), d_out.p(), d_lse.p(),
                                                   n, heads, kv_heads, hd, 0.25f, /*causal=*/true);
  ASSERT_TRUE(b().Attention(a).ok());
  const std::vector<float> out = d_out.Host(), lse = d_lse.Host();
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.out = ref.data();
  a.lse = lse_ref.data();
  cpu::AttentionReference(a);
  EXPECT_LT(MaxRelDiff(out, ref), 1e-4);
  EXPECT_LT(MaxRelDiff(lse, lse_ref), 1e-5);

  // The last row attends to every key: the decode op over 3 spans must agree with it.
  std::vector<KvSpan> spans;
  for (int r = 0; r < n; r += 7) {
    spans.push_back({d_k.p() + r * kv_heads * hd, d_v.p() + r * kv_heads * hd, std::min(7, n - r)});
  }
  On<float> d_one(b(), heads * hd);
  DecodeAttentionArgs d = testing_support::DecodeOverSpans(d_q.p() + (n - 1) * heads * hd, spans,
                                                           /*span_begin=*/nullptr, /*n_seqs=*/1,
                                                           DType::kF32, heads, kv_heads, hd, 0.25f);
  d.out = d_one.p();
  ASSERT_TRUE(b().DecodeAttention(d).ok());
  const std::vector<float> one = d_one.Host();
  std::vector<float> last(ref.end() - heads * hd, ref.end());
  EXPECT_LT(MaxRelDiff(one, last), 1e-4);
}

// DecodeAttentionArgs::max_rows may be any bound from the longest sequence's rows up (a captured
// decode step gives a power of two): the result is the same bit for bit. With the caller's
// workspace (Backend::DecodeAttentionWorkspaceBytes) the op uses it; one too small is refused.
TEST_P(BackendTest, DecodeAttentionIsTheSameForAnyRowBoundAndInItsOwnWorkspace) {
  const int heads = 4, kv_heads = 2, hd = 32, rows[] = {300, 45};
  const int n_seqs = 2, total = rows[0] + rows[1];
  const std::vector<float> q = Random(size_t{n_seqs} * heads * hd, 21);
  const std::vector<float> k = Random(size_t{total} * kv_heads * hd, 22);
  const std::vector<float> v = Random(size_t{total} * kv_heads * hd, 23);
  On<float> d_q(b(), q), d_k(b(), k), d_v(b(), v);
  std::vector<KvSpan> spans;
  std::vector<int> span_begin = {0};
  int at = 0;
  for (int s = 0; s < n_seqs; ++s) {
    for (int r = 0; r < rows[s]; r += 16) {
      const int64_t row = at + r;
      spans.push_back({d_k.p() + row * kv_heads * hd, d_v.p() + row * kv_heads * hd,
                       std::min(16, rows[s] - r)});
    }
    at += rows[s];
    span_begin.push_back(static_cast<int>(spans.size()));
  }
  DecodeAttentionArgs d = testing_support::DecodeOverSpans(
      d_q.p(), spans, span_begin.data(), n_seqs, DType::kF32, heads, kv_heads, hd, 0.2f);
  auto run = [&](const DecodeAttentionArgs& args) {
    On<float> out(b(), size_t{n_seqs} * heads * hd);
    DecodeAttentionArgs a = args;
    a.out = out.p();
    EXPECT_TRUE(b().DecodeAttention(a).ok()) << a.max_rows;
    return out.Host();
  };
  d.max_rows = rows[0];
  const std::vector<float> want = run(d);
  for (int bound : {0, 301, 512, 4096, 1 << 20}) {
    d.max_rows = bound;
    EXPECT_EQ(run(d), want) << "max_rows " << bound;
  }
  d.max_rows = 512;
  const size_t bytes = b().DecodeAttentionWorkspaceBytes(d);
  if (b().caps().host_memory) {
    EXPECT_EQ(bytes, 0u);
    return;
  }
  ASSERT_GT(bytes, 0u);
  On<uint8_t> workspace(b(), bytes);
  d.workspace = workspace.p();
  d.workspace_bytes = bytes;
  EXPECT_EQ(run(d), want);
  On<float> out(b(), size_t{n_seqs} * heads * hd);
  d.out = out.p();
  d.workspace_bytes = bytes - 1;
  EXPECT_EQ(b().DecodeAttention(d).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(BackendTest, StoreF32AsRoundsLikeTheHostConversion) {
  const std::vector<float> x = Random(1001, 14, 3.f);
  On<float> d_x(b(), x);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    On<uint8_t> d_out(b(), x.size() * DTypeSize(dtype));
    ASSERT_TRUE(b().StoreF32As(dtype, d_x.p(), d_out.p(), static_cast<int64_t>(x.size())).ok());
    std::vector<uint8_t> want(x.size() * DTypeSize(dtype));
    ConvertFromF32(dtype, x.data(), want.data(), x.size());
    EXPECT_EQ(d_out.Host(), want) << DTypeName(dtype);
  }
}

// Two arrays at once (a layer's K and V): each as StoreF32As stores it, neither into the other's.
TEST_P(BackendTest, StoreF32PairAsStoresEachAsStoreF32As) {
  const std::vector<float> a = Random(1001, 15, 3.f), b_host = Random(1001, 16, 300.f);
  On<float> d_a(b(), a), d_b(b(), b_host);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    On<uint8_t> a_out(b(), a.size() * DTypeSize(dtype)), b_out(b(), a.size() * DTypeSize(dtype));
    ASSERT_TRUE(b().StoreF32PairAs(dtype, d_a.p(), a_out.p(), d_b.p(), b_out.p(),
                                   static_cast<int64_t>(a.size()))
                    .ok());
    std::vector<uint8_t> want_a(a.size() * DTypeSize(dtype)), want_b(want_a.size());
    ConvertFromF32(dtype, a.data(), want_a.data(), a.size());
    ConvertFromF32(dtype, b_host.data(), want_b.data(), b_host.size());
    EXPECT_EQ(a_out.Host(), want_a) << DTypeName(dtype);
    EXPECT_EQ(b_out.Host(), want_b) << DTypeName(dtype);
  }
}

// The hidden states and positions after a stage in one op: each as GatherKeptRows gathers it.
TEST_P(BackendTest, GatherKeptRowsPairGathersEachAsGatherKeptRows) {
  const int n_tokens = 9, vis_begin = 2, n_vis = 5, d = 3;
  const std::vector<float> x = Random(n_tokens * d, 17);
  std::vector<int32_t> pos(n_tokens);
  for (int r = 0; r < n_tokens; ++r) pos[r] = 10 * r;
  On<float> d_x(b(), x);
  On<int32_t> d_pos(b(), pos), d_kept(b(), std::vector<int32_t>{1, 4});
  const int n_out = n_tokens - n_vis + 2;
  On<float> x_out(b(), n_out * d), x_want(b(), n_out * d);
  On<int32_t> pos_out(b(), n_out), pos_want(b(), n_out);
  ASSERT_TRUE(b().GatherKeptRowsPair(d_x.p(), sizeof(float) * d, x_out.p(), d_pos.p(),
                                     sizeof(int32_t), pos_out.p(), n_tokens, vis_begin, n_vis,
                                     d_kept.p(), 2)
                  .ok());
  ASSERT_TRUE(b().GatherKeptRows(d_x.p(), n_tokens, sizeof(float) * d, vis_begin, n_vis, d_kept.p(),
                                 2, x_want.p())
                  .ok());
  ASSERT_TRUE(b().GatherKeptRows(d_pos.p(), n_tokens, sizeof(int32_t), vis_begin, n_vis, d_kept.p(),
                                 2, pos_want.p())
                  .ok());
  EXPECT_EQ(x_out.Host(), x_want.Host());
  EXPECT_EQ(pos_out.Host(), pos_want.Host());
  EXPECT_EQ(pos_out.Host(), (std::vector<int32_t>{0, 10, 30, 60, 70, 80}));
}

TEST_P(BackendTest, GatherRowsInPlaceAndOutOfRange) {
  On<int32_t> d_rows(b(), std::vector<int32_t>{10, 11, 12, 13, 14, 15});
  const int idx[] = {0, 2, 5};
  ASSERT_TRUE(b().GatherRows(d_rows.p(), 6, sizeof(int32_t), idx, 3, d_rows.p()).ok());
  const std::vector<int32_t> rows = d_rows.Host();
  EXPECT_EQ(rows[0], 10);
  EXPECT_EQ(rows[1], 12);
  EXPECT_EQ(rows[2], 15);
  const int bad[] = {6};
  EXPECT_EQ(b().GatherRows(d_rows.p(), 6, sizeof(int32_t), bad, 1, d_rows.p()).code(),
            absl::StatusCode::kInvalidArgument);
}

// The HAP chain on one small layer: text→visual rows, PAQ per head against the reference,
// PAQ-softmax weights summing to 1, the weighted map, token scores as column means, top-k.
TEST_P(BackendTest, PruningOpsAgreeWithTheirDefinitions) {
  const int n_text = 3, n_vis = 6, heads = 2, hd = 8;
  auto q = Random(n_text * heads * hd, 12), k = Random(n_vis * heads * hd, 13);
  On<float> d_q(b(), q), d_k(b(), k);
  TextVisualAttentionArgs t = testing_support::TextVisualRows(
      d_q.p(), d_k.p(), /*lse=*/nullptr, n_text, n_vis, heads, heads, hd, 0.35f, /*out=*/nullptr);
  std::vector<float> ref(heads * n_text * n_vis);
  On<float> d_maps(b(), ref.size());
  On<double> d_entropy(b(), heads * n_text);
  t.out = d_maps.p();
  t.row_entropy = d_entropy.p();
  ASSERT_TRUE(b().pruning().TextVisualAttention(t).ok());
  const std::vector<float> maps = d_maps.Host();
  t.q_text = q.data();
  t.k_vis = k.data();
  t.out = ref.data();
  t.row_entropy = nullptr;
  ASSERT_TRUE(kernels::TextVisualAttentionReference(t).ok());
  EXPECT_LT(MaxRelDiff(maps, ref), 1e-5);

  // PAQ values and PAQ-softmax weights stay in the backend's memory.
  std::vector<float> paq_ref(heads);
  On<float> d_paq(b(), heads), d_paq_e(b(), heads), d_wts(b(), heads);
  ASSERT_TRUE(b().pruning().Paq(d_maps.p(), heads, n_text, n_vis, d_paq.p()).ok());
  ASSERT_TRUE(kernels::PaqReference(maps.data(), heads, n_text, n_vis, paq_ref.data()).ok());
  ASSERT_TRUE(b().pruning()
                  .PaqFromRowEntropies(d_maps.p(), d_entropy.p(), heads, n_text, n_vis, d_paq_e.p())
                  .ok());
  const std::vector<float> paq = d_paq.Host();
  EXPECT_LT(MaxRelDiff(paq, paq_ref), 1e-5);
  EXPECT_LT(MaxRelDiff(d_paq_e.Host(), paq_ref), 1e-4);

  ASSERT_TRUE(b().pruning().PaqSoftmaxWeights(d_paq.p(), heads, 1.0, d_wts.p()).ok());
  const std::vector<float> wts = d_wts.Host();
  std::vector<float> wts_ref(heads);
  ASSERT_TRUE(kernels::PaqSoftmaxWeights(paq.data(), heads, wts_ref.data()).ok());
  EXPECT_EQ(wts, wts_ref);  // the reference's arithmetic in its order
  // Other PAQ-softmax temperatures, on an odd count of candidates with spread PAQs.
  {
    const std::vector<float> many = {0.03f, 0.91f, 0.42f, 0.77f, 0.05f, 0.66f, 0.2f};
    const int n = static_cast<int>(many.size());
    On<float> d_many(b(), many), d_w(b(), n);
    for (double tau : {0.01, 0.05, 0.7, 3.0, 100.0}) {
      ASSERT_TRUE(b().pruning().PaqSoftmaxWeights(d_many.p(), n, tau, d_w.p()).ok()) << tau;
      std::vector<float> want(n);
      ASSERT_TRUE(kernels::PaqSoftmaxWeights(many.data(), n, tau, want.data()).ok());
      EXPECT_EQ(d_w.Host(), want) << "tau " << tau;
    }
    for (double tau : {0.0, -2.0, double(NAN), double(INFINITY)}) {
      EXPECT_EQ(b().pruning().PaqSoftmaxWeights(d_many.p(), n, tau, d_w.p()).code(),
                absl::StatusCode::kInvalidArgument)
          << tau;
    }
  }
  EXPECT_NEAR(wts[0] + wts[1], 1.f, 1e-6);
  EXPECT_EQ(wts[0] > wts[1], paq[0] > paq[1]);

  const int64_t size = int64_t{n_text} * n_vis;
  On<float> d_layer(b(), size), d_layer2(b(), size);
  ASSERT_TRUE(
      b().pruning().WeightedSumContiguous(d_maps.p(), d_wts.p(), heads, size, d_layer.p()).ok());
  const float* ptrs[] = {d_maps.p(), d_maps.p() + size};
  ASSERT_TRUE(b().pruning().WeightedSumMaps(ptrs, d_wts.p(), heads, size, d_layer2.p()).ok());
  const std::vector<float> layer = d_layer.Host(), layer2 = d_layer2.Host();
  for (int64_t i = 0; i < size; ++i) {
    EXPECT_NEAR(layer[i], wts[0] * maps[i] + wts[1] * maps[size + i], 1e-6);
    EXPECT_NEAR(layer2[i], layer[i], 1e-6);
  }
  On<float> d_scores(b(), n_vis), d_some(b(), n_vis);
  ASSERT_TRUE(b().pruning().TokenScores(d_layer.p(), n_text, n_vis, d_scores.p()).ok());
  const std::vector<float> scores = d_scores.Host();
  for (int i = 0; i < n_vis; ++i) {
    double mean = 0;
    for (int j = 0; j < n_text; ++j) mean += layer[j * n_vis + i];
    EXPECT_NEAR(scores[i], mean / n_text, 1e-6);
  }
  const int sel[] = {2};
  ASSERT_TRUE(b().pruning().TokenScoresOfRows(d_layer.p(), n_text, n_vis, sel, 1, d_some.p()).ok());
  const std::vector<float> some = d_some.Host();
  for (int i = 0; i < n_vis; ++i) EXPECT_NEAR(some[i], layer[2 * n_vis + i], 1e-6);

  On<float> d_tied(b(), std::vector<float>{0.5f, 0.9f, 0.5f, 0.1f, 0.9f});
  int kept[3];
  ASSERT_TRUE(b().pruning().StableTopK(d_tied.p(), 5, 3, kept).ok());
  EXPECT_EQ(kept[0], 0);  // 0.9 at 1 and 4, then 0.5 at 0 (ties to the lower index), ascending
  EXPECT_EQ(kept[1], 1);
  EXPECT_EQ(kept[2], 4);
}

// VisionZip on one small feature layer: the CLS attention as TextVisualAttention of row 0 over
// every token summed over heads by WeightedSumContiguous, against its F64 definition; the merge
// against the reference (rows, counts), with a source tied between two targets and a zero key;
// token indices outside [0, n) refused.
TEST_P(BackendTest, VisionZipOpsAgreeWithTheirDefinitions) {
  const int n = 23, heads = 3, hd = 8, d = 11;
  auto q = Random(n * heads * hd, 21), k = Random(n * heads * hd, 22), hid = Random(n * d, 23);
  const int kw = heads * hd;
  std::copy(k.begin() + 4 * kw, k.begin() + 5 * kw, k.begin() + 9 * kw);  // token 9 = token 4
  std::fill(k.begin() + 6 * kw, k.begin() + 7 * kw, 0.f);                 // token 6: zero key
  On<float> d_q(b(), q), d_k(b(), k), d_hid(b(), hid), d_heads(b(), heads * n), d_cls(b(), n);
  const TextVisualAttentionArgs t = testing_support::TextVisualRows(
      d_q.p(), d_k.p(), /*lse=*/nullptr, /*n_text=*/1, n, heads, heads, hd,
      1.f / std::sqrt(static_cast<float>(hd)), d_heads.p());
  ASSERT_TRUE(b().pruning().TextVisualAttention(t).ok());
  On<float> ones(b(), std::vector<float>(heads, 1.f));
  ASSERT_TRUE(b().pruning().WeightedSumContiguous(d_heads.p(), ones.p(), heads, n, d_cls.p()).ok());
  const std::vector<float> cls = d_cls.Host();
  for (int i = 0; i < n; ++i) {
    double want = 0;
    for (int h = 0; h < heads; ++h) {
      std::vector<double> logit(n);
      for (int j = 0; j < n; ++j) {
        double dot = 0;
        for (int e = 0; e < hd; ++e) dot += double{q[h * hd + e]} * k[(j * heads + h) * hd + e];
        logit[j] = t.scale * dot;
      }
      const double mx = *std::max_element(logit.begin(), logit.end());
      double z = 0;
      for (double l : logit) z += std::exp(l - mx);
      want += std::exp(logit[i] - mx) / z;
    }
    EXPECT_NEAR(cls[i], want, 1e-6 * want + 1e-9) << i;
  }

  const std::vector<int> targets = {4, 9, 15}, sources = {1, 2, 3, 5, 6, 7, 8, 10, 20, 22};
  VisionZipMergeArgs m{.k = k.data(),
                       .hidden = hid.data(),
                       .n_tokens = n,
                       .n_heads = heads,
                       .head_dim = hd,
                       .d_model = d,
                       .targets = targets.data(),
                       .n_targets = 3,
                       .sources = sources.data(),
                       .n_sources = 10};
  std::vector<float> want(3 * d);
  std::vector<int> want_count(3);
  m.out = want.data();
  m.merged_count = want_count.data();
  ASSERT_TRUE(kernels::VisionZipMerge(m).ok());
  EXPECT_EQ(want_count[1], 0);  // token 9's key is token 4's: every tie goes to target 0
  EXPECT_EQ(want_count[0] + want_count[1] + want_count[2], 10);
  On<float> d_out(b(), 3 * d);
  std::vector<int> count(3, -1);
  m.k = d_k.p();
  m.hidden = d_hid.p();
  m.out = d_out.p();
  m.merged_count = count.data();
  ASSERT_TRUE(b().pruning().VisionZipMerge(m).ok());
  EXPECT_EQ(count, want_count);
  EXPECT_LT(MaxRelDiff(d_out.Host(), want), 1e-6);
  m.merged_count = nullptr;  // the counts are optional
  ASSERT_TRUE(b().pruning().VisionZipMerge(m).ok());
  EXPECT_LT(MaxRelDiff(d_out.Host(), want), 1e-6);

  const int bad_sources[] = {1, n};
  m.sources = bad_sources;
  m.n_sources = 2;
  EXPECT_EQ(b().pruning().VisionZipMerge(m).code(), absl::StatusCode::kInvalidArgument);
  m.n_sources = 0;  // no sources: the targets' own rows
  m.sources = nullptr;
  ASSERT_TRUE(b().pruning().VisionZipMerge(m).ok());
  const std::vector<float> own = d_out.Host();
  for (int c = 0; c < 3; ++c) {
    for (int e = 0; e < d; ++e) EXPECT_EQ(own[c * d + e], hid[targets[c] * d + e]);
  }
}

// A map that is not a distribution: the CPU backend's Paq refuses it; a device backend writes
// NaN (it does not wait to look), and the PAQ-softmax carries the NaN into every weight, so the
// caller that copies the scalars out sees it.
TEST_P(BackendTest, AMapThatIsNoDistributionIsRefusedOrFlaggedNaN) {
  const int n_text = 2, n_vis = 3;
  std::vector<float> maps = {0.2f, 0.3f, 0.5f, 0.1f, 0.1f, 0.8f,   // map 0: rows sum to 1
                             0.2f, 0.3f, 0.5f, 0.1f, 0.1f, 0.3f};  // map 1: row 1 sums to 0.5
  On<float> d_maps(b(), maps), d_paq(b(), 2), d_wts(b(), 2);
  const absl::Status paq = b().pruning().Paq(d_maps.p(), 2, n_text, n_vis, d_paq.p());
  if (b().device() == Device::kCpu) {
    EXPECT_EQ(paq.code(), absl::StatusCode::kInvalidArgument) << paq;
    return;
  }
  ASSERT_TRUE(paq.ok()) << paq;
  const std::vector<float> got = d_paq.Host();
  EXPECT_TRUE(std::isfinite(got[0]));
  EXPECT_TRUE(std::isnan(got[1]));
  ASSERT_TRUE(b().pruning().PaqSoftmaxWeights(d_paq.p(), 2, 1.0, d_wts.p()).ok());
  for (float w : d_wts.Host()) EXPECT_TRUE(std::isnan(w));
}

// The sampling ops: the greedy argmax is std::max_element (ties to the lower id, a NaN at
// element 0 kept), the candidates are the sampler's partial sort with the F64 denominator, a NaN
// row is marked by ids of −1, and only host pointers come back.
TEST_P(BackendTest, SamplingOpsAgreeWithTheSamplersOrder) {
  const int rows = 4, n = 300, k = 20;
  std::vector<float> x = Random(rows * n, 41, 6.f);
  for (int i = 0; i < n; ++i) x[n + i] = std::floor(x[n + i]);  // row 1: 13 levels, many ties
  x[n + 17] = x[n + 250] = 9.f;                                 // row 1: a tied maximum
  x[2 * n + 0] = NAN;                                           // row 2: NaN first
  x[3 * n + 5] = -0.f;                                          // row 3: −0 among others
  x[3 * n + 3] = 0.f;
  for (int i = 0; i < n; ++i) {
    if (i != 3 && i != 5) x[3 * n + i] = -1.f - (i % 7);
  }
  On<float> d_x(b(), x);
  std::vector<int32_t> ids(rows);
  ASSERT_TRUE(b().ArgMaxRows(d_x.p(), rows, n, ids.data()).ok());
  for (int r = 0; r < rows; ++r) {
    const float* row = x.data() + r * n;
    EXPECT_EQ(ids[r], std::max_element(row, row + n) - row) << "row " << r;
  }
  EXPECT_EQ(ids[1], 17);
  EXPECT_EQ(ids[2], 0);
  EXPECT_EQ(ids[3], 3);  // +0 at 3 and −0 at 5 are one value: the lower id

  const std::vector<float> temperature = {0.7f, 1.f, 1.f, 0.f};
  std::vector<float> values(rows * k);
  std::vector<int32_t> top(rows * k);
  std::vector<double> sums(rows);
  TopLogitsArgs a{.logits = d_x.p(),
                  .rows = rows,
                  .n = n,
                  .k = k,
                  .temperature = temperature.data(),
                  .values = values.data(),
                  .ids = top.data(),
                  .row_sum = sums.data()};
  ASSERT_TRUE(b().TopLogits(a).ok());
  for (int r = 0; r < rows; ++r) {
    const float* row = x.data() + r * n;
    if (r == 2) {  // the NaN row
      for (int c = 0; c < k; ++c) EXPECT_EQ(top[r * k + c], -1);
      EXPECT_TRUE(std::isnan(sums[r]));
      continue;
    }
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int i, int j) { return row[i] > row[j]; });
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += std::exp((row[i] - double{row[order[0]]}) / temperature[r]);
    for (int c = 0; c < k; ++c) {
      EXPECT_EQ(top[r * k + c], order[c]) << "row " << r << " rank " << c;
      EXPECT_EQ(values[r * k + c], row[order[c]]);
    }
    if (temperature[r] > 0) {
      EXPECT_NEAR(sums[r], sum, 1e-12 * sum) << "row " << r;
    } else {
      EXPECT_EQ(sums[r], 0.0);
    }
  }
  // Bad shapes are refused before anything runs.
  TopLogitsArgs bad = a;
  bad.k = kMaxTopLogits + 1;
  EXPECT_EQ(b().TopLogits(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = a;
  bad.row_sum = nullptr;
  EXPECT_EQ(b().TopLogits(bad).code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(All, BackendTest, ::testing::ValuesIn(testing_support::AllBackends()),
                         [](const ::testing::TestParamInfo<const Backend*>& info) {
                           return std::string(info.param->name());
                         });

}  // namespace
}  // namespace hap
