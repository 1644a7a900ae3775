// Parity rows: RMSNorm and LayerNorm against kernels/cpu/norm.h.
#include <string>

#include "kernels/cpu/norm.h"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/parity/rows.h"
#include "kernels/cuda/rms_norm.h"

namespace hap::cuda::parity {
namespace {

CaseResult RmsNormCase(int rows, int d, bool in_place) {
  const std::vector<float> x = RandomFloats(int64_t{rows} * d, 11 + d);
  const std::vector<float> w = RandomFloats(d, 12 + d, 0.5f, 1.5f);
  std::vector<float> want(x.size());
  const float eps = 1e-5f;
  (void)cpu::RmsNorm(x.data(), w.data(), want.data(), rows, d, eps);
  DeviceBuffer dx = DeviceBuffer::Of(x), dw = DeviceBuffer::Of(w), dy(x.size() * sizeof(float));
  float* out = in_place ? dx.as<float>() : dy.as<float>();
  Checker c;
  KernelStatus st;
  const double ms =
      TimedMs([&] { return RmsNorm(dx.as<float>(), dw.as<float>(), out, rows, d, eps, nullptr); },
              &st);
  c.Status(st);
  c.Output("y", in_place ? dx : dy, want, kF32Tol);
  c.Unchanged("w", dw, w.data());
  if (!in_place) c.Unchanged("x", dx, x.data());
  return c.Result(ms);
}

CaseResult LayerNormCase(int rows, int d, bool in_place) {
  // An offset mean, as activations have: the two-pass variance must not lose it.
  const std::vector<float> x = RandomFloats(int64_t{rows} * d, 21 + d, 2.f, 4.f);
  const std::vector<float> w = RandomFloats(d, 22 + d, 0.5f, 1.5f);
  const std::vector<float> b = RandomFloats(d, 23 + d);
  std::vector<float> want(x.size());
  const float eps = 1e-5f;
  (void)cpu::LayerNorm(x.data(), w.data(), b.data(), want.data(), rows, d, eps);
  DeviceBuffer dx = DeviceBuffer::Of(x), dw = DeviceBuffer::Of(w), db = DeviceBuffer::Of(b);
  DeviceBuffer dy(x.size() * sizeof(float));
  float* out = in_place ? dx.as<float>() : dy.as<float>();
  Checker c;
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return LayerNorm(dx.as<float>(), dw.as<float>(), db.as<float>(), out, rows, d, eps,
                         nullptr);
      },
      &st);
  c.Status(st);
  // The centred values are (x − mean) with |mean| ≈ 3 and F32 sums in another order: the
  // normalised values carry about 1e-6 of that offset's rounding.
  c.Output("y", in_place ? dx : dy, want, {1e-4, 1e-4});
  c.Unchanged("w", dw, w.data());
  c.Unchanged("b", db, b.data());
  if (!in_place) c.Unchanged("x", dx, x.data());
  return c.Result(ms);
}

}  // namespace

void AddNormCases(std::vector<Case>& cases) {
  for (auto [rows, d, in_place] : {std::tuple{1, 64, false}, {7, 1000, false}, {33, 4096, true},
                                   {3, 31, false}, {2, 5120, false}}) {
    cases.push_back({"RmsNorm " + std::to_string(rows) + "x" + std::to_string(d) +
                         (in_place ? " in place" : ""),
                     {"RmsNormKernel"},
                     [=] { return RmsNormCase(rows, d, in_place); }});
  }
  for (auto [rows, d, in_place] : {std::tuple{1, 64, false}, {5, 1000, true}, {9, 1025, false},
                                   {3, 1, false}}) {
    cases.push_back({"LayerNorm " + std::to_string(rows) + "x" + std::to_string(d) +
                         (in_place ? " in place" : ""),
                     {"LayerNormKernel"},
                     [=] { return LayerNormCase(rows, d, in_place); }});
  }
}

}  // namespace hap::cuda::parity
