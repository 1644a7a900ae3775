// Parity rows: RMSNorm and LayerNorm against kernels/cpu/norm.h.
#include <string>

#include "base/dtype.h"
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
  Checker c;
  if (!c.Reference(cpu::RmsNorm(x.data(), w.data(), want.data(), rows, d, eps))) {
    return c.Result(0);
  }
  DeviceBuffer dx = DeviceBuffer::Of(x), dw = DeviceBuffer::Of(w), dy(x.size() * sizeof(float));
  float* out = in_place ? dx.as<float>() : dy.as<float>();
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

// RmsNormRounded: its F32 rows as RmsNorm's, and its narrow rows exactly those rows rounded
// (what the products that read them would have rounded themselves), so a planned step that
// fuses the rounding into the norm gives the op-by-op step's bits.
CaseResult RmsNormRoundedCase(int rows, int d, ElemType type) {
  const std::vector<float> x = RandomFloats(int64_t{rows} * d, 31 + d);
  const std::vector<float> w = RandomFloats(d, 32 + d, 0.5f, 1.5f);
  std::vector<float> want(x.size());
  const float eps = 1e-5f;
  Checker c;
  if (absl::Status s = cpu::RmsNorm(x.data(), w.data(), want.data(), rows, d, eps); !s.ok()) {
    c.Fail("the CPU reference failed: " + std::string(s.message()));
    return c.Result(0);
  }
  DeviceBuffer dx = DeviceBuffer::Of(x), dw = DeviceBuffer::Of(w), dy(x.size() * sizeof(float));
  DeviceBuffer dn(x.size() * sizeof(uint16_t));
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return RmsNormRounded(dx.as<float>(), dw.as<float>(), dy.as<float>(), type, dn.data(), rows,
                              d, eps, nullptr);
      },
      &st);
  c.Status(st);
  c.Output("y", dy, want, kF32Tol);
  const DType dtype = type == ElemType::kBF16 ? DType::kBF16 : DType::kF16;
  const std::vector<float> y = dy.Download<float>();
  std::vector<uint16_t> rounded(y.size());
  ConvertFromF32(dtype, y.data(), rounded.data(), y.size());
  c.Exact("y rounded", dn, rounded.data());
  c.Guards("y rounded", dn);
  c.Unchanged("x", dx, x.data());
  c.Unchanged("w", dw, w.data());
  return c.Result(ms);
}

CaseResult LayerNormCase(int rows, int d, bool in_place) {
  // An offset mean, as activations have: the two-pass variance must not lose it.
  const std::vector<float> x = RandomFloats(int64_t{rows} * d, 21 + d, 2.f, 4.f);
  const std::vector<float> w = RandomFloats(d, 22 + d, 0.5f, 1.5f);
  const std::vector<float> b = RandomFloats(d, 23 + d);
  std::vector<float> want(x.size());
  const float eps = 1e-5f;
  Checker c;
  if (!c.Reference(cpu::LayerNorm(x.data(), w.data(), b.data(), want.data(), rows, d, eps))) {
    return c.Result(0);
  }
  DeviceBuffer dx = DeviceBuffer::Of(x), dw = DeviceBuffer::Of(w), db = DeviceBuffer::Of(b);
  DeviceBuffer dy(x.size() * sizeof(float));
  float* out = in_place ? dx.as<float>() : dy.as<float>();
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

// LayerNorm that also writes its output rounded: the F32 output as LayerNorm's, the copy exactly
// the host's rounding of it.
CaseResult LayerNormRoundedCase(int rows, int d, ElemType type) {
  const std::vector<float> x = RandomFloats(int64_t{rows} * d, 24 + d, 2.f, 4.f);
  const std::vector<float> w = RandomFloats(d, 25 + d, 0.5f, 1.5f);
  const std::vector<float> b = RandomFloats(d, 26 + d);
  DeviceBuffer dx = DeviceBuffer::Of(x), dw = DeviceBuffer::Of(w), db = DeviceBuffer::Of(b);
  DeviceBuffer plain(x.size() * sizeof(float)), dy(x.size() * sizeof(float));
  DeviceBuffer dn(x.size() * sizeof(uint16_t));
  Checker c;
  c.Status(LayerNorm(dx.as<float>(), dw.as<float>(), db.as<float>(), plain.as<float>(), rows, d,
                     1e-5f, nullptr));
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return LayerNormRounded(dx.as<float>(), dw.as<float>(), db.as<float>(), dy.as<float>(),
                                type, dn.data(), rows, d, 1e-5f, nullptr);
      },
      &st);
  c.Status(st);
  c.Output("y", dy, plain.Download<float>(), {0, 0});
  const std::vector<float> y = dy.Download<float>();
  std::vector<uint16_t> rounded(y.size());
  ConvertFromF32(type == ElemType::kBF16 ? DType::kBF16 : DType::kF16, y.data(), rounded.data(),
                 y.size());
  c.Exact("y rounded", dn, rounded.data());
  c.Guards("y rounded", dn);
  c.Unchanged("x", dx, x.data());
  return c.Result(ms);
}

}  // namespace

void AddNormCases(std::vector<Case>& cases) {
  for (auto [rows, d, type] : {std::tuple{5, 1024, ElemType::kBF16}, {3, 31, ElemType::kF16}}) {
    cases.push_back({std::string("LayerNormRounded ") +
                         (type == ElemType::kBF16 ? "BF16 " : "F16 ") + std::to_string(rows) + "x" +
                         std::to_string(d),
                     {"LayerNormKernel"},
                     [=] { return LayerNormRoundedCase(rows, d, type); }});
  }
  for (auto [rows, d, in_place] : {std::tuple{1, 64, false}, {7, 1000, false}, {33, 4096, true},
                                   {3, 31, false}, {2, 5120, false}}) {
    cases.push_back({"RmsNorm " + std::to_string(rows) + "x" + std::to_string(d) +
                         (in_place ? " in place" : ""),
                     {"RmsNormKernel"},
                     [=] { return RmsNormCase(rows, d, in_place); }});
  }
  for (auto [rows, d, type] : {std::tuple{1, 64, ElemType::kBF16},
                               {7, 1000, ElemType::kBF16},
                               {3, 31, ElemType::kF16},
                               {2, 5120, ElemType::kF16}}) {
    const bool bf16 = type == ElemType::kBF16;
    cases.push_back({std::string("RmsNormRounded ") + (bf16 ? "BF16 " : "F16 ") +
                         std::to_string(rows) + "x" + std::to_string(d),
                     {bf16 ? "RmsNormBf16Kernel" : "RmsNormF16Kernel"},
                     [=] { return RmsNormRoundedCase(rows, d, type); }});
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
