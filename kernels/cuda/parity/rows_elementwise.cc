// Parity rows: RoPE, activations, residual and bias adds, and the embedding lookup, against
// kernels/cpu (rope.h, activation.h) and base/dtype.h's conversions.
#include <array>
#include <string>

#include "base/dtype.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/add.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/parity/rows.h"
#include "kernels/cuda/rope.h"

namespace hap::cuda::parity {
namespace {

CaseResult RopeCase(int rows, int n_heads, int head_dim, float theta) {
  const std::vector<float> x = RandomFloats(int64_t{rows} * n_heads * head_dim, 31 + head_dim);
  // Original position ids after pruning: ascending with gaps, starting past 0.
  std::vector<int32_t> pos(rows);
  for (int r = 0; r < rows; ++r) pos[r] = 3 + r * 7 + (r % 3);
  std::vector<float> want = x;
  Checker c;
  if (!c.Reference(cpu::Rope(want.data(), pos.data(), rows, n_heads, head_dim, theta))) {
    return c.Result(0);
  }
  DeviceBuffer dx = DeviceBuffer::Of(x), dpos = DeviceBuffer::Of(pos);
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return Rope(dx.as<float>(), dpos.as<int32_t>(), rows, n_heads, head_dim, theta, nullptr);
      },
      &st);
  c.Status(st);
  c.Output("x", dx, want, kF32Tol);
  c.Unchanged("positions", dpos, pos.data());
  return c.Result(ms);
}

// Rotary over position axes: M-RoPE (t, h, w) and the vision tower's 2-D rotary (row, column,
// per-section frequencies) against the CPU reference; one axis is also Rope's result bit for
// bit.
CaseResult RopeAxesCase(int rows, int n_heads, int head_dim, std::array<int, 3> sections,
                        bool per_section, float theta) {
  RopeAxesArgs a;
  a.rows = rows;
  a.n_heads = n_heads;
  a.head_dim = head_dim;
  a.theta = theta;
  for (int i = 0; i < 3; ++i) a.sections[i] = sections[i];
  a.per_section_frequencies = per_section;
  const std::vector<float> x = RandomFloats(int64_t{rows} * n_heads * head_dim, 41 + head_dim);
  // Axis a of row r: different per axis, with repeats (an image's tokens share t).
  std::vector<int32_t> pos(static_cast<size_t>(a.axes()) * rows);
  for (int ax = 0; ax < a.axes(); ++ax) {
    for (int r = 0; r < rows; ++r) pos[r * a.axes() + ax] = 2 + r / (ax + 1) * (3 + ax) + ax;
  }
  std::vector<float> want = x;
  Checker c;
  a.x = want.data();
  a.positions = pos.data();
  if (!c.Reference(cpu::RopeAxes(a))) return c.Result(0);
  if (sections[1] == 0 && !per_section) {
    std::vector<float> one_axis = x;
    if (!c.Reference(cpu::Rope(one_axis.data(), pos.data(), rows, n_heads, head_dim, theta)) ||
        one_axis != want) {
      c.Status(KernelStatus::Error("RopeAxes with one section differs from Rope"));
    }
  }
  DeviceBuffer dx = DeviceBuffer::Of(x), dpos = DeviceBuffer::Of(pos);
  a.x = dx.as<float>();
  a.positions = dpos.as<int32_t>();
  KernelStatus st;
  const double ms = TimedMs([&] { return RopeAxes(a, nullptr); }, &st);
  c.Status(st);
  c.Output("x", dx, want, kF32Tol);
  c.Unchanged("positions", dpos, pos.data());
  return c.Result(ms);
}

// A layer's q and k in one launch: each exactly as its own Rope (the same F32 cos/sin).
CaseResult RopePairCase(int rows, int n_heads, int n_kv_heads, int head_dim) {
  const std::vector<float> q = RandomFloats(int64_t{rows} * n_heads * head_dim, 33 + head_dim);
  const std::vector<float> k = RandomFloats(int64_t{rows} * n_kv_heads * head_dim, 34 + head_dim);
  std::vector<int32_t> pos(rows);
  for (int r = 0; r < rows; ++r) pos[r] = 1 + r * 5 + (r % 4);
  DeviceBuffer dq = DeviceBuffer::Of(q), dk = DeviceBuffer::Of(k), dpos = DeviceBuffer::Of(pos);
  DeviceBuffer sq = DeviceBuffer::Of(q), sk = DeviceBuffer::Of(k);
  Checker c;
  c.Status(Rope(sq.as<float>(), dpos.as<int32_t>(), rows, n_heads, head_dim, 1e4f, nullptr));
  c.Status(Rope(sk.as<float>(), dpos.as<int32_t>(), rows, n_kv_heads, head_dim, 1e4f, nullptr));
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return RopePair(dq.as<float>(), n_heads, dk.as<float>(), n_kv_heads, dpos.as<int32_t>(),
                        rows, head_dim, 1e4f, nullptr);
      },
      &st);
  c.Status(st);
  c.Output("q", dq, sq.Download<float>(), {0, 0});
  c.Output("k", dk, sk.Download<float>(), {0, 0});
  if (RopePair(dq.as<float>(), n_heads, dq.as<float>(), n_heads, dpos.as<int32_t>(), rows, head_dim,
               1e4f, nullptr)
          .ok) {
    c.Fail("a pair of one array was accepted");
  }
  return c.Result(ms);
}

