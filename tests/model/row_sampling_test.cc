// Sampling where the logits are (runtime/model/row_sampling.h): on the CPU backend and on the CUDA
// backend (SIMT emulation), SampleRows gives every row exactly the token Sampler::Sample draws
// from the whole row, with the same seed, for greedy, top-k, top-p and full-distribution
// sampling, ties, −inf/+inf and NaN logits; the random streams stay in step; a device sends back
// candidates rather than rows except where the candidates cannot decide (top_k between 256 and
// the vocabulary, NaN rows, a boundary within the rounding bound). Sampler::FromTop defers to the
// row exactly at such boundaries and never answers differently from it.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "runtime/model/row_sampling.h"
#include "runtime/model/sampler.h"

namespace hap {
namespace {

enum class Shape { kPeaked, kFlat, kTies, kInf, kNan };
const char* kShapeNames[] = {"peaked", "flat", "ties", "inf", "nan"};

// One row of logits: peaked (an LLM's spread), flat (nearly uniform: the nucleus is wide), ties
// (8 levels), with −inf and +inf entries, or with NaNs.
std::vector<float> Row(int vocab, Shape shape, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(vocab);
  for (float& v : x) v = normal(rng);
  for (int i = 0; i < vocab; ++i) {
    switch (shape) {
      case Shape::kPeaked:
        x[i] *= 4.f;
        break;
      case Shape::kFlat:
        x[i] *= 0.01f;
        break;
      case Shape::kTies:
        x[i] = std::floor(x[i] * 2.f);
        break;
      case Shape::kInf:
        if (i % 5 == 1) x[i] = -INFINITY;
        if (i == vocab / 2) x[i] = INFINITY;
        break;
      case Shape::kNan:
        if (i % 11 == 3) x[i] = NAN;
        break;
    }
  }
  return x;
}

std::vector<SamplingParams> AllParams() {
  std::vector<SamplingParams> all;
  uint64_t seed = 1;
  for (float t : {0.f, 0.3f, 1.f, 1.7f}) {  // 0: greedy
    for (int k : {0, 1, 5, 40, 256, 257, 100000}) {
      for (float p : {0.05f, 0.5f, 0.9f, 1.f}) {
        if (t == 0.f && (k != 0 || p != 1.f)) continue;  // greedy ignores them
        all.push_back({t, p, k, seed++});
      }
    }
  }
  return all;
}

class RowSamplingTest : public ::testing::TestWithParam<const Backend*> {
 protected:
  const Backend& b() const { return *GetParam(); }
};

// Many rows at once (each with its own sampler), several steps: SampleRows against Sample.
TEST_P(RowSamplingTest, EveryRowGetsTheTokenSampleDrawsFromTheWholeRow) {
  const std::vector<SamplingParams> params = AllParams();
  const int rows = static_cast<int>(params.size());
  for (int vocab : {1, 7, 300, 1001}) {
    for (Shape shape : {Shape::kPeaked, Shape::kFlat, Shape::kTies, Shape::kInf, Shape::kNan}) {
      SCOPED_TRACE(std::string(kShapeNames[static_cast<int>(shape)]) + " vocab " +
                   std::to_string(vocab));
      std::vector<Sampler> on_row, on_backend;
      std::vector<Sampler*> pointers;
      for (const SamplingParams& p : params) {
        on_row.emplace_back(p);
        on_backend.emplace_back(p);
      }
      for (Sampler& s : on_backend) pointers.push_back(&s);
      std::mt19937 rng(vocab * 10 + static_cast<int>(shape));
      RowSamplingCounts total;
      constexpr int kSteps = 2;
      for (int step = 0; step < kSteps; ++step) {
        std::vector<float> logits;
        for (int r = 0; r < rows; ++r) {
          const std::vector<float> row = Row(vocab, shape, rng);
          logits.insert(logits.end(), row.begin(), row.end());
        }
        BackendArray<float> on(b());
        ASSERT_TRUE(on.Assign(logits.data(), logits.size()).ok());
        RowSamplingCounts counts;
        auto got = SampleRows(b(), on.data(), rows, vocab, pointers, &counts);
        ASSERT_TRUE(got.ok()) << got.status();
        for (int r = 0; r < rows; ++r) {
          const int32_t want = on_row[r].Sample(logits.data() + int64_t{r} * vocab, vocab);
          const SamplingParams& p = params[r];
          EXPECT_EQ((*got)[r], want) << "row " << r << ": T " << p.temperature << " top_k "
                                     << p.top_k << " top_p " << p.top_p << ", step " << step;
        }
        EXPECT_EQ(counts.argmax + counts.top + counts.full_rows, rows);
        total.argmax += counts.argmax;
        total.top += counts.top;
        total.full_rows += counts.full_rows;
      }
      // The streams stayed in step: each sampler drew exactly as often as Sample did.
      for (int r = 0; r < rows; ++r) EXPECT_EQ(on_backend[r].Draw(), on_row[r].Draw()) << r;
      // Where candidates must do: the greedy rows by their ids; with NaNs only rows come back;
      // else a row comes back only for top_k in (256, vocab) or near a boundary.
      int greedy = 0, row_bound = 0;
      for (const SamplingParams& p : params) {
        greedy += p.temperature == 0.f;
        const int top = p.top_k > 0 ? std::min(p.top_k, vocab) : vocab;
        row_bound += p.temperature > 0.f && top > kMaxTopLogits && top < vocab;
      }
      EXPECT_EQ(total.argmax, kSteps * greedy);
      if (shape == Shape::kNan && vocab > 3) {
        EXPECT_EQ(total.full_rows, kSteps * (rows - greedy));
      } else if (shape != Shape::kNan) {
        EXPECT_GE(total.full_rows, kSteps * row_bound);
      }
      if (shape == Shape::kPeaked || (shape != Shape::kNan && vocab <= kMaxTopLogits)) {
        // Up to 256 tokens the candidates are the whole top-k set: never a row. Peaked rows: the
        // nucleus and the draw stay within the top 256 nearly always.
        EXPECT_LE(total.full_rows,
                  kSteps * row_bound + (vocab > kMaxTopLogits ? kSteps * rows / 10 : 0));
      }
    }
  }
}

// A mixed batch where every row is greedy but one: the greedy rows' logits are gathered for the
// argmax, the other's for the candidates.
TEST_P(RowSamplingTest, MixedBatchesAndBadArguments) {
  const int vocab = 600;
  std::mt19937 rng(5);
  std::vector<float> logits;
  for (int r = 0; r < 3; ++r) {
    const std::vector<float> row = Row(vocab, Shape::kPeaked, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  BackendArray<float> on(b());
  ASSERT_TRUE(on.Assign(logits.data(), logits.size()).ok());
  Sampler g1{SamplingParams{}}, g2{SamplingParams{}}, s{SamplingParams{0.9f, 0.8f, 0, 77}};
  Sampler ref{SamplingParams{0.9f, 0.8f, 0, 77}};
  RowSamplingCounts counts;
  auto got = SampleRows(b(), on.data(), 3, vocab, {&g1, &s, &g2}, &counts);
  ASSERT_TRUE(got.ok()) << got.status();
  for (int r : {0, 2}) {
    const float* row = logits.data() + r * vocab;
    EXPECT_EQ((*got)[r], std::max_element(row, row + vocab) - row);
  }
  EXPECT_EQ((*got)[1], ref.Sample(logits.data() + vocab, vocab));
  EXPECT_EQ(counts.argmax, 2);
  EXPECT_EQ(counts.top + counts.full_rows, 1);
  EXPECT_EQ(SampleRows(b(), on.data(), 3, vocab, {&g1, &s}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SampleRows(b(), on.data(), 3, vocab, {&g1, nullptr, &g2}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, RowSamplingTest,
                         ::testing::Values(&CpuBackend(), *GetCudaBackend()),
                         [](const ::testing::TestParamInfo<const Backend*>& info) {
                           return std::string(info.param->name());
                         });

// The top `count` of a row in the sampler's order, and the row's F64 denominator summed in id
// order (as a device would not: another order than the sampler's).
struct Top {
  std::vector<float> values;
  std::vector<int32_t> ids;
  double row_sum = 0;
};
Top TopOf(const std::vector<float>& x, int count, float temperature) {
  std::vector<int> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b]; });
  Top t;
  for (int c = 0; c < count; ++c) {
    t.values.push_back(x[order[c]]);
    t.ids.push_back(order[c]);
  }
  for (float v : x) t.row_sum += std::exp((v - double{t.values[0]}) / temperature);
  return t;
}

// Where the nucleus cut or the draw falls on a boundary, the candidates do not decide: FromTop
// says so (−1) and SampleRow answers.
TEST(SamplerFromTop, DefersAtBoundariesItCannotDecide) {
  const int vocab = 1000;
  // Two equal maxima and the rest far below: p = (1, 1, ~0, ...), the first holds half the mass.
  std::vector<float> x(vocab, -200.f);
  x[10] = x[20] = 3.f;
  // top_p 0.5: the cumulative mass reaches exactly 0.5 at the first candidate.
  Sampler nucleus{SamplingParams{1.f, 0.5f, 0, 1}};
  const Top t = TopOf(x, 256, 1.f);
  EXPECT_EQ(nucleus.FromTop(t.values.data(), t.ids.data(), 256, vocab, t.row_sum, 0.3), -1);
  EXPECT_EQ(nucleus.SampleRow(x.data(), vocab, 0.3), 10);
  // top_p 1: a draw landing exactly between the two is left to the row; clear draws are not.
  Sampler full{SamplingParams{1.f, 1.f, 0, 1}};
  const double half = 0.5;  // the tail's mass is below the last bit of 2
  EXPECT_EQ(full.FromTop(t.values.data(), t.ids.data(), 256, vocab, t.row_sum, half), -1);
  EXPECT_EQ(full.FromTop(t.values.data(), t.ids.data(), 256, vocab, t.row_sum, 0.25), 10);
  EXPECT_EQ(full.FromTop(t.values.data(), t.ids.data(), 256, vocab, t.row_sum, 0.75), 20);
  // A draw into the tail beyond the candidates (all equal: 256 of 1000 carry a quarter).
  std::vector<float> flat(vocab, 0.f);
  const Top f = TopOf(flat, 256, 1.f);
  EXPECT_EQ(full.FromTop(f.values.data(), f.ids.data(), 256, vocab, f.row_sum, 0.2005), 200);
  EXPECT_EQ(full.SampleRow(flat.data(), vocab, 0.2005), 200);
  // ... but not one landing exactly on a boundary between two candidates.
  EXPECT_EQ(full.FromTop(f.values.data(), f.ids.data(), 256, vocab, f.row_sum, 0.2), -1);
  EXPECT_EQ(full.FromTop(f.values.data(), f.ids.data(), 256, vocab, f.row_sum, 0.5), -1);
  EXPECT_EQ(full.SampleRow(flat.data(), vocab, 0.5), 500);
  // A nucleus wider than the candidates.
  Sampler wide{SamplingParams{1.f, 0.9f, 0, 1}};
  EXPECT_EQ(wide.FromTop(f.values.data(), f.ids.data(), 256, vocab, f.row_sum, 0.1), -1);
  // No usable denominator (a +inf logit makes it NaN).
  EXPECT_EQ(full.FromTop(t.values.data(), t.ids.data(), 256, vocab, NAN, 0.25), -1);
  // What the sampler asks for.
  EXPECT_EQ(Sampler(SamplingParams{}).Needs(vocab), Sampler::Need::kArgMax);
  EXPECT_EQ(Sampler(SamplingParams{1.f, 1.f, 256, 1}).Needs(vocab), Sampler::Need::kTop);
  EXPECT_EQ(Sampler(SamplingParams{1.f, 1.f, 257, 1}).Needs(vocab), Sampler::Need::kRow);
  EXPECT_EQ(Sampler(SamplingParams{1.f, 1.f, 257, 1}).Needs(257), Sampler::Need::kTop);
  EXPECT_EQ(Sampler(SamplingParams{1.f, 1.f, 0, 1}).TopCount(vocab), kMaxTopLogits);
  EXPECT_EQ(Sampler(SamplingParams{1.f, 1.f, 40, 1}).TopCount(vocab), 40);
  EXPECT_EQ(Sampler(SamplingParams{1.f, 1.f, 0, 1}).TopCount(100), 100);
}

// A denominator off by up to 4 times the rounding bound never changes an answer: FromTop answers
// as SampleRow does or defers. On peaked rows (the top 256 of 32000 hold ~98.5% of the mass at
// T = 0.8) it rarely defers where the nucleus fits in the candidates (top_p 0.3, 0.9) or the
// draw covers the row (top_p 1); top_p 0.99 reaches past them about half the time.
TEST(SamplerFromTop, NeverAnswersDifferentlyFromTheRow) {
  const int vocab = 32000;
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int decided_peaked = 0, trials_peaked = 0;
  for (int trial = 0; trial < 18; ++trial) {
    const bool peaked = trial % 3 != 0;
    const std::vector<float> x = Row(vocab, peaked ? Shape::kPeaked : Shape::kTies, rng);
    for (float top_p : {0.3f, 0.9f, 0.99f, 1.f}) {
      const SamplingParams p{0.8f, top_p, 0, 1};
      Sampler s(p);
      const Top t = TopOf(x, kMaxTopLogits, p.temperature);
      for (double scale : {1.0, 1.0 + 4 * vocab * 0x1p-53, 1.0 - 4 * vocab * 0x1p-53}) {
        for (int d = 0; d < 4; ++d) {
          const double draw = uniform(rng);
          const int32_t row = s.SampleRow(x.data(), vocab, draw);
          const int32_t got = s.FromTop(t.values.data(), t.ids.data(), kMaxTopLogits, vocab,
                                        t.row_sum * scale, draw);
          const bool counted = peaked && top_p != 0.99f;
          trials_peaked += counted;
          if (got < 0) continue;
          decided_peaked += counted;
          ASSERT_EQ(got, row) << "trial " << trial << " top_p " << top_p << " draw " << draw;
        }
      }
    }
  }
  EXPECT_GT(decided_peaked, trials_peaked * 95 / 100) << decided_peaked << " of " << trials_peaked;
}

}  // namespace
}  // namespace hap
