// Parity rows: the sampling kernels against kernels/cpu/sampling.h — the greedy argmax against
// std::max_element, and the top-k candidates with their softmax denominators against the
// sampler's partial sort. Ids and candidate values are compared exactly (byte for byte: the
// values are copies of logits, −0 included); the F64 denominators with kSumTol.
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "kernels/cuda/argmax.h"
#include "kernels/cuda/parity/rows.h"
#include "kernels/cuda/top_logits.h"

namespace hap::cuda::parity {
namespace {

// Σ_i exp((x_i − max)/T) over up to 32001 terms, each ≥ 0, summed in index order by the
// reference and in a block tree by the kernel: the sums differ by at most n·2⁻⁵³ relative
// (3.6e-12 at n = 32001), plus 1 ulp per exp on a GPU.
constexpr Tolerance kSumTol{1e-12, 1e-10};

std::string Str(int64_t v) { return std::to_string(v); }

enum class Logits { kRandom, kTies, kAllEqual, kSpecial, kNan };
const char* kLogitNames[] = {"random", "ties", "all equal", "special", "NaN"};

// kTies: 4 levels of [-8, 8), so the k-th largest value's copies straddle the cut; kSpecial:
// ±0 (one value to the sampler's ==), ±inf, the smallest subnormals and the largest floats among
// 32 levels; kNan: every other row holds NaNs (at element 0, the last and a few between), the
// rest are random; kRandom, kAllEqual as named.
std::vector<float> MakeLogits(int rows, int n, Logits kind, uint64_t seed) {
  std::vector<float> x = RandomFloats(int64_t{rows} * n, seed, -8.f, 8.f);
  for (int64_t e = 0; e < static_cast<int64_t>(x.size()); ++e) {
    const int i = static_cast<int>(e % n);
    const int r = static_cast<int>(e / n);
    switch (kind) {
      case Logits::kRandom:
        break;
      case Logits::kTies:
        x[e] = std::floor(x[e] / 4.f);
        break;
      case Logits::kAllEqual:
        x[e] = 0.5f;
        break;
      case Logits::kSpecial:
        x[e] = i % 5 == 0 ? kSpecialFloats[(i / 5 + r) % 8] : std::floor(x[e] * 2.f) / 2.f;
        break;
      case Logits::kNan:
        if (r % 2 == 0 && (i == 0 || i == n - 1 || i % 97 == 13)) x[e] = NAN;
        break;
    }
  }
  return x;
}

CaseResult ArgMaxCase(int rows, int n, Logits kind) {
  std::vector<float> x = MakeLogits(rows, n, kind, 1100 + rows + n);
  if (kind == Logits::kNan) {
    // Also: a row of NaN and −inf only, and a row whose only NaN is element 0 (which
    // std::max_element keeps) — the last two rows.
    for (int i = 0; i < n; ++i) x[int64_t{rows - 1} * n + i] = i % 2 ? NAN : -INFINITY;
    if (rows > 1) {
      float* row = x.data() + int64_t{rows - 2} * n;
      for (int i = 0; i < n; ++i) row[i] = std::isnan(row[i]) ? 1.f : row[i];
      row[0] = NAN;
    }
  }
  std::vector<int32_t> want(rows);
  Checker c;
  if (!c.Reference(cpu::ArgMaxRows(x.data(), rows, n, want.data()))) return c.Result(0);
  DeviceBuffer dx = DeviceBuffer::Of(x), dout(rows * sizeof(int));
  KernelStatus st;
  const double ms =
      TimedMs([&] { return ArgMaxRows(dx.as<float>(), rows, n, dout.as<int>(), nullptr); }, &st);
  c.Status(st);
  c.Exact("out", dout, want.data());
  c.Unchanged("logits", dx, x.data());
  return c.Result(ms);
}

// Row sums (F64, device) against the reference's: a NaN or inf the reference has (a NaN or +inf
// logit) must be there too; finite ones within kSumTol, the worst folded into *worst.
void OutputSums(Checker& c, const DeviceBuffer& got, const std::vector<double>& want,
                double* worst) {
  c.Guards("row_sum", got);
  const std::vector<double> host = got.Download<double>();
  for (size_t r = 0; r < want.size(); ++r) {
    if (!std::isfinite(want[r])) {
      const bool same = std::isnan(want[r]) ? std::isnan(host[r]) : host[r] == want[r];
      if (!same) c.Fail("row_sum[" + Str(r) + "] = " + std::to_string(host[r]) + ", want " +
                        std::to_string(want[r]));
      continue;
    }
    if (!std::isfinite(host[r])) {
      c.Fail("row_sum[" + Str(r) + "] is not finite");
      *worst = INFINITY;
      continue;
    }
    const double err =
        std::fabs(host[r] - want[r]) / (kSumTol.atol + kSumTol.rtol * std::fabs(want[r]));
    *worst = std::max(*worst, err);
    if (err > 1.0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "row_sum[%zu]: got %.17g, reference %.17g", r, host[r],
                    want[r]);
      c.Fail(buf);
    }
  }
}

CaseResult TopLogitsCase(int rows, int n, int k, Logits kind, bool with_temperature) {
  const std::vector<float> x = MakeLogits(rows, n, kind, 1700 + rows * 7 + n + k);
  // Temperatures as requests set them, and 0 (a greedy row among sampled ones: no sum).
  std::vector<float> temperature(rows);
  for (int r = 0; r < rows; ++r) temperature[r] = (r % 4 == 3) ? 0.f : 0.4f + 0.3f * (r % 4);
  const size_t pairs = static_cast<size_t>(rows) * k;
  std::vector<float> want_values(pairs);
  std::vector<int32_t> want_ids(pairs);
  std::vector<double> want_sums(rows);
  TopLogitsArgs a;
  a.logits = x.data();
  a.rows = rows;
  a.n = n;
  a.k = k;
  a.temperature = with_temperature ? temperature.data() : nullptr;
  a.values = want_values.data();
  a.ids = want_ids.data();
  a.row_sum = want_sums.data();
  Checker c;
  if (!c.Reference(cpu::TopLogits(a))) return c.Result(0);

  DeviceBuffer dx = DeviceBuffer::Of(x), dt = DeviceBuffer::Of(temperature);
  DeviceBuffer dv(pairs * sizeof(float)), di(pairs * sizeof(int)), ds(rows * sizeof(double));
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return TopLogits(dx.as<float>(), rows, n, k, with_temperature ? dt.as<float>() : nullptr,
                         dv.as<float>(), di.as<int>(), with_temperature ? ds.as<double>() : nullptr,
                         nullptr);
      },
      &st);
  c.Status(st);
  c.Exact("ids", di, want_ids.data());
  // Values: bit for bit, except the NaN rows', which are NaN of any payload.
  c.Guards("values", dv);
  const std::vector<float> values = dv.Download<float>();
  for (size_t e = 0; e < pairs; ++e) {
    const bool nan_row = want_ids[e - e % k] < 0;
    const bool same = nan_row ? std::isnan(values[e])
                              : std::memcmp(&values[e], &want_values[e], sizeof(float)) == 0;
    if (!same) {
      c.Fail("values[" + Str(e) + "] = " + std::to_string(values[e]) + ", want " +
             std::to_string(want_values[e]));
      break;
    }
  }
  double worst = 0;
  if (with_temperature) {
    OutputSums(c, ds, want_sums, &worst);
  } else {
    // Without temperatures the kernel writes no sums: the buffer stays as allocated.
    std::vector<unsigned char> untouched(rows * sizeof(double), 0xFF);
    c.Unchanged("row_sum (not requested)", ds, untouched.data());
  }
  c.Unchanged("logits", dx, x.data());
  c.Unchanged("temperature", dt, temperature.data());
  CaseResult r = c.Result(ms);
  r.worst = std::max(r.worst, worst);
  return r;
}