// RopeTable's entries are the cos and sin Rope rotates by: Rope of pairs (1, 0) leaves exactly
// (cos, sin) in them, here for every position of the table; and they are the CPU's within F32.
CaseResult RopeTableCase(int positions, int head_dim, float theta) {
  const int half = head_dim / 2;
  std::vector<float> unit(static_cast<size_t>(positions) * head_dim, 0.f);
  std::vector<int32_t> pos(positions);
  for (int p = 0; p < positions; ++p) {
    pos[p] = p;
    for (int i = 0; i < half; ++i) unit[static_cast<size_t>(p) * head_dim + i] = 1.f;
  }
  std::vector<float> want = unit;
  Checker c;
  if (!c.Reference(cpu::Rope(want.data(), pos.data(), positions, 1, head_dim, theta))) {
    return c.Result(0);
  }
  DeviceBuffer rotated = DeviceBuffer::Of(unit), dpos = DeviceBuffer::Of(pos);
  c.Status(Rope(rotated.as<float>(), dpos.as<int32_t>(), positions, 1, head_dim, theta, nullptr));
  DeviceBuffer cos_table(sizeof(float) * positions * half), sin_table(cos_table.bytes());
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return RopeTable(cos_table.as<float>(), sin_table.as<float>(), positions, head_dim, theta,
                         nullptr);
      },
      &st);
  c.Status(st);
  // The table laid out as the rotated pairs: cos where x[i] was, sin where x[i + half] was.
  const std::vector<float> cs = cos_table.Download<float>(), sn = sin_table.Download<float>();
  std::vector<float> table(unit.size());
  for (int p = 0; p < positions; ++p) {
    for (int i = 0; i < half; ++i) {
      table[static_cast<size_t>(p) * head_dim + i] = cs[static_cast<size_t>(p) * half + i];
      table[static_cast<size_t>(p) * head_dim + half + i] = sn[static_cast<size_t>(p) * half + i];
    }
  }
  const DeviceBuffer got = DeviceBuffer::Of(table);
  c.Output("table as Rope's cos/sin", got, rotated.Download<float>(), {0, 0});
  c.Output("table", got, want, kF32Tol);
  if (RopeTable(cos_table.as<float>(), sin_table.as<float>(), positions, head_dim + 1, theta,
                nullptr)
          .ok) {
    c.Fail("an odd head_dim was accepted");
  }
  return c.Result(ms);
}

// An elementwise op that also writes its results rounded (SiluMulRounded, or QuickGeluRounded
// when !silu): the F32 results exactly the plain op's (SiluMul, quick_gelu), the copy exactly the
// host's rounding of them.
CaseResult RoundedActivationCase(bool silu, int64_t n, DType narrow) {
  const std::vector<float> x = RandomFloats(n, (silu ? 43 : 45) + n, -6.f, 6.f);
  const std::vector<float> up = RandomFloats(n, 44 + n);
  DeviceBuffer dx = DeviceBuffer::Of(x), dup = DeviceBuffer::Of(up), plain = DeviceBuffer::Of(x);
  DeviceBuffer drounded(static_cast<size_t>(n) * 2);
  Checker c;
  c.Status(silu ? SiluMul(plain.as<float>(), dup.as<float>(), n, nullptr)
                : Activate(ActivationKind::kQuickGelu, plain.as<float>(), n, nullptr));
  const std::vector<float> want = plain.Download<float>();
  std::vector<uint16_t> want_rounded(static_cast<size_t>(n));
  ConvertFromF32(narrow, want.data(), want_rounded.data(), want.size());
  const ElemType type = narrow == DType::kBF16 ? ElemType::kBF16 : ElemType::kF16;
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return silu ? SiluMulRounded(dx.as<float>(), dup.as<float>(), n, type, drounded.data(),
                                     nullptr)
                    : QuickGeluRounded(dx.as<float>(), n, type, drounded.data(), nullptr);
      },
      &st);
  c.Status(st);
  c.Output(silu ? "gate" : "x", dx, want, {0, 0});
  if (drounded.Download<uint16_t>() != want_rounded) c.Fail("the rounded copy differs");
  c.Unchanged("up", dup, up.data());
  return c.Result(ms);
}

