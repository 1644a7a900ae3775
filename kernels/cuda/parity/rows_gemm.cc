// Parity rows: the rounding of activations to BF16/F16 against base/dtype.h (bit for bit), a
// decode step's KV rows stored through address tables against the CPU's StoreKvRows (bit for
// bit), and the Linear product against the F64 reference on the same rounded operands.
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "base/dtype.h"
#include "kernels/cpu/decode_attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/parity/rows.h"

namespace hap::cuda::parity {
namespace {

ElemType ElemOf(DType d) {
  return d == DType::kBF16 ? ElemType::kBF16 : d == DType::kF16 ? ElemType::kF16 : ElemType::kF32;
}

CaseResult RoundCase(DType dtype) {
  // Random values across many magnitudes, then the edges: ties, subnormals, overflow, NaN, Inf.
  std::vector<float> x = RandomFloats(5000, 71);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= std::ldexp(1.f, static_cast<int>(i % 60) - 30);
  const float special[] = {0.f, -0.f, 65504.f, 65520.f, 65519.f, 1e-8f, 2.9802322e-8f,
                           6.1035156e-5f, 1.f + 0x1p-8f, 1.f + 0x1p-11f, 3.f + 0x1p-7f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), 1e30f, -1e-40f};
  x.insert(x.end(), std::begin(special), std::end(special));
  std::vector<uint16_t> want(x.size());
  ConvertFromF32(dtype, x.data(), want.data(), x.size());
  DeviceBuffer dx = DeviceBuffer::Of(x), dout(want.size() * sizeof(uint16_t));
  Checker c;
  KernelStatus st;
  const double ms = TimedMs(
      [&] { return RoundF32To(ElemOf(dtype), dx.as<float>(), dout.data(), x.size(), nullptr); },
      &st);
  c.Status(st);
  c.Exact("rounded", dout, want.data());
  c.Unchanged("x", dx, x.data());
  return c.Result(ms);
}

// RoundF32PairTo: both arrays exactly as the host rounds them (and so as RoundF32To does), each
// into its own output, of different contents so that a swap shows.
CaseResult RoundPairCase(DType dtype, int64_t n) {
  std::vector<float> a = RandomFloats(n, 73, -3.f, 3.f), b = RandomFloats(n, 74, -300.f, 300.f);
  a[0] = std::numeric_limits<float>::quiet_NaN();
  b[n - 1] = -0.f;
  std::vector<uint16_t> want_a(n), want_b(n);
  ConvertFromF32(dtype, a.data(), want_a.data(), n);
  ConvertFromF32(dtype, b.data(), want_b.data(), n);
  DeviceBuffer da = DeviceBuffer::Of(a), db = DeviceBuffer::Of(b);
  DeviceBuffer a_out(n * sizeof(uint16_t)), b_out(n * sizeof(uint16_t));
  Checker c;
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return RoundF32PairTo(ElemOf(dtype), da.as<float>(), a_out.data(), db.as<float>(),
                              b_out.data(), n, nullptr);
      },
      &st);
  c.Status(st);
  c.Exact("a rounded", a_out, want_a.data());
  c.Exact("b rounded", b_out, want_b.data());
  c.Guards("a rounded", a_out);
  c.Guards("b rounded", b_out);
  c.Unchanged("a", da, a.data());
  c.Unchanged("b", db, b.data());
  if (RoundF32PairTo(ElemType::kF32, da.as<float>(), a_out.data(), db.as<float>(), b_out.data(), n,
                     nullptr)
          .ok) {
    c.Fail("an F32 target was accepted");
  }
  return c.Result(ms);
}

// n rows of K and V (kv_dim values each) into a cache area at addresses out of order, with rows
// of the area left unwritten between them: what StoreKvRows writes where, and nothing else.
CaseResult StoreRowsCase(DType dtype, int n, int kv_dim) {
  const std::vector<float> k = RandomFloats(int64_t{n} * kv_dim, 81, -3.f, 3.f);
  const std::vector<float> v = RandomFloats(int64_t{n} * kv_dim, 82, -3.f, 3.f);
  const size_t row_bytes = DTypeSize(dtype) * kv_dim;
  const int slots = 2 * n + 1;  // row i goes to slot 2·(n − 1 − i) + 1
  std::vector<unsigned char> want_k(slots * row_bytes, 0xA5), want_v(slots * row_bytes, 0x5A);
  DeviceBuffer dk_area = DeviceBuffer::Of(want_k), dv_area = DeviceBuffer::Of(want_v);
  std::vector<void*> k_dst(n), v_dst(n), host_k_dst(n), host_v_dst(n);
  for (int i = 0; i < n; ++i) {
    const size_t at = (2 * (n - 1 - i) + 1) * row_bytes;
    k_dst[i] = dk_area.as<unsigned char>() + at;
    v_dst[i] = dv_area.as<unsigned char>() + at;
    host_k_dst[i] = want_k.data() + at;
    host_v_dst[i] = want_v.data() + at;
  }
  StoreKvRowsArgs reference{k.data(), v.data(), host_k_dst.data(), host_v_dst.data(), n,
                            kv_dim,   dtype};
  Checker c;
  if (!c.Reference(cpu::StoreKvRows(reference))) return c.Result(0);
  DeviceBuffer dk = DeviceBuffer::Of(k), dv = DeviceBuffer::Of(v);
  DeviceBuffer dk_dst = DeviceBuffer::Of(k_dst), dv_dst = DeviceBuffer::Of(v_dst);
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return StoreRowsAs(ElemOf(dtype), dk.as<float>(), dv.as<float>(), dk_dst.as<void*>(),
                           dv_dst.as<void*>(), n, kv_dim, nullptr);
      },
      &st);
  c.Status(st);
  c.Exact("k area", dk_area, want_k.data());
  c.Exact("v area", dv_area, want_v.data());
  c.Unchanged("k", dk, k.data());
  c.Unchanged("k_dst", dk_dst, k_dst.data());
  return c.Result(ms);
}