// The entry points' argument checks: each call must fail before it launches anything.
CaseResult RejectsBadArgumentsCase() {
  DeviceBuffer buf(8192);
  float* f = buf.as<float>();
  int* i = buf.as<int>();
  double* d = buf.as<double>() + 512;
  Checker c;
  auto expect_error = [&](const char* what, const KernelStatus& st) {
    if (st.ok) c.Fail(std::string(what) + " was accepted");
  };
  expect_error("ArgMaxRows n 0", ArgMaxRows(f, 1, 0, i, nullptr));
  expect_error("ArgMaxRows rows -1", ArgMaxRows(f, -1, 4, i, nullptr));
  expect_error("TopLogits k 0", TopLogits(f, 1, 8, 0, nullptr, f, i, nullptr, nullptr));
  expect_error("TopLogits k > n", TopLogits(f, 1, 8, 9, nullptr, f, i, nullptr, nullptr));
  expect_error("TopLogits k 257", TopLogits(f, 1, 1000, 257, nullptr, f, i, nullptr, nullptr));
  expect_error("TopLogits temperature without row_sum",
               TopLogits(f, 1, 8, 2, f, f, i, nullptr, nullptr));
  expect_error("TopLogits null ids", TopLogits(f, 1, 8, 2, nullptr, f, nullptr, d, nullptr));
  return c.Result(0);
}

}  // namespace

void AddSamplingCases(std::vector<Case>& cases) {
  for (auto [rows, n, kind] : {std::tuple{3, 32000, Logits::kRandom},
                               {5, 7, Logits::kTies},
                               {2, 1000, Logits::kTies},
                               {3, 1001, Logits::kNan},
                               {2, 1, Logits::kRandom},
                               {4, 65, Logits::kSpecial}}) {
    cases.push_back({"ArgMaxRows " + Str(rows) + "x" + Str(n) + " " +
                         kLogitNames[static_cast<int>(kind)],
                     {"ArgMaxRowsKernel"},
                     [=] { return ArgMaxCase(rows, n, kind); }});
  }

  // rows, n, k, logits, temperatures (row sums).
  for (auto [rows, n, k, kind, temps] : {std::tuple{2, 32000, 256, Logits::kRandom, true},
                                         {3, 32001, 40, Logits::kTies, true},
                                         {1, 1, 1, Logits::kRandom, true},
                                         {3, 7, 7, Logits::kTies, false},
                                         {2, 33, 5, Logits::kRandom, true},
                                         {4, 1000, 64, Logits::kSpecial, true},
                                         {2, 1025, 256, Logits::kTies, false},
                                         {2, 300, 256, Logits::kAllEqual, true},
                                         {5, 100, 100, Logits::kRandom, false},
                                         {4, 4097, 1, Logits::kTies, true},
                                         {4, 577, 50, Logits::kNan, true},
                                         {1, 9973, 256, Logits::kSpecial, false}}) {
    cases.push_back({"TopLogits " + Str(rows) + "x" + Str(n) + " k" + Str(k) + " " +
                         kLogitNames[static_cast<int>(kind)] + (temps ? " +sums" : ""),
                     {"TopLogitsKernel"},
                     [=] { return TopLogitsCase(rows, n, k, kind, temps); }});
  }
  cases.push_back(
      {"Sampling entry points reject bad arguments", {}, [] { return RejectsBadArgumentsCase(); }});
}

}  // namespace hap::cuda::parity