CaseResult ActivationCase(const std::string& kind, int64_t n) {
  const std::vector<float> x = RandomFloats(n, 41 + n, -6.f, 6.f);
  const std::vector<float> up = RandomFloats(n, 42 + n);
  std::vector<float> want = x;
  DeviceBuffer dx = DeviceBuffer::Of(x), dup = DeviceBuffer::Of(up);
  std::function<KernelStatus()> run;
  if (kind == "QuickGelu") {
    cpu::QuickGelu(want.data(), n);
    run = [&] { return Activate(ActivationKind::kQuickGelu, dx.as<float>(), n, nullptr); };
  } else if (kind == "Gelu") {
    cpu::Gelu(want.data(), n);
    run = [&] { return Activate(ActivationKind::kGelu, dx.as<float>(), n, nullptr); };
  } else if (kind == "GeluTanh") {
    cpu::GeluTanh(want.data(), n);
    run = [&] { return Activate(ActivationKind::kGeluTanh, dx.as<float>(), n, nullptr); };
  } else if (kind == "SiluMul") {
    cpu::SiluMul(want.data(), up.data(), n);
    run = [&] { return SiluMul(dx.as<float>(), dup.as<float>(), n, nullptr); };
  } else {
    cpu::AddInPlace(want.data(), up.data(), n);
    run = [&] { return Add(dx.as<float>(), dup.as<float>(), n, nullptr); };
  }
  Checker c;
  KernelStatus st;
  const double ms = TimedMs(run, &st);
  c.Status(st);
  c.Output("x", dx, want, kF32Tol);
  c.Unchanged("up", dup, up.data());
  return c.Result(ms);
}

CaseResult AddBiasCase(int rows, int cols) {
  const std::vector<float> y = RandomFloats(int64_t{rows} * cols, 51 + cols);
  const std::vector<float> bias = RandomFloats(cols, 52 + cols);
  std::vector<float> want = y;
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) want[int64_t{r} * cols + j] += bias[j];
  }
  DeviceBuffer dy = DeviceBuffer::Of(y), db = DeviceBuffer::Of(bias);
  Checker c;
  KernelStatus st;
  const double ms =
      TimedMs([&] { return AddBias(dy.as<float>(), db.as<float>(), rows, cols, nullptr); }, &st);
  c.Status(st);
  c.Output("y", dy, want, {0, 0});  // one F32 addition per element: exact
  c.Unchanged("bias", db, bias.data());
  return c.Result(ms);
}

