// Table-driven parity harness: the fast paths of the pruning kernels against their scalar CPU
// references on random inputs. TextVisualAttention (sgemm + vectorised exp) against
// TextVisualAttentionReference, over odd shapes, GQA, padded strides, renormalised and raw rows,
// and rows whose softmax mass sits on non-visual keys; Paq and PaqFromRowEntropies against
// PaqReference; WeightedSumMaps against the element-at-a-time definition, bit for bit. Every case
// checks atol + rtol·|ref| element-wise (reporting the worst), NaN/Inf, and guard zones around
// the outputs.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/cpu/prune/attention_rows.h"
#include "kernels/cpu/prune/paq.h"
#include "kernels/cpu/prune/weighted_sum.h"
#include "tests/kernels/attention_args.h"
#include "tests/prune/parity_outcome.h"
#include "tests/prune/reference.h"

namespace hap {
namespace {

constexpr int kGuard = 32;
constexpr float kSentinel = 1234.5f;

// Where the softmax mass of the text rows sits, for the raw (not renormalised) weights.
enum class Lse {
  kVisual,     // LSE over the visual keys only: the visual weights sum to 1
  kTextHeavy,  // LSE 40 above that: visual weights ~e^−40, the mass is on text/sink keys
  kUnderflow,  // LSE 95 above: visual weights subnormal or 0 in F32 (the fast path gives 0)
};

struct RowsCase {
  int n_text, n_vis, n_heads, n_kv_heads, head_dim;
  int q_pad, k_pad, lse_pad;  // extra floats per row beyond the packed stride (0: default)
  float q_std;                // larger → peakier rows
  bool renormalize;
  Lse lse;
};

std::string Name(const RowsCase& c) {
  return absl::StrFormat("t%d v%d h%d/%d d%d pad%d/%d/%d q%.1f %s%s", c.n_text, c.n_vis, c.n_heads,
                         c.n_kv_heads, c.head_dim, c.q_pad, c.k_pad, c.lse_pad, c.q_std,
                         c.renormalize ? "renorm" : "raw",
                         c.renormalize              ? ""
                         : c.lse == Lse::kVisual    ? " lse=visual"
                         : c.lse == Lse::kTextHeavy ? " lse=text-heavy"
                                                    : " lse=underflow");
}

std::vector<RowsCase> RowsCases() {
  std::vector<RowsCase> cases;
  // Shapes: single row/token, odd sizes, more text rows than one sgemm block (64 at d=64), more
  // visual tokens than one column block, GQA groups of 2, 3, 4 and 6, MQA, and one call large
  // enough (≥ 2^24 multiply-adds) to spread its heads over the thread pool.
  const struct {
    int t, v, h, kvh, d;
  } shapes[] = {{1, 1, 1, 1, 4},     {1, 576, 16, 16, 64},  {3, 7, 4, 4, 8},
                {17, 33, 8, 2, 8},   {20, 576, 16, 16, 64}, {9, 144, 12, 3, 80},
                {70, 200, 4, 1, 64}, {5, 1000, 8, 4, 128},  {33, 65, 6, 1, 16},
                {2, 5, 2, 2, 3},     {40, 576, 16, 8, 64}};
  for (const auto& s : shapes) {
    for (bool pad : {false, true}) {
      const int qp = pad ? 7 : 0, kp = pad ? 3 : 0, lp = pad ? 5 : 0;
      for (float q_std : {1.f, 4.f}) {
        cases.push_back({s.t, s.v, s.h, s.kvh, s.d, qp, kp, lp, q_std, true, Lse::kVisual});
        for (Lse l : {Lse::kVisual, Lse::kTextHeavy, Lse::kUnderflow}) {
          cases.push_back({s.t, s.v, s.h, s.kvh, s.d, qp, kp, lp, q_std, false, l});
        }
      }
    }
  }
  return cases;
}

// A buffer with sentinel guard zones on both sides of n elements.
template <typename T>
struct Guarded {
  explicit Guarded(size_t n) : n(n), buf(n + 2 * kGuard, T(kSentinel)) {}
  T* data() { return buf.data() + kGuard; }
  const T& operator[](size_t i) const { return buf[kGuard + i]; }
  bool Intact() const {
    for (int g = 0; g < kGuard; ++g) {
      if (buf[g] != T(kSentinel) || buf[kGuard + n + g] != T(kSentinel)) return false;
    }
    return true;
  }
  size_t n;
  std::vector<T> buf;
};

// Runs both paths on one case: weights to atol 1e-30 (the fast exp flushes results below F32's
// normal range to 0) + rtol·|ref|; row entropies and PAQ (renormalised rows) to 1e-6 + rtol·|ref|.
// rtol is 1e-5, and 3e-5 for the peaky rows (q_std 4): their logits reach ~15, where the two
// paths' F32 dot products (different summation orders) differ by a few 1e-6, and a weight's
// relative error is its logit's absolute error.
testref::ParityOutcome RunRowsCase(const RowsCase& c, uint64_t seed) {
  const double rtol = c.q_std > 1.f ? 3e-5 : 1e-5;
  const int H = c.n_heads, KVH = c.n_kv_heads, hd = c.head_dim;
  const int64_t q_stride = int64_t{H} * hd + c.q_pad, k_stride = int64_t{KVH} * hd + c.k_pad;
  const int64_t lse_stride = c.n_text + c.lse_pad;
  const std::vector<float> q = testref::RandomNormal(size_t(c.n_text) * q_stride, seed, c.q_std);
  const std::vector<float> k = testref::RandomNormal(size_t(c.n_vis) * k_stride, seed + 1, 1.f);
  const float scale = 1.f / std::sqrt(float(hd));

  // LSE per (head, row), from the visual logits in F64 and then shifted per the case.
  const double shift = c.lse == Lse::kVisual ? 0 : c.lse == Lse::kTextHeavy ? 40 : 95;
  std::vector<float> lse(size_t(H) * lse_stride, std::nanf(""));  // padding must not be read
  for (int h = 0; h < H; ++h) {
    const int g = h / (H / KVH);
    for (int j = 0; j < c.n_text; ++j) {
      std::vector<double> s(c.n_vis);
      double mx = -1e300, z = 0;
      for (int i = 0; i < c.n_vis; ++i) {
        double dot = 0;
        for (int d = 0; d < hd; ++d) {
          dot += double{q[j * q_stride + h * hd + d]} * k[i * k_stride + g * hd + d];
        }
        mx = std::max(mx, s[i] = scale * dot);
      }
      for (double x : s) z += std::exp(x - mx);
      lse[h * lse_stride + j] = static_cast<float>(mx + std::log(z) + shift);
    }
  }

  const size_t out_n = size_t(H) * c.n_text * c.n_vis, ent_n = size_t(H) * c.n_text;
  Guarded<float> ref(out_n), fast(out_n);
  Guarded<double> ref_ent(ent_n), fast_ent(ent_n);
  kernels::TextVisualAttentionArgs a = testing_support::TextVisualRows(
      q.data(), k.data(), lse.data(), c.n_text, c.n_vis, H, KVH, hd, scale, ref.data());
  a.q_stride = q_stride;
  a.k_stride = k_stride;
  a.lse_stride = lse_stride;
  a.renormalize = c.renormalize;
  a.row_entropy = c.renormalize ? ref_ent.data() : nullptr;
  EXPECT_TRUE(kernels::TextVisualAttentionReference(a).ok()) << Name(c);
  a.out = fast.data();
  a.row_entropy = c.renormalize ? fast_ent.data() : nullptr;
  const absl::Status st = kernels::TextVisualAttention(a);
  EXPECT_TRUE(st.ok()) << Name(c) << ": " << st;

  testref::ParityOutcome o;
  o.guards_intact = ref.Intact() && fast.Intact() && ref_ent.Intact() && fast_ent.Intact();
  for (size_t e = 0; e < out_n; ++e) o.Add(fast[e], ref[e], 1e-30, rtol);
  if (c.renormalize) {
    for (size_t e = 0; e < ent_n; ++e) o.Add(fast_ent[e], ref_ent[e], 1e-6, rtol);
    // PAQ of every head: the production path (fast maps + fast entropies) against the
    // definition on the reference maps.
    std::vector<float> paq_ref(H), paq_fast(H), paq_maps(H);
    EXPECT_TRUE(kernels::PaqReference(ref.data(), H, c.n_text, c.n_vis, paq_ref.data()).ok());
    EXPECT_TRUE(kernels::PaqFromRowEntropies(fast.data(), fast_ent.data(), H, c.n_text, c.n_vis,
                                             paq_fast.data())
                    .ok());
    EXPECT_TRUE(kernels::Paq(fast.data(), H, c.n_text, c.n_vis, paq_maps.data()).ok());
    for (int h = 0; h < H; ++h) {
      o.Add(paq_fast[h], paq_ref[h], 1e-6, rtol);
      o.Add(paq_maps[h], paq_ref[h], 1e-6, rtol);
    }
  }
  return o;
}

TEST(FastPathParity, TextVisualAttentionAndPaq) {
  testref::ParityTally tally;
  uint64_t seed = 500;
  const std::vector<RowsCase> cases = RowsCases();
  for (const RowsCase& c : cases) tally.Check(Name(c), RunRowsCase(c, seed += 2));
  std::printf("fast paths: %d/%zu cases within tolerance; worst err/tol %.3f in %s\n", tally.passed,
              cases.size(), tally.worst_ratio, tally.worst_case.c_str());
  EXPECT_EQ(tally.passed, static_cast<int>(cases.size()));
}

TEST(FastPathParity, UnderflowGivesZeroNotGarbage) {
  // Raw weights e^(s − LSE) below F32's normal range: the reference may return subnormals, the
  // fast path returns exactly 0; both are "no mass" and neither may be NaN or negative.
  const RowsCase c{4, 50, 2, 1, 8, 0, 0, 0, 1.f, false, Lse::kUnderflow};
  const testref::ParityOutcome o = RunRowsCase(c, 77);
  EXPECT_TRUE(o.finite);
  EXPECT_LE(o.worst_abs, 1e-30);
}

TEST(FastPathParity, PaqOfHandMadeMaps) {
  // Maps with exact zeros, one-hot rows, a column nobody attends, subnormal entries and rows
  // summing to 1 only within the tolerance: Paq against PaqReference.
  struct MapCase {
    std::string name;
    int n_text, n_vis;
    std::vector<float> map;
  };
  const float sub = 1e-40f;  // subnormal
  const std::vector<MapCase> cases = {
      {"one-hot distinct", 3, 4, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}},
      {"sink", 2, 3, {0, 1, 0, 0, 1, 0}},
      {"subnormals", 2, 3, {sub, 0.5f, 0.5f, 0.25f, sub, 0.75f}},
      {"sum off by 5e-4", 2, 2, {0.6f, 0.4005f, 0.3f, 0.7f}},
      {"uniform", 2, 9, std::vector<float>(18, 1.f / 9)},
  };
  for (const MapCase& m : cases) {
    float ref = -1, fast = -1;
    ASSERT_TRUE(kernels::PaqReference(m.map.data(), 1, m.n_text, m.n_vis, &ref).ok()) << m.name;
    ASSERT_TRUE(kernels::Paq(m.map.data(), 1, m.n_text, m.n_vis, &fast).ok()) << m.name;
    EXPECT_NEAR(fast, ref, 1e-6 + 1e-5 * std::abs(ref)) << m.name;
  }
}

TEST(FastPathParity, PaqRejectsWhatTheReferenceRejects) {
  // The fast path defers bad input to the reference, so the message names the same entry.
  const float nan = std::nanf(""), inf = INFINITY;
  // Row 0 is valid (−0 passes, as it does a ≥ 0); row 1 is not.
  const std::vector<std::vector<float>> bad = {
      {0.25f, -0.f, 0.75f, 0.f, 1.5f, -0.5f},  // negative entry
      {0.25f, -0.f, 0.75f, 0.5f, nan, 0.5f},   // NaN
      {0.25f, -0.f, 0.75f, inf, 0.f, 0.f},     // +inf
      {0.25f, -0.f, 0.75f, 0.3f, 0.3f, 0.3f},  // row sum 0.9
  };
  for (const auto& map : bad) {
    float ref = -1, fast = -1;
    const double ent[2] = {0.5, 0.5};
    const absl::Status r = kernels::PaqReference(map.data(), 1, 2, 3, &ref);
    const absl::Status f = kernels::Paq(map.data(), 1, 2, 3, &fast);
    const absl::Status e = kernels::PaqFromRowEntropies(map.data(), ent, 1, 2, 3, &fast);
    EXPECT_EQ(r.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(f, r);
    EXPECT_EQ(e, r);
  }
  const std::vector<float> ok = {0.5f, 0.5f, 0.f, 1.f};
  const double bad_ent[2] = {0.69, std::nan("")};
  float out;
  EXPECT_EQ(kernels::PaqFromRowEntropies(ok.data(), bad_ent, 1, 2, 2, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels::PaqFromRowEntropies(ok.data(), nullptr, 1, 2, 2, &out).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FastPathParity, WeightedSumIsBitIdenticalToTheDefinition) {
  // Odd sizes around the 1024-element block, 1 to 17 maps, maps in separate buffers.
  uint64_t seed = 900;
  for (int64_t size : {1, 7, 1023, 1024, 1025, 5000}) {
    for (int n_maps : {1, 2, 16, 17}) {
      SCOPED_TRACE(testing::Message() << "size " << size << " maps " << n_maps);
      std::vector<std::vector<float>> maps;
      std::vector<const float*> ptrs;
      for (int c = 0; c < n_maps; ++c) maps.push_back(testref::RandomNormal(size, ++seed));
      for (const auto& m : maps) ptrs.push_back(m.data());
      const std::vector<float> w = testref::RandomNormal(n_maps, ++seed);
      Guarded<float> out(size);
      ASSERT_TRUE(kernels::WeightedSumMaps(ptrs.data(), w.data(), n_maps, size, out.data()).ok());
      EXPECT_TRUE(out.Intact());
      int64_t mismatches = 0;
      for (int64_t e = 0; e < size; ++e) {
        double acc = 0.0;
        for (int c = 0; c < n_maps; ++c) acc += double{w[c]} * maps[c][e];
        mismatches +=
            std::bit_cast<uint32_t>(static_cast<float>(acc)) != std::bit_cast<uint32_t>(out[e]);
      }
      EXPECT_EQ(mismatches, 0);
    }
  }
}

TEST(FastPathParity, RowEntropiesNeedRenormalize) {
  std::vector<float> buf(16, 0.1f);
  std::vector<double> ent(4);
  kernels::TextVisualAttentionArgs a = testing_support::TextVisualRows(
      buf.data(), buf.data(), buf.data(), /*n_text=*/1, /*n_vis=*/1, /*heads=*/1, /*kv_heads=*/1,
      /*hd=*/2, /*scale=*/1.f, buf.data());
  a.renormalize = false;
  a.row_entropy = ent.data();
  EXPECT_EQ(kernels::TextVisualAttention(a).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels::TextVisualAttentionReference(a).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hap