CaseResult LinearCase(DType dtype, int m, int n, int k, bool bias) {
  const std::vector<float> x = RandomFloats(int64_t{m} * k, 81 + k);
  const std::vector<float> wf = RandomFloats(int64_t{n} * k, 82 + n);
  const std::vector<float> b = RandomFloats(n, 83 + n);
  std::vector<unsigned char> w(wf.size() * DTypeSize(dtype));
  ConvertFromF32(dtype, wf.data(), w.data(), wf.size());
  // The reference multiplies what the GPU multiplies: x rounded to the weights' type.
  std::vector<float> xr = x, wr(wf.size());
  if (dtype != DType::kF32) {
    std::vector<uint16_t> bits(x.size());
    ConvertFromF32(dtype, x.data(), bits.data(), x.size());
    ConvertToF32(dtype, bits.data(), xr.data(), x.size());
  }
  ConvertToF32(dtype, w.data(), wr.data(), wr.size());
  std::vector<float> want(int64_t{m} * n);
  cpu::LinearReference(xr.data(), wr.data(), bias ? b.data() : nullptr, want.data(), m, k, n);

  DeviceBuffer dx = DeviceBuffer::Of(x), dw = DeviceBuffer::Of(w), db = DeviceBuffer::Of(b);
  DeviceBuffer dy(want.size() * sizeof(float));
  std::unique_ptr<Gemm> gemm;
  Checker c;
  c.Status(Gemm::Create(nullptr, &gemm));
  if (gemm == nullptr) return c.Result(0);
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return gemm->Linear(dx.as<float>(), dw.data(), ElemOf(dtype), bias ? db.as<float>() : nullptr,
                            dy.as<float>(), m, n, k);
      },
      &st);
  c.Status(st);
  // F32 sums of k exact products in another order: errors grow like √k·ε·Σ|terms|, about
  // 3e-5 absolute for k = 1000 and unit-sized operands.
  c.Output("y", dy, want, {1e-4, 1e-4});
  c.Unchanged("x", dx, x.data());
  c.Unchanged("w", dw, w.data());
  return c.Result(ms);
}

}  // namespace

void AddGemmCases(std::vector<Case>& cases) {
  cases.push_back({"RoundF32To BF16 5016 values", {"RoundToBf16Kernel"},
                   [] { return RoundCase(DType::kBF16); }});
  cases.push_back({"RoundF32To F16 5016 values", {"RoundToF16Kernel"},
                   [] { return RoundCase(DType::kF16); }});
  // A prefill layer's K and V rows (37 rows of 4096) into a BF16 cache; an odd count in F16.
  for (auto [dtype, n] :
       {std::pair{DType::kBF16, int64_t{37} * 4096}, {DType::kF16, int64_t{999}}}) {
    cases.push_back({"RoundF32PairTo " + std::string(DTypeName(dtype)) + " 2 x " +
                         std::to_string(n) + " values",
                     {"RoundPairKernel"},
                     [dtype = dtype, n = n] { return RoundPairCase(dtype, n); }});
  }
  for (auto [dtype, n, kv_dim] :
       {std::tuple{DType::kF32, 1, 128}, {DType::kBF16, 1, 1024}, {DType::kBF16, 33, 100}}) {
    cases.push_back({std::string("StoreKvRows ") + std::string(DTypeName(dtype)) + " " +
                         std::to_string(n) + " rows of " + std::to_string(kv_dim),
                     {"StoreRowsKernel"},
                     [=] { return StoreRowsCase(dtype, n, kv_dim); }});
  }
  for (auto [dtype, name] :
       {std::pair{DType::kF32, "F32"}, {DType::kBF16, "BF16"}, {DType::kF16, "F16"}}) {
    for (auto [m, n, k, bias] : {std::tuple{1, 7, 5, false}, {3, 333, 1000, true},
                                 {17, 64, 64, false}, {130, 33, 200, true}}) {
      const std::vector<std::string> kernels =
          dtype == DType::kF32 ? std::vector<std::string>{}
          : dtype == DType::kBF16 ? std::vector<std::string>{"RoundToBf16Kernel"}
                                  : std::vector<std::string>{"RoundToF16Kernel"};
      std::vector<std::string> all = kernels;
      if (bias) all.push_back("AddBiasKernel");
      cases.push_back({std::string("Linear ") + name + " " + std::to_string(m) + "x" +
                           std::to_string(n) + "x" + std::to_string(k) + (bias ? " +bias" : ""),
                       all, [=] { return LinearCase(dtype, m, n, k, bias); }});
    }
  }
}

}  // namespace hap::cuda::parity