// The biases left by a product to the op after it: a batch's biases in one launch, a residual
// add with the bias, a quick_gelu of x + bias — each exactly AddBias followed by the op.
CaseResult DeferredBiasCase(int rows, int cols) {
  const int64_t n = int64_t{rows} * cols;
  const std::vector<float> y = RandomFloats(n, 71 + cols),
                           x = RandomFloats(n, 72 + cols, -4.f, 4.f);
  const std::vector<float> b0 = RandomFloats(cols, 73), b1 = RandomFloats(cols, 74),
                           b2 = RandomFloats(cols, 75);
  Checker c;
  // Three outputs, each with its bias, in one launch.
  DeviceBuffer ys[3] = {DeviceBuffer::Of(y), DeviceBuffer::Of(x), DeviceBuffer::Of(y)};
  DeviceBuffer want[3] = {DeviceBuffer::Of(y), DeviceBuffer::Of(x), DeviceBuffer::Of(y)};
  DeviceBuffer bs[3] = {DeviceBuffer::Of(b0), DeviceBuffer::Of(b1), DeviceBuffer::Of(b2)};
  BiasBatch batch{};
  for (int i = 0; i < 3; ++i) {
    c.Status(AddBias(want[i].as<float>(), bs[i].as<float>(), rows, cols, nullptr));
    batch.y[i] = ys[i].as<float>();
    batch.bias[i] = bs[i].as<float>();
  }
  KernelStatus st;
  const double ms = TimedMs([&] { return AddBiases(batch, 3, rows, cols, nullptr); }, &st);
  c.Status(st);
  const char* names[3] = {"y0", "y1", "y2"};
  for (int i = 0; i < 3; ++i) c.Output(names[i], ys[i], want[i].Download<float>(), {0, 0});
  // x + bias added to y.
  DeviceBuffer dy = DeviceBuffer::Of(y), dx = DeviceBuffer::Of(x), sum = DeviceBuffer::Of(y);
  DeviceBuffer biased = DeviceBuffer::Of(x);
  c.Status(AddBias(biased.as<float>(), bs[0].as<float>(), rows, cols, nullptr));
  c.Status(Add(sum.as<float>(), biased.as<float>(), n, nullptr));
  c.Status(AddWithBias(dy.as<float>(), dx.as<float>(), bs[0].as<float>(), rows, cols, nullptr));
  c.Output("y + (x + bias)", dy, sum.Download<float>(), {0, 0});
  c.Unchanged("x", dx, x.data());
  // quick_gelu(x + bias), rounded too.
  DeviceBuffer gx = DeviceBuffer::Of(x), rounded(static_cast<size_t>(n) * 2);
  c.Status(Activate(ActivationKind::kQuickGelu, biased.as<float>(), n, nullptr));
  c.Status(QuickGeluRounded(gx.as<float>(), n, ElemType::kBF16, rounded.data(), nullptr,
                            bs[0].as<float>(), cols));
  const std::vector<float> gelu = biased.Download<float>();
  c.Output("quick_gelu(x + bias)", gx, gelu, {0, 0});
  std::vector<uint16_t> want_rounded(gelu.size());
  ConvertFromF32(DType::kBF16, gelu.data(), want_rounded.data(), gelu.size());
  if (rounded.Download<uint16_t>() != want_rounded) c.Fail("the rounded copy differs");
  return c.Result(ms);
}

CaseResult EmbeddingCase(DType dtype, int vocab, int d, int n) {
  const std::vector<float> table = RandomFloats(int64_t{vocab} * d, 61 + d, -2.f, 2.f);
  std::vector<unsigned char> stored(table.size() * DTypeSize(dtype));
  ConvertFromF32(dtype, table.data(), stored.data(), table.size());
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = (i * 37 + 5) % vocab;  // repeats when n > vocab
  std::vector<float> want(int64_t{n} * d);
  for (int i = 0; i < n; ++i) {
    ConvertToF32(dtype, stored.data() + int64_t{ids[i]} * d * DTypeSize(dtype),
                 want.data() + int64_t{i} * d, d);
  }
  DeviceBuffer dtable = DeviceBuffer::Of(stored), dids = DeviceBuffer::Of(ids);
  DeviceBuffer dout(want.size() * sizeof(float));
  const ElemType type = dtype == DType::kBF16  ? ElemType::kBF16
                        : dtype == DType::kF16 ? ElemType::kF16
                                               : ElemType::kF32;
  Checker c;
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return Embedding(dtable.data(), type, dids.as<int32_t>(), n, d, dout.as<float>(),
                         nullptr);
      },
      &st);
  c.Status(st);
  c.Output("out", dout, want, {0, 0});  // a widening conversion: exact
  c.Unchanged("table", dtable, stored.data());
  c.Unchanged("ids", dids, ids.data());
  return c.Result(ms);
}

}  // namespace

void AddElementwiseCases(std::vector<Case>& cases) {
  for (auto [rows, heads, hd, theta] :
       {std::tuple{1, 4, 64, 10000.f}, {7, 3, 10, 10000.f}, {33, 32, 128, 10000.f},
        {5, 8, 128, 1e6f}}) {
    cases.push_back({"Rope " + std::to_string(rows) + "x" + std::to_string(heads) + "x" +
                         std::to_string(hd) + " theta " + std::to_string(static_cast<int>(theta)),
                     {"RopeKernel"},
                     [rows = rows, heads = heads, hd = hd, theta = theta] {
                       return RopeCase(rows, heads, hd, theta);
                     }});
  }
  // Qwen2.5-VL's text (mrope_section 16/24/24 of head 128) and vision tower (head 80: 20 + 20
  // pairs, per-section frequencies, theta 10000), a tiny model's 2/3/3, and one axis.
  for (auto [rows, heads, hd, s0, s1, s2, per_section, theta] :
       {std::tuple{9, 4, 128, 16, 24, 24, false, 1e6f},
        {37, 16, 80, 20, 20, 0, true, 1e4f},
        {5, 4, 16, 2, 3, 3, false, 1e6f},
        {6, 3, 64, 32, 0, 0, false, 1e4f}}) {
    cases.push_back({"RopeAxes " + std::to_string(rows) + "x" + std::to_string(heads) + "x" +
                         std::to_string(hd) + " sections " + std::to_string(s0) + "/" +
                         std::to_string(s1) + "/" + std::to_string(s2) +
                         (per_section ? " per-section" : ""),
                     {"RopeAxesKernel"},
                     [rows = rows, heads = heads, hd = hd, s0 = s0, s1 = s1, s2 = s2,
                      per_section = per_section, theta = theta] {
                       return RopeAxesCase(rows, heads, hd, {s0, s1, s2}, per_section, theta);
                     }});
  }
  for (auto [rows, heads, kv_heads, hd] : {std::tuple{1, 4, 4, 64}, {37, 32, 8, 128}}) {
    cases.push_back({"RopePair " + std::to_string(rows) + " rows, " + std::to_string(heads) +
                         " + " + std::to_string(kv_heads) + " heads of " + std::to_string(hd),
                     {"RopeKernel"},
                     [rows = rows, heads = heads, kv_heads = kv_heads, hd = hd] {
                       return RopePairCase(rows, heads, kv_heads, hd);
                     }});
  }
  for (auto [positions, hd, theta] : {std::tuple{4096, 128, 1e4f}, {300, 16, 1e6f}}) {
    cases.push_back({"RopeTable " + std::to_string(positions) + " positions x " +
                         std::to_string(hd) + " theta " + std::to_string(static_cast<int>(theta)),
                     {"RopeTableKernel", "RopeKernel"},
                     [positions = positions, hd = hd, theta = theta] {
                       return RopeTableCase(positions, hd, theta);
                     }});
  }
  for (auto [n, narrow] :
       {std::pair{int64_t{1000}, DType::kBF16}, {int64_t{100003}, DType::kF16}}) {
    cases.push_back({"SiluMulRounded " + std::to_string(n) + " " + std::string(DTypeName(narrow)),
                     {"SiluMulRoundedKernel"},
                     [n = n, narrow = narrow] { return RoundedActivationCase(true, n, narrow); }});
  }
  for (auto [n, narrow] :
       {std::pair{int64_t{577 * 4096}, DType::kBF16}, {int64_t{999}, DType::kF16}}) {
    cases.push_back({"QuickGeluRounded " + std::to_string(n) + " " + std::string(DTypeName(narrow)),
                     {"QuickGeluRoundedKernel"},
                     [n = n, narrow = narrow] { return RoundedActivationCase(false, n, narrow); }});
  }
  const char* kernel_of[][2] = {{"QuickGelu", "QuickGeluKernel"},
                                {"Gelu", "GeluKernel"},
                                {"GeluTanh", "GeluTanhKernel"},
                                {"SiluMul", "SiluMulKernel"},
                                {"Add", "AddKernel"}};
  for (const auto& [kind, kernel] : kernel_of) {
    const std::string k = kind;
    // Past 4096 blocks of 256 the kernels stride over the grid: the largest size covers that
    // path for the two kernels that the MLP and the residual run most.
    const bool big = k == "SiluMul" || k == "Add";
    for (int64_t n : {int64_t{1}, int64_t{1000}, big ? int64_t{1} << 20 | 3 : int64_t{100003}}) {
      cases.push_back({k + " " + std::to_string(n), {kernel}, [=] { return ActivationCase(k, n); }});
    }
  }
  for (auto [rows, cols] : {std::pair{1, 7}, {13, 333}}) {
    cases.push_back({"AddBias " + std::to_string(rows) + "x" + std::to_string(cols),
                     {"AddBiasKernel"},
                     [rows = rows, cols = cols] { return AddBiasCase(rows, cols); }});
  }
  for (auto [rows, cols] : {std::pair{1, 7}, {577, 1024}}) {
    cases.push_back({"Deferred biases " + std::to_string(rows) + "x" + std::to_string(cols),
                     {"AddBiasesKernel", "AddWithBiasKernel", "QuickGeluRoundedKernel"},
                     [rows = rows, cols = cols] { return DeferredBiasCase(rows, cols); }});
  }
  for (auto [dtype, name] : {std::pair{DType::kF32, "F32"}, {DType::kBF16, "BF16"},
                             {DType::kF16, "F16"}}) {
    cases.push_back({std::string("Embedding ") + name + " 50x100 n=77",
                     {"EmbeddingKernel"},
                     [dtype = dtype] { return EmbeddingCase(dtype, 50, 100, 77); }});
  }
}

}  // namespace hap::cuda::parity
