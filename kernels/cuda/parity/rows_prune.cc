// Parity rows: the pruning kernels (text→visual attention rows, PAQ, PAQ-softmax weights,
// weighted sums of maps, token scores, stable top-k, row gathers) against kernels/cpu/prune. Index
// outputs are compared exactly; F32 outputs with kF32Tol.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cpu/prune/attention_rows.h"
#include "kernels/cpu/prune/gather_rows.h"
#include "kernels/cpu/prune/paq.h"
#include "kernels/cpu/prune/paq_softmax.h"
#include "kernels/cpu/prune/token_scores.h"
#include "kernels/cpu/prune/topk.h"
#include "kernels/cpu/prune/weighted_sum.h"
#include "kernels/cuda/gather_rows.h"
#include "kernels/cuda/hap_scoring.h"
#include "kernels/cuda/paq.h"
#include "kernels/cuda/paq_softmax.h"
#include "kernels/cuda/parity/rows.h"
#include "kernels/cuda/text_visual_attention.h"
#include "kernels/cuda/token_scores.h"
#include "kernels/cuda/topk.h"
#include "kernels/cuda/weighted_sum.h"

namespace hap::cuda::parity {
namespace {

// Row entropies (F64): the kernel takes ln Z − Σ e·y / Z from the logits, the reference −Σ p ln p
// of its F32-rounded output. Rounding p to F32 (≤ 6e-8 relative) moves −Σ p ln p by up to
// 6e-8·Σ p·|ln p + 1| ≤ 6e-8·(H + 1) ≈ 4e-7 at H ≈ ln 577, and the logits themselves differ by
// a few F32 ulps (dot products in another order). Measured worst: 4.3e-7 absolute (head_dim
// 256, H = 3.8), 0.32 of this tolerance.
constexpr Tolerance kEntropyTol{1e-6, 1e-7};

// A case's checks beyond what Checker holds: F64 outputs and index outputs.
struct Extra {
  double worst = 0;
};

std::string Str(int64_t v) { return std::to_string(v); }
// 0.05 → "0.05" (%g).
std::string StrG(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// got (F64, device) against want with tol; folds the worst error into extra.
void OutputF64(Checker& c, Extra& extra, const std::string& what, const DeviceBuffer& got,
               const std::vector<double>& want, Tolerance tol) {
  c.Guards(what, got);
  const std::vector<double> host = got.Download<double>();
  if (host.size() != want.size()) {
    c.Fail(what + ": size mismatch");
    return;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(host[i])) {
      c.Fail(what + ": element " + Str(i) + " is not finite");
      extra.worst = INFINITY;
      return;
    }
    const double err = std::fabs(host[i] - want[i]) / (tol.atol + tol.rtol * std::fabs(want[i]));
    extra.worst = std::max(extra.worst, err);
    if (err > 1.0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s: element %zu: got %.12g, reference %.12g", what.c_str(), i,
                    host[i], want[i]);
      c.Fail(buf);
    }
  }
}

// Kept indices (device) against the CPU's: exactly the same strictly ascending list. When they
// differ, says whether the scores at the kept indices agree (a tie broken the wrong way) or not.
void OutputKept(Checker& c, const std::string& what, const DeviceBuffer& got,
                const std::vector<int>& want, const std::vector<float>& scores) {
  c.Guards(what, got);
  const std::vector<int> host = got.Download<int>();
  for (size_t r = 0; r < host.size(); ++r) {
    if (host[r] < 0 || host[r] >= static_cast<int>(scores.size())) {
      c.Fail(what + ": index " + Str(host[r]) + " at " + Str(r) + " out of range");
      return;
    }
    if (r > 0 && host[r] <= host[r - 1]) {
      c.Fail(what + ": not strictly ascending at " + Str(r) + " (a duplicate or out of order)");
      return;
    }
  }
  if (host == want) return;
  std::vector<float> got_scores, want_scores;
  for (int i : host) got_scores.push_back(scores[i]);
  for (int i : want) want_scores.push_back(scores[i]);
  std::sort(got_scores.begin(), got_scores.end());
  std::sort(want_scores.begin(), want_scores.end());
  c.Fail(what + (got_scores == want_scores ? ": same scores, but a tie went to a higher index"
                                           : ": a different selection"));
}

// An exact output (bytes, ids) against what it must hold.
void OutputBytes(Checker& c, const std::string& what, const DeviceBuffer& got, const void* want) {
  c.Guards(what, got);
  std::vector<unsigned char> host(got.bytes());
  got.DownloadTo(host.data());
  if (std::memcmp(host.data(), want, host.size()) != 0)
    c.Fail(what + " differs from the reference");
}

CaseResult Finish(const Checker& c, const Extra& extra, double ms) {
  CaseResult r = c.Result(ms);
  r.worst = std::max(r.worst, extra.worst);
  return r;
}

// ------------------------------------------------------------------ TextVisualAttention

struct AttentionShape {
  int n_text, n_vis, n_heads, n_kv_heads, head_dim;
  bool renormalize, entropy;
  int pad;  // extra floats per row of Q and K, and per head of the LSE (strided views)
};

std::string AttentionName(const AttentionShape& s) {
  return "TextVisualAttention t" + Str(s.n_text) + " v" + Str(s.n_vis) + " h" + Str(s.n_heads) +
         "/" + Str(s.n_kv_heads) + " d" + Str(s.head_dim) +
         (s.renormalize ? (s.entropy ? " renorm+H" : " renorm") : " lse") +
         (s.pad ? " strided" : "");
}

// The arguments of shape s, without their pointers: Q and K padded by s.pad floats a row and the
// LSE by s.pad a head (strided views) where it pads.
TextVisualAttentionArgs ArgsOf(const AttentionShape& s) {
  const int64_t q_stride = int64_t{s.n_heads} * s.head_dim + s.pad;
  const int64_t k_stride = int64_t{s.n_kv_heads} * s.head_dim + s.pad;
  return TextVisualAttentionArgs{.n_text = s.n_text,
                                 .n_vis = s.n_vis,
                                 .n_heads = s.n_heads,
                                 .n_kv_heads = s.n_kv_heads,
                                 .head_dim = s.head_dim,
                                 .q_stride = s.pad ? q_stride : 0,
                                 .k_stride = s.pad ? k_stride : 0,
                                 .lse_stride = s.pad ? s.n_text + s.pad : 0,
                                 .scale = 1.f / std::sqrt(static_cast<float>(s.head_dim)),
                                 .renormalize = s.renormalize};
}

CaseResult TextVisualAttentionCase(const AttentionShape& s) {
  const uint64_t seed = 100 + s.n_text * 7 + s.n_vis + s.head_dim;
  const int64_t q_stride = int64_t{s.n_heads} * s.head_dim + s.pad;
  const int64_t k_stride = int64_t{s.n_kv_heads} * s.head_dim + s.pad;
  const int64_t lse_stride = s.n_text + s.pad;
  // Q in [-3, 3): logits of standard deviation ~1, so rows range from flat to peaked.
  const std::vector<float> q = RandomFloats(s.n_text * q_stride, seed, -3.f, 3.f);
  const std::vector<float> k = RandomFloats(s.n_vis * k_stride, seed + 1);
  // Log-sum-exps at least the visual part's (the rest of the row's keys add mass).
  const std::vector<float> lse = RandomFloats(s.n_heads * lse_stride, seed + 2, 1.f, 4.f);
  const int64_t n_out = int64_t{s.n_heads} * s.n_text * s.n_vis;
  std::vector<float> want(n_out);
  std::vector<double> want_h(s.entropy ? int64_t{s.n_heads} * s.n_text : 0);

  TextVisualAttentionArgs a = ArgsOf(s);
  TextVisualAttentionArgs ref = a;
  ref.q_text = q.data();
  ref.k_vis = k.data();
  ref.lse = lse.data();
  ref.out = want.data();
  ref.row_entropy = s.entropy ? want_h.data() : nullptr;
  Checker c;
  Extra extra;
  if (!c.Reference(kernels::TextVisualAttentionReference(ref))) return c.Result(0);

  DeviceBuffer dq = DeviceBuffer::Of(q), dk = DeviceBuffer::Of(k), dl = DeviceBuffer::Of(lse);
  DeviceBuffer dout(n_out * sizeof(float)), dh(want_h.size() * sizeof(double));
  a.q_text = dq.as<float>();
  a.k_vis = dk.as<float>();
  a.lse = dl.as<float>();
  a.out = dout.as<float>();
  a.row_entropy = s.entropy ? dh.as<double>() : nullptr;
  KernelStatus st;
  const double ms = TimedMs([&] { return TextVisualAttention(a, nullptr); }, &st);
  c.Status(st);
  c.Output("out", dout, want, kF32Tol);
  if (s.entropy) OutputF64(c, extra, "row_entropy", dh, want_h, kEntropyTol);
  c.Unchanged("q_text", dq, q.data());
  c.Unchanged("k_vis", dk, k.data());
  c.Unchanged("lse", dl, lse.data());
  return Finish(c, extra, ms);
}

// TextVisualAttentionPaq: the rows and their entropies as TextVisualAttention's, and each head's
// PAQ byte for byte as PaqFromRowEntropies makes it from them on the device, and against the
// reference's. Called twice: the heads' counters are back at 0 after each call, so the second
// gives the same bits.
CaseResult TextVisualAttentionPaqCase(const AttentionShape& s) {
  const uint64_t seed = 900 + s.n_text * 7 + s.n_vis + s.head_dim;
  const int64_t q_stride = int64_t{s.n_heads} * s.head_dim + s.pad;
  const int64_t k_stride = int64_t{s.n_kv_heads} * s.head_dim + s.pad;
  const std::vector<float> q = RandomFloats(s.n_text * q_stride, seed, -3.f, 3.f);
  const std::vector<float> k = RandomFloats(s.n_vis * k_stride, seed + 1);
  const int64_t n_out = int64_t{s.n_heads} * s.n_text * s.n_vis;
  std::vector<float> want(n_out), want_paq(s.n_heads);
  std::vector<double> want_h(int64_t{s.n_heads} * s.n_text);
  TextVisualAttentionArgs a = ArgsOf(s);  // renormalised: s.renormalize
  TextVisualAttentionArgs ref = a;
  ref.q_text = q.data();
  ref.k_vis = k.data();
  ref.out = want.data();
  ref.row_entropy = want_h.data();
  Checker c;
  Extra extra;
  if (!c.Reference(kernels::TextVisualAttentionReference(ref)) ||
      !c.Reference(kernels::PaqFromRowEntropies(want.data(), want_h.data(), s.n_heads, s.n_text,
                                                s.n_vis, want_paq.data()))) {
    return c.Result(0);
  }
  DeviceBuffer dq = DeviceBuffer::Of(q), dk = DeviceBuffer::Of(k);
  DeviceBuffer dout(n_out * sizeof(float)), dh(want_h.size() * sizeof(double));
  DeviceBuffer dpaq(s.n_heads * sizeof(float));
  DeviceBuffer counters = DeviceBuffer::Of(std::vector<unsigned>(s.n_heads, 0u));
  a.q_text = dq.as<float>();
  a.k_vis = dk.as<float>();
  a.out = dout.as<float>();
  a.row_entropy = dh.as<double>();
  // The two launches it stands for, on the device.
  DeviceBuffer two_out(n_out * sizeof(float)), two_h(want_h.size() * sizeof(double));
  DeviceBuffer two_paq(s.n_heads * sizeof(float));
  TextVisualAttentionArgs two = a;
  two.out = two_out.as<float>();
  two.row_entropy = two_h.as<double>();
  c.Status(TextVisualAttention(two, nullptr));
  c.Status(PaqFromRowEntropies(two.out, two.row_entropy, s.n_heads, s.n_text, s.n_vis,
                               two_paq.as<float>(), nullptr));
  const std::vector<float> two_paq_host = two_paq.Download<float>();
  double first_ms = 0;
  for (int call = 0; call < 2; ++call) {
    KernelStatus st;
    const double ms = TimedMs(
        [&] {
          return TextVisualAttentionPaq(a, dpaq.as<float>(), counters.as<unsigned>(), nullptr);
        },
        &st);
    c.Status(st);
    if (call == 0) first_ms = ms;
    const std::string when = call == 0 ? "" : ", called again";
    c.Exact("out as TextVisualAttention" + when, dout, two_out.Download<float>().data());
    c.Exact("row_entropy as TextVisualAttention" + when, dh, two_h.Download<double>().data());
    c.Exact("paq as PaqFromRowEntropies" + when, dpaq, two_paq_host.data());
    if (counters.Download<unsigned>() != std::vector<unsigned>(s.n_heads, 0u)) {
      c.Fail("a head's counter is not back at 0" + when);
    }
  }
  c.Output("out", dout, want, kF32Tol);
  OutputF64(c, extra, "row_entropy", dh, want_h, kEntropyTol);
  c.Output("paq", dpaq, want_paq, kF32Tol);
  c.Unchanged("q_text", dq, q.data());
  c.Unchanged("k_vis", dk, k.data());
  return Finish(c, extra, first_ms);
}

// ------------------------------------------------------------------ PAQ

// Row-stochastic maps F32 [n_maps, n_text, n_vis] and their row entropies F64 [n_maps, n_text]:
// softmax rows of random logits from the CPU attention reference, with the cases PAQ singles
// out written over the first maps: 0 identical rows (a sink head, PAQ 0), 1 one-hot rows on
// distinct columns (PAQ 1), 2 rows with exact zeros, 3 every row one-hot on column 0 (H_v = 0).
struct Maps {
  std::vector<float> a;
  std::vector<double> h;
};

absl::StatusOr<Maps> MakeMaps(int n_maps, int n_text, int n_vis, uint64_t seed) {
  const int hd = 16;
  const std::vector<float> q = RandomFloats(int64_t{n_text} * n_maps * hd, seed, -4.f, 4.f);
  const std::vector<float> k = RandomFloats(int64_t{n_vis} * hd, seed + 1);
  Maps m;
  m.a.resize(int64_t{n_maps} * n_text * n_vis);
  m.h.resize(int64_t{n_maps} * n_text);
  TextVisualAttentionArgs a;
  a.q_text = q.data();
  a.k_vis = k.data();
  a.n_text = n_text;
  a.n_vis = n_vis;
  a.n_heads = n_maps;
  a.n_kv_heads = 1;
  a.head_dim = hd;
  a.scale = 0.25f;
  a.out = m.a.data();
  a.row_entropy = m.h.data();
  const absl::Status attention = kernels::TextVisualAttentionReference(a);
  if (!attention.ok()) return attention;

  const int64_t map_size = int64_t{n_text} * n_vis;
  auto row = [&](int map, int j) { return m.a.data() + map * map_size + int64_t{j} * n_vis; };
  auto entropy = [&](int map, int j) {
    double h = 0.0;
    for (int i = 0; i < n_vis; ++i) {
      const float p = row(map, j)[i];
      if (p > 0.f) h -= double{p} * std::log(double{p});
    }
    m.h[int64_t{map} * n_text + j] = h;
  };
  for (int j = 0; j < n_text; ++j) {
    if (n_maps > 0) std::copy(row(0, 0), row(0, 0) + n_vis, row(0, j));
    if (n_maps > 1) {
      std::fill(row(1, j), row(1, j) + n_vis, 0.f);
      row(1, j)[j % n_vis] = 1.f;
    }
    if (n_maps > 2) {
      float* r = row(2, j);
      double sum = 0.0;
      for (int i = 0; i < n_vis; ++i) {
        if (i % 3 == 1) r[i] = 0.f;
        sum += r[i];
      }
      for (int i = 0; i < n_vis; ++i) r[i] = static_cast<float>(r[i] / sum);
    }
    if (n_maps > 3) {
      std::fill(row(3, j), row(3, j) + n_vis, 0.f);
      row(3, j)[0] = 1.f;
    }
    for (int map = 0; map < std::min(n_maps, 4); ++map) entropy(map, j);
  }
  return m;
}

// PAQ of the first n_maps maps on the host (the reference) and on the device, from the maps
// alone or from the maps and their row entropies.
absl::Status PaqOnHost(const Maps& m, int n_maps, int n_text, int n_vis, bool from_entropies,
                       float* paq) {
  return from_entropies
             ? kernels::PaqFromRowEntropies(m.a.data(), m.h.data(), n_maps, n_text, n_vis, paq)
             : kernels::PaqReference(m.a.data(), n_maps, n_text, n_vis, paq);
}

double PaqOnDevice(const DeviceBuffer& da, const DeviceBuffer& dh, int n_maps, int n_text,
                   int n_vis, bool from_entropies, DeviceBuffer& dpaq, KernelStatus* st) {
  return TimedMs(
      [&] {
        return from_entropies
                   ? PaqFromRowEntropies(da.as<float>(), dh.as<double>(), n_maps, n_text, n_vis,
                                         dpaq.as<float>(), nullptr)
                   : Paq(da.as<float>(), n_maps, n_text, n_vis, dpaq.as<float>(), nullptr);
      },
      st);
}

CaseResult PaqCase(int n_maps, int n_text, int n_vis, bool from_entropies) {
  const absl::StatusOr<Maps> maps = MakeMaps(n_maps, n_text, n_vis, 300 + n_text + n_vis);
  std::vector<float> want(n_maps);
  Checker c;
  if (!c.Reference(maps.status())) return c.Result(0);
  const Maps& m = *maps;
  if (!c.Reference(PaqOnHost(m, n_maps, n_text, n_vis, from_entropies, want.data()))) {
    return c.Result(0);
  }
  DeviceBuffer da = DeviceBuffer::Of(m.a), dh = DeviceBuffer::Of(m.h);
  DeviceBuffer dpaq(n_maps * sizeof(float));
  KernelStatus st;
  const double ms = PaqOnDevice(da, dh, n_maps, n_text, n_vis, from_entropies, dpaq, &st);
  c.Status(st);
  c.Output("paq", dpaq, want, kF32Tol);
  c.Unchanged("maps", da, m.a.data());
  c.Unchanged("row_entropy", dh, m.h.data());
  return c.Result(ms);
}

// Maps the reference rejects give NaN, and only for themselves: map 1 has a row summing to 1/2,
// map 2 a negative entry, map 3 (with entropies) a NaN row entropy; map 0 is valid.
CaseResult PaqRejectsCase(bool from_entropies) {
  const int n_maps = 4, n_text = 5, n_vis = 7;
  absl::StatusOr<Maps> maps = MakeMaps(n_maps, n_text, n_vis, 77);
  Checker c;
  if (!c.Reference(maps.status())) return c.Result(0);
  Maps& m = *maps;
  const int64_t map_size = n_text * n_vis;
  for (int i = 0; i < n_vis; ++i) m.a[1 * map_size + 2 * n_vis + i] *= 0.5f;
  m.a[2 * map_size + 3] = -1e-3f;
  if (from_entropies) m.h[3 * n_text + 1] = NAN;
  float want0 = 0.f;
  std::vector<float> bad(n_maps);
  if (PaqOnHost(m, n_maps, n_text, n_vis, from_entropies, bad.data()).ok()) {
    c.Fail("the reference accepted invalid maps");
  }
  if (!PaqOnHost(m, 1, n_text, n_vis, from_entropies, &want0).ok()) {
    c.Fail("the reference rejected map 0");
  }
  DeviceBuffer da = DeviceBuffer::Of(m.a), dh = DeviceBuffer::Of(m.h);
  DeviceBuffer dpaq(n_maps * sizeof(float));
  KernelStatus st;
  const double ms = PaqOnDevice(da, dh, n_maps, n_text, n_vis, from_entropies, dpaq, &st);
  c.Status(st);
  c.Guards("paq", dpaq);
  const std::vector<float> got = dpaq.Download<float>();
  if (!(std::fabs(got[0] - want0) <= kF32Tol.atol + kF32Tol.rtol * std::fabs(want0))) {
    c.Fail("paq[0] " + std::to_string(got[0]) + ", want " + std::to_string(want0));
  }
  for (int map = 1; map < n_maps; ++map) {
    const bool invalid = map < 3 || from_entropies;
    if (invalid != std::isnan(got[map])) {
      c.Fail("paq[" + Str(map) + "] = " + std::to_string(got[map]) +
             (invalid ? ", want NaN" : ", want a value"));
    }
  }
  c.Unchanged("maps", da, m.a.data());
  return c.Result(ms);
}

// ------------------------------------------------------------------ PAQ-softmax

// The kernel runs the reference's F64 arithmetic in its order; only a GPU's exp may differ, by
// 1 ulp in F64, which moves the F32 weight by at most 1 ulp (6e-8 relative).
constexpr Tolerance kPaqSoftmaxTol{1e-7, 1e-6};

// PAQ values as the pruner has them (in [0, 1]), all equal (uniform weights), or spread wide (the
// op takes any finite scores; the max subtraction keeps exp in range).
enum class PaqValues { kUnit, kEqual, kWide };

// temperature τ divides the centred PAQs (1 = the paper's PAQ-softmax; small τ concentrates the
// weights on the top PAQs, large τ flattens them).
CaseResult PaqSoftmaxCase(int n, PaqValues kind, double temperature) {
  std::vector<float> paq = RandomFloats(n, 1300 + n, 0.f, 1.f);
  if (kind == PaqValues::kEqual) std::fill(paq.begin(), paq.end(), 0.375f);
  if (kind == PaqValues::kWide) paq = RandomFloats(n, 1400 + n, -300.f, 300.f);
  std::vector<float> want(n);
  Checker c;
  if (!c.Reference(kernels::PaqSoftmaxWeights(paq.data(), n, temperature, want.data()))) {
    return c.Result(0);
  }
  DeviceBuffer dpaq = DeviceBuffer::Of(paq), dw(n * sizeof(float));
  KernelStatus st;
  const double ms = TimedMs(
      [&] { return PaqSoftmaxWeights(dpaq.as<float>(), n, temperature, dw.as<float>(), nullptr); },
      &st);
  c.Status(st);
  c.Output("weights", dw, want, kPaqSoftmaxTol);
  c.Unchanged("paq", dpaq, paq.data());
  return c.Result(ms);
}

// A non-finite PAQ (NaN: a map that was not a distribution; ±inf) is InvalidArgument for the
// reference; the kernel makes every weight NaN, so the NaN reaches the stage's sync.
CaseResult PaqSoftmaxRejectsCase(float bad, int at) {
  const int n = 9;
  std::vector<float> paq = RandomFloats(n, 1500, 0.f, 1.f);
  paq[at] = bad;
  std::vector<float> unused(n);
  Checker c;
  if (kernels::PaqSoftmaxWeights(paq.data(), n, 1.0, unused.data()).ok()) {
    c.Fail("the reference accepted a non-finite PAQ");
  }
  DeviceBuffer dpaq = DeviceBuffer::Of(paq), dw(n * sizeof(float));
  KernelStatus st;
  const double ms = TimedMs(
      [&] { return PaqSoftmaxWeights(dpaq.as<float>(), n, 1.0, dw.as<float>(), nullptr); }, &st);
  c.Status(st);
  c.Guards("weights", dw);
  for (float w : dw.Download<float>()) {
    if (!std::isnan(w)) c.Fail("a weight is " + std::to_string(w) + ", want NaN throughout");
  }
  c.Unchanged("paq", dpaq, paq.data());
  return c.Result(ms);
}

// ------------------------------------------------------------------ Weighted sums

CaseResult WeightedSumCase(int n_maps, int64_t size, bool pointer_list) {
  const uint64_t seed = 500 + n_maps + size;
  const std::vector<float> maps = RandomFloats(n_maps * size, seed, 0.f, 1.f);
  // Realistic weights: the PAQ-softmax of random PAQs (the reference's, so that only the sum is
  // under test here; the PAQ-softmax kernel has rows of its own).
  const std::vector<float> paq = RandomFloats(n_maps, seed + 1, 0.f, 1.f);
  std::vector<float> weights(n_maps);
  std::vector<float> want(size);
  Checker c;
  if (!c.Reference(kernels::PaqSoftmaxWeights(paq.data(), n_maps, weights.data())) ||
      !c.Reference(
          kernels::WeightedSumContiguous(maps.data(), weights.data(), n_maps, size, want.data()))) {
    return c.Result(0);
  }
  DeviceBuffer dw = DeviceBuffer::Of(weights), dout(size * sizeof(float));
  KernelStatus st;
  double ms = 0;
  if (pointer_list) {
    // Separate allocations, as per-layer maps are; the list itself is a device array.
    std::vector<DeviceBuffer> dmaps;
    std::vector<const float*> ptrs;
    for (int m = 0; m < n_maps; ++m) {
      dmaps.push_back(DeviceBuffer::Of(
          std::vector<float>(maps.begin() + m * size, maps.begin() + (m + 1) * size)));
      ptrs.push_back(dmaps.back().as<float>());
    }
    DeviceBuffer dptrs = DeviceBuffer::Of(ptrs);
    ms = TimedMs(
        [&] {
          return WeightedSumMaps(dptrs.as<const float*>(), dw.as<float>(), n_maps, size,
                                 dout.as<float>(), nullptr);
        },
        &st);
    for (int m = 0; m < n_maps; ++m) {
      c.Unchanged("map " + Str(m), dmaps[m], maps.data() + m * size);
    }
    c.Unchanged("map list", dptrs, ptrs.data());
  } else {
    DeviceBuffer dmaps = DeviceBuffer::Of(maps);
    ms = TimedMs(
        [&] {
          return WeightedSumContiguous(dmaps.as<float>(), dw.as<float>(), n_maps, size,
                                       dout.as<float>(), nullptr);
        },
        &st);
    c.Unchanged("maps", dmaps, maps.data());
  }
  c.Status(st);
  c.Output("out", dout, want, kF32Tol);
  c.Unchanged("weights", dw, weights.data());
  return c.Result(ms);
}

// ------------------------------------------------------------------ Token scores

CaseResult TokenScoresCase(int64_t n_rows, int n_vis, const std::vector<int>& rows) {
  const std::vector<float> map = RandomFloats(n_rows * n_vis, 700 + n_rows + n_vis, 0.f, 1.f);
  std::vector<float> want(n_vis);
  const int n_sel = static_cast<int>(rows.size());
  Checker c;
  const absl::Status ref =
      rows.empty()
          ? kernels::TokenScores(map.data(), n_rows, n_vis, want.data())
          : kernels::TokenScoresOfRows(map.data(), n_rows, n_vis, rows.data(), n_sel, want.data());
  if (!c.Reference(ref)) return c.Result(0);
  DeviceBuffer dmap = DeviceBuffer::Of(map), drows = DeviceBuffer::Of(rows);
  DeviceBuffer dscores(n_vis * sizeof(float));
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return rows.empty()
                   ? TokenScores(dmap.as<float>(), n_rows, n_vis, dscores.as<float>(), nullptr)
                   : TokenScoresOfRows(dmap.as<float>(), n_rows, n_vis, drows.as<int>(), n_sel,
                                       dscores.as<float>(), nullptr);
      },
      &st);
  c.Status(st);
  c.Output("scores", dscores, want, kF32Tol);
  c.Unchanged("map", dmap, map.data());
  if (!rows.empty()) c.Unchanged("rows", drows, rows.data());
  return c.Result(ms);
}

// ------------------------------------------------------------------ Stable top-k

enum class Scores { kDistinct, kTies, kAllEqual, kSpecial };

// kTies: 8 levels, so most of the k-th largest value's copies straddle the cut; kSpecial: 64
// levels with ±0 (one value to the reference), ±inf, the smallest subnormals and the largest
// floats mixed in.
std::vector<float> TopKScores(int n, Scores kind, uint64_t seed) {
  std::vector<float> s = RandomFloats(n, seed, -1.f, 1.f);
  for (int i = 0; i < n; ++i) {
    switch (kind) {
      case Scores::kDistinct:
        break;
      case Scores::kTies:
        s[i] = std::floor(s[i] * 4.f) / 4.f;
        break;
      case Scores::kAllEqual:
        s[i] = 0.5f;
        break;
      case Scores::kSpecial: {
        s[i] = i % 5 == 0 ? kSpecialFloats[(i / 5) % 8] : std::floor(s[i] * 32.f) / 32.f;
        break;
      }
    }
  }
  return s;
}

CaseResult TopKCase(int n, int k, Scores kind) {
  const std::vector<float> scores = TopKScores(n, kind, 900 + n + k);
  std::vector<int> want(k);
  Checker c;
  if (!c.Reference(kernels::StableTopK(scores.data(), n, k, want.data()))) return c.Result(0);
  DeviceBuffer ds = DeviceBuffer::Of(scores), dkept(k * sizeof(int));
  KernelStatus st;
  const double ms =
      TimedMs([&] { return StableTopK(ds.as<float>(), n, k, dkept.as<int>(), nullptr); }, &st);
  c.Status(st);
  OutputKept(c, "kept", dkept, want, scores);
  c.Unchanged("scores", ds, scores.data());
  return c.Result(ms);
}

// A NaN score: the reference rejects it; the kernel marks every kept entry −1.
CaseResult TopKNanCase() {
  const int n = 33, k = 5;
  std::vector<float> scores = TopKScores(n, Scores::kDistinct, 31);
  scores[17] = NAN;
  std::vector<int> unused(k);
  Checker c;
  if (kernels::StableTopK(scores.data(), n, k, unused.data()).ok()) {
    c.Fail("the reference accepted a NaN");
  }
  DeviceBuffer ds = DeviceBuffer::Of(scores), dkept(k * sizeof(int));
  KernelStatus st;
  const double ms =
      TimedMs([&] { return StableTopK(ds.as<float>(), n, k, dkept.as<int>(), nullptr); }, &st);
  c.Status(st);
  c.Guards("kept", dkept);
  for (int v : dkept.Download<int>()) {
    if (v != -1) c.Fail("kept holds " + Str(v) + ", want -1 throughout");
  }
  c.Unchanged("scores", ds, scores.data());
  return c.Result(ms);
}

// ------------------------------------------------------------------ HAP's fused scoring

// PaqSoftmaxSum against the reference's PaqSoftmaxWeights and WeightedSumContiguous, and bit for
// bit against the two kernels it replaces. A NaN PAQ (bad_at ≥ 0) gives NaN weights and sums
// from both.
CaseResult PaqSoftmaxSumCase(int n_maps, int64_t size, double temperature, int bad_at = -1) {
  const uint64_t seed = 1600 + n_maps + size;
  const std::vector<float> maps = RandomFloats(n_maps * size, seed, 0.f, 1.f);
  std::vector<float> paq = RandomFloats(n_maps, seed + 1, 0.f, 1.f);
  if (bad_at >= 0) paq[bad_at] = NAN;
  std::vector<float> weights(n_maps), want(size);
  Checker c;
  if (bad_at < 0 &&
      (!c.Reference(kernels::PaqSoftmaxWeights(paq.data(), n_maps, temperature, weights.data())) ||
       !c.Reference(kernels::WeightedSumContiguous(maps.data(), weights.data(), n_maps, size,
                                                   want.data())))) {
    return c.Result(0);
  }
  DeviceBuffer dmaps = DeviceBuffer::Of(maps), dpaq = DeviceBuffer::Of(paq);
  DeviceBuffer dw(n_maps * sizeof(float)), dout(size * sizeof(float));
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return PaqSoftmaxSum(dmaps.as<float>(), dpaq.as<float>(), n_maps, temperature, size,
                             dw.as<float>(), dout.as<float>(), nullptr);
      },
      &st);
  c.Status(st);
  // The two kernels it replaces, on the same inputs.
  DeviceBuffer dw2(n_maps * sizeof(float)), dout2(size * sizeof(float));
  c.Status(PaqSoftmaxWeights(dpaq.as<float>(), n_maps, temperature, dw2.as<float>(), nullptr));
  c.Status(WeightedSumContiguous(dmaps.as<float>(), dw2.as<float>(), n_maps, size,
                                 dout2.as<float>(), nullptr));
  const std::vector<float> w2 = dw2.Download<float>(), out2 = dout2.Download<float>();
  c.Exact("weights (the PaqSoftmaxWeights kernel's)", dw, w2.data());
  c.Exact("out (the WeightedSumContiguous kernel's)", dout, out2.data());
  if (bad_at < 0) {
    c.Output("weights", dw, weights, kPaqSoftmaxTol);
    c.Output("out", dout, want, kF32Tol);
  } else {
    for (float x : dout.Download<float>()) {
      if (!std::isnan(x)) c.Fail("an element is " + std::to_string(x) + ", want NaN throughout");
    }
  }
  c.Unchanged("maps", dmaps, maps.data());
  c.Unchanged("paq", dpaq, paq.data());
  return c.Result(ms);
}

// TokenScoresTopK against the reference's TokenScores and StableTopK, and bit for bit against the
// two kernels it replaces. ties: the map's entries on a coarse grid, so that scores tie.
CaseResult TokenScoresTopKCase(int64_t n_rows, int n_vis, int k, bool ties) {
  std::vector<float> map = RandomFloats(n_rows * n_vis, 1700 + n_rows + n_vis + k, 0.f, 1.f);
  if (ties) {
    for (float& x : map) x = std::floor(x * 4.f) / 4.f;
  }
  std::vector<float> scores(n_vis);
  std::vector<int> want(k);
  Checker c;
  if (!c.Reference(kernels::TokenScores(map.data(), n_rows, n_vis, scores.data())) ||
      !c.Reference(kernels::StableTopK(scores.data(), n_vis, k, want.data()))) {
    return c.Result(0);
  }
  DeviceBuffer dmap = DeviceBuffer::Of(map);
  DeviceBuffer dscores(n_vis * sizeof(float)), dkept(k * sizeof(int));
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return TokenScoresTopK(dmap.as<float>(), n_rows, n_vis, k, dscores.as<float>(),
                               dkept.as<int>(), nullptr);
      },
      &st);
  c.Status(st);
  DeviceBuffer dscores2(n_vis * sizeof(float)), dkept2(k * sizeof(int));
  c.Status(TokenScores(dmap.as<float>(), n_rows, n_vis, dscores2.as<float>(), nullptr));
  c.Status(StableTopK(dscores2.as<float>(), n_vis, k, dkept2.as<int>(), nullptr));
  const std::vector<float> scores2 = dscores2.Download<float>();
  const std::vector<int> kept2 = dkept2.Download<int>();
  c.Exact("scores (the TokenScores kernel's)", dscores, scores2.data());
  c.Exact("kept (the StableTopK kernel's)", dkept, kept2.data());
  c.Output("scores", dscores, scores, kF32Tol);
  OutputKept(c, "kept", dkept, want, scores);
  c.Unchanged("map", dmap, map.data());
  return c.Result(ms);
}

// TokenScoresTopK that also makes the map's PAQ (a stage whose map is one layer's): the PAQ bit
// for bit the Paq kernel's and within F32 of the reference's, the scores and selection as
// without it. A map of valid rows (MakeMaps), and one with a row off 1 (NaN, as Paq gives).
CaseResult TokenScoresTopKPaqCase(int n_text, int n_vis, int k, bool bad_row) {
  absl::StatusOr<Maps> maps = MakeMaps(1, n_text, n_vis, 1900 + n_text + n_vis);
  Checker c;
  if (!c.Reference(maps.status())) return c.Result(0);
  std::vector<float>& map = maps->a;
  if (bad_row) {
    for (int i = 0; i < n_vis; ++i) map[int64_t{n_text - 1} * n_vis + i] *= 0.5f;
  }
  float want_paq = NAN;
  if (!bad_row && !c.Reference(kernels::PaqReference(map.data(), 1, n_text, n_vis, &want_paq))) {
    return c.Result(0);
  }
  DeviceBuffer dmap = DeviceBuffer::Of(map);
  DeviceBuffer dscores(n_vis * sizeof(float)), dkept(k * sizeof(int)), dpaq(sizeof(float));
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return TokenScoresTopK(dmap.as<float>(), n_text, n_vis, k, dscores.as<float>(),
                               dkept.as<int>(), nullptr, dpaq.as<float>());
      },
      &st);
  c.Status(st);
  DeviceBuffer dscores2(n_vis * sizeof(float)), dkept2(k * sizeof(int)), dpaq2(sizeof(float));
  c.Status(TokenScoresTopK(dmap.as<float>(), n_text, n_vis, k, dscores2.as<float>(),
                           dkept2.as<int>(), nullptr));
  c.Status(Paq(dmap.as<float>(), 1, n_text, n_vis, dpaq2.as<float>(), nullptr));
  c.Exact("paq (the Paq kernel's)", dpaq, dpaq2.Download<float>().data());
  c.Exact("scores (without the PAQ)", dscores, dscores2.Download<float>().data());
  c.Exact("kept (without the PAQ)", dkept, dkept2.Download<int>().data());
  const float got_paq = dpaq.Download<float>()[0];
  if (bad_row) {
    if (!std::isnan(got_paq)) c.Fail("a row summing to 1/2 gave a PAQ of " + StrG(got_paq));
  } else {
    c.Output("paq", dpaq, {want_paq}, kF32Tol);
  }
  c.Unchanged("map", dmap, map.data());
  return c.Result(ms);
}

// PaqSoftmaxSumScoresTopK: a one-layer group's map, its PAQ, scores and selection in one launch,
// byte for byte the PaqSoftmaxSum and TokenScoresTopK (with the PAQ) kernels', and against the
// references; called twice, the counter back at 0 after each call.
CaseResult SumScoresTopKCase(int n_maps, int n_text, int n_vis, int k, double temperature) {
  absl::StatusOr<Maps> maps = MakeMaps(n_maps, n_text, n_vis, 2100 + n_maps + n_vis);
  Checker c;
  if (!c.Reference(maps.status())) return c.Result(0);
  const std::vector<float>& m = maps->a;
  const std::vector<float> paq = RandomFloats(n_maps, 2200 + n_vis, 0.f, 1.f);
  const int64_t size = int64_t{n_text} * n_vis;
  std::vector<float> weights(n_maps), map(size), scores(n_vis);
  std::vector<int> want(k);
  float want_paq = NAN;
  if (!c.Reference(kernels::PaqSoftmaxWeights(paq.data(), n_maps, temperature, weights.data())) ||
      !c.Reference(
          kernels::WeightedSumContiguous(m.data(), weights.data(), n_maps, size, map.data())) ||
      !c.Reference(kernels::PaqReference(map.data(), 1, n_text, n_vis, &want_paq)) ||
      !c.Reference(kernels::TokenScores(map.data(), n_text, n_vis, scores.data())) ||
      !c.Reference(kernels::StableTopK(scores.data(), n_vis, k, want.data()))) {
    return c.Result(0);
  }
  DeviceBuffer dmaps = DeviceBuffer::Of(m), dpaq = DeviceBuffer::Of(paq);
  // The two kernels it stands for.
  DeviceBuffer w2(n_maps * sizeof(float)), out2(size * sizeof(float)), mp2(sizeof(float));
  DeviceBuffer s2(n_vis * sizeof(float)), k2(k * sizeof(int));
  c.Status(PaqSoftmaxSum(dmaps.as<float>(), dpaq.as<float>(), n_maps, temperature, size,
                         w2.as<float>(), out2.as<float>(), nullptr));
  c.Status(TokenScoresTopK(out2.as<float>(), n_text, n_vis, k, s2.as<float>(), k2.as<int>(),
                           nullptr, mp2.as<float>()));
  DeviceBuffer dw(n_maps * sizeof(float)), dout(size * sizeof(float)), dmp(sizeof(float));
  DeviceBuffer ds(n_vis * sizeof(float)), dk(k * sizeof(int));
  DeviceBuffer done = DeviceBuffer::Of(std::vector<unsigned>{0u});
  SumScoresArgs a;
  a.maps = dmaps.as<float>();
  a.paq = dpaq.as<float>();
  a.n_maps = n_maps;
  a.temperature = temperature;
  a.n_text = n_text;
  a.n_vis = n_vis;
  a.k = k;
  a.weights = dw.as<float>();
  a.out = dout.as<float>();
  a.map_paq = dmp.as<float>();
  a.scores = ds.as<float>();
  a.kept = dk.as<int>();
  a.done = done.as<unsigned>();
  double first_ms = 0;
  for (int call = 0; call < 2; ++call) {
    KernelStatus st;
    const double ms = TimedMs([&] { return PaqSoftmaxSumScoresTopK(a, nullptr); }, &st);
    c.Status(st);
    if (call == 0) first_ms = ms;
    const std::string when = call == 0 ? "" : ", called again";
    c.Exact("weights (PaqSoftmaxSum's)" + when, dw, w2.Download<float>().data());
    c.Exact("map (PaqSoftmaxSum's)" + when, dout, out2.Download<float>().data());
    c.Exact("map PAQ (TokenScoresTopK's)" + when, dmp, mp2.Download<float>().data());
    c.Exact("scores (TokenScoresTopK's)" + when, ds, s2.Download<float>().data());
    c.Exact("kept (TokenScoresTopK's)" + when, dk, k2.Download<int>().data());
    if (done.Download<unsigned>()[0] != 0u) c.Fail("the counter is not back at 0" + when);
  }
  c.Output("weights", dw, weights, kPaqSoftmaxTol);
  c.Output("map", dout, map, kF32Tol);
  c.Output("map PAQ", dmp, {want_paq}, kF32Tol);
  c.Output("scores", ds, scores, kF32Tol);
  OutputKept(c, "kept", dk, want, scores);
  c.Unchanged("maps", dmaps, m.data());
  c.Unchanged("paq", dpaq, paq.data());
  return c.Result(first_ms);
}

// ------------------------------------------------------------------ Row gathers

CaseResult GatherCase(int64_t n_rows, size_t row_bytes, const std::vector<int>& idx) {
  const int64_t n_idx = static_cast<int64_t>(idx.size());
  std::vector<unsigned char> src(n_rows * row_bytes);
  const std::vector<float> noise = RandomFloats(static_cast<int64_t>(src.size()), 41 + row_bytes);
  for (size_t b = 0; b < src.size(); ++b) src[b] = static_cast<unsigned char>(noise[b] * 1000.f);
  std::vector<unsigned char> want(n_idx * row_bytes);
  Checker c;
  if (!c.Reference(
          kernels::GatherRows(src.data(), 1, n_rows, row_bytes, idx.data(), n_idx, want.data()))) {
    return c.Result(0);
  }
  DeviceBuffer dsrc = DeviceBuffer::Of(src), didx = DeviceBuffer::Of(idx);
  DeviceBuffer ddst(want.size());
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return GatherRows(dsrc.data(), row_bytes, didx.as<int>(), n_idx, ddst.data(), nullptr);
      },
      &st);
  c.Status(st);
  OutputBytes(c, "dst", ddst, want.data());
  c.Unchanged("src", dsrc, src.data());
  c.Unchanged("idx", didx, idx.data());
  // In place is refused, not raced.
  if (GatherRows(dsrc.data(), row_bytes, didx.as<int>(), n_idx, dsrc.data(), nullptr).ok) {
    c.Fail("an in-place gather was accepted");
  }
  return c.Result(ms);
}

// The compaction after a stage decided on the device: the kept visual rows found from the kept
// list on the device, with the rows before and after the image in place. An entry of −1 (a
// selection that found a NaN) copies row vis_begin, and nothing reads outside src.
CaseResult GatherKeptCase(int n_tokens, size_t row_bytes, int vis_begin, int n_vis,
                          const std::vector<int>& kept) {
  const int n_kept = static_cast<int>(kept.size());
  std::vector<unsigned char> src(static_cast<size_t>(n_tokens) * row_bytes);
  const std::vector<float> noise = RandomFloats(static_cast<int64_t>(src.size()), 57 + row_bytes);
  for (size_t b = 0; b < src.size(); ++b) src[b] = static_cast<unsigned char>(noise[b] * 1000.f);
  const int n_out = n_tokens - n_vis + n_kept;
  std::vector<unsigned char> want(static_cast<size_t>(n_out) * row_bytes);
  Checker c;
  const bool marked = std::any_of(kept.begin(), kept.end(), [&](int k) { return k < 0; });
  if (!marked) {
    if (!c.Reference(kernels::GatherKeptRows(src.data(), n_tokens, row_bytes, vis_begin, n_vis,
                                             kept.data(), n_kept, want.data()))) {
      return c.Result(0);
    }
  } else {  // the reference refuses a −1; the kernel copies row vis_begin for it
    for (int r = 0; r < n_out; ++r) {
      const int from = r < vis_begin            ? r
                       : r < vis_begin + n_kept ? vis_begin + std::max(kept[r - vis_begin], 0)
                                                : r - n_kept + n_vis;
      std::copy_n(src.begin() + static_cast<size_t>(from) * row_bytes, row_bytes,
                  want.begin() + static_cast<size_t>(r) * row_bytes);
    }
  }
  DeviceBuffer dsrc = DeviceBuffer::Of(src), dkept = DeviceBuffer::Of(kept);
  DeviceBuffer ddst(want.size());
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return GatherKeptRows(dsrc.data(), n_tokens, row_bytes, vis_begin, n_vis, dkept.as<int>(),
                              n_kept, ddst.data(), nullptr);
      },
      &st);
  c.Status(st);
  OutputBytes(c, "dst", ddst, want.data());
  c.Unchanged("src", dsrc, src.data());
  c.Unchanged("kept", dkept, kept.data());
  // Out of place only.
  if (GatherKeptRows(dsrc.data(), n_tokens, row_bytes, vis_begin, n_vis, dkept.as<int>(), n_kept,
                     dsrc.data(), nullptr)
          .ok) {
    c.Fail("an in-place compaction was accepted");
  }
  return c.Result(ms);
}

// GatherKeptRowsPair: two arrays of the same rows, each row of its own width (hidden states of
// 256 bytes, positions of 4; an odd width in bytes), in one launch: each the bytes GatherKeptRows
// gives it alone (and so the reference's).
CaseResult GatherKeptPairCase(int n_tokens, size_t a_row_bytes, size_t b_row_bytes, int vis_begin,
                              int n_vis, const std::vector<int>& kept) {
  const int n_kept = static_cast<int>(kept.size());
  const int n_out = n_tokens - n_vis + n_kept;
  Checker c;
  std::vector<unsigned char> host[2];
  std::vector<unsigned char> want[2];
  const size_t row_bytes[2] = {a_row_bytes, b_row_bytes};
  for (int j = 0; j < 2; ++j) {
    host[j].resize(static_cast<size_t>(n_tokens) * row_bytes[j]);
    const std::vector<float> noise =
        RandomFloats(static_cast<int64_t>(host[j].size()), 91 + j + row_bytes[j]);
    for (size_t b = 0; b < host[j].size(); ++b) {
      host[j][b] = static_cast<unsigned char>(noise[b] * 1000.f);
    }
    want[j].resize(static_cast<size_t>(n_out) * row_bytes[j]);
    if (!c.Reference(kernels::GatherKeptRows(host[j].data(), n_tokens, row_bytes[j], vis_begin,
                                             n_vis, kept.data(), n_kept, want[j].data()))) {
      return c.Result(0);
    }
  }
  DeviceBuffer da = DeviceBuffer::Of(host[0]), db = DeviceBuffer::Of(host[1]);
  DeviceBuffer dkept = DeviceBuffer::Of(kept);
  DeviceBuffer a_out(want[0].size()), b_out(want[1].size());
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return GatherKeptRowsPair(da.data(), a_row_bytes, a_out.data(), db.data(), b_row_bytes,
                                  b_out.data(), n_tokens, vis_begin, n_vis, dkept.as<int>(), n_kept,
                                  nullptr);
      },
      &st);
  c.Status(st);
  OutputBytes(c, "a", a_out, want[0].data());
  OutputBytes(c, "b", b_out, want[1].data());
  c.Unchanged("a src", da, host[0].data());
  c.Unchanged("b src", db, host[1].data());
  if (GatherKeptRowsPair(da.data(), a_row_bytes, a_out.data(), db.data(), b_row_bytes, db.data(),
                         n_tokens, vis_begin, n_vis, dkept.as<int>(), n_kept, nullptr)
          .ok) {
    c.Fail("an in-place compaction of b was accepted");
  }
  return c.Result(ms);
}

// The entry points' argument checks: each call below must fail before it launches anything.
CaseResult RejectsBadArgumentsCase() {
  DeviceBuffer buf(4096);
  float* f = buf.as<float>();
  int* i = buf.as<int>();
  TextVisualAttentionArgs a;
  a.q_text = a.k_vis = a.lse = f;
  a.out = f;
  a.n_text = a.n_vis = a.n_heads = a.n_kv_heads = 2;
  a.head_dim = 4;
  a.scale = 0.5f;
  Checker c;
  auto expect_error = [&](const char* what, const KernelStatus& st) {
    if (st.ok) c.Fail(std::string(what) + " was accepted");
  };
  TextVisualAttentionArgs bad = a;
  bad.head_dim = kTextVisualAttentionMaxHeadDim + 1;
  expect_error("TextVisualAttention head_dim 257", TextVisualAttention(bad, nullptr));
  bad = a;
  bad.n_kv_heads = 3;
  expect_error("TextVisualAttention 2 heads over 3 kv heads", TextVisualAttention(bad, nullptr));
  bad = a;
  bad.renormalize = false;
  bad.row_entropy = buf.as<double>();
  expect_error("TextVisualAttention entropies without renormalize",
               TextVisualAttention(bad, nullptr));
  bad = a;
  bad.q_stride = 7;
  expect_error("TextVisualAttention q_stride 7 < 8", TextVisualAttention(bad, nullptr));
  bad = a;
  bad.scale = INFINITY;
  expect_error("TextVisualAttention scale inf", TextVisualAttention(bad, nullptr));
  expect_error("Paq 0 maps", Paq(f, 0, 2, 2, f, nullptr));
  expect_error("PaqFromRowEntropies null entropies",
               PaqFromRowEntropies(f, nullptr, 1, 2, 2, f, nullptr));
  expect_error("WeightedSumContiguous null weights",
               WeightedSumContiguous(f, nullptr, 2, 8, f, nullptr));
  expect_error("TokenScoresOfRows null rows", TokenScoresOfRows(f, 2, 2, nullptr, 1, f, nullptr));
  expect_error("StableTopK k > n", StableTopK(f, 4, 5, i, nullptr));
  expect_error("StableTopK k < 0", StableTopK(f, 4, -1, i, nullptr));
  expect_error("GatherRows n_idx < 0", GatherRows(f, 4, i, -1, f + 512, nullptr));
  expect_error("GatherRows src inside dst", GatherRows(f + 4, 4, i, 8, f, nullptr));
  expect_error("PaqSoftmaxWeights n 0", PaqSoftmaxWeights(f, 0, 1.0, f + 8, nullptr));
  expect_error("PaqSoftmaxWeights null weights", PaqSoftmaxWeights(f, 3, 1.0, nullptr, nullptr));
  expect_error("PaqSoftmaxWeights temperature 0", PaqSoftmaxWeights(f, 3, 0.0, f + 8, nullptr));
  expect_error("PaqSoftmaxWeights temperature -1", PaqSoftmaxWeights(f, 3, -1.0, f + 8, nullptr));
  expect_error("PaqSoftmaxWeights temperature NaN", PaqSoftmaxWeights(f, 3, NAN, f + 8, nullptr));
  expect_error("PaqSoftmaxWeights temperature inf",
               PaqSoftmaxWeights(f, 3, INFINITY, f + 8, nullptr));
  expect_error("PaqSoftmaxSum over 1024 maps",
               PaqSoftmaxSum(f, f, kPaqSoftmaxSumMaxMaps + 1, 1.0, 1, f, f, nullptr));
  expect_error("PaqSoftmaxSum temperature 0", PaqSoftmaxSum(f, f, 2, 0.0, 4, f + 8, f, nullptr));
  expect_error("PaqSoftmaxSum null out", PaqSoftmaxSum(f, f, 2, 1.0, 4, f + 8, nullptr, nullptr));
  expect_error("TokenScoresTopK k > n_vis", TokenScoresTopK(f, 2, 4, 5, f + 8, i, nullptr));
  expect_error("TokenScoresTopK k 0", TokenScoresTopK(f, 2, 4, 0, f + 8, i, nullptr));
  expect_error("TokenScoresTopK over 1024 tokens",
               TokenScoresTopK(f, 1, kTokenScoresTopKMaxTokens + 1, 1, f, i, nullptr));
  SumScoresArgs sum;
  sum.maps = f;
  sum.paq = f;
  sum.n_maps = 2;
  sum.n_text = 2;
  sum.n_vis = 4;
  sum.k = 2;
  sum.weights = f + 8;
  sum.out = f + 16;
  sum.map_paq = f + 24;
  sum.scores = f + 32;
  sum.kept = i;
  expect_error("PaqSoftmaxSumScoresTopK without its counter",
               PaqSoftmaxSumScoresTopK(sum, nullptr));
  sum.done = reinterpret_cast<unsigned*>(i + 8);
  sum.k = 5;
  expect_error("PaqSoftmaxSumScoresTopK k > n_vis", PaqSoftmaxSumScoresTopK(sum, nullptr));
  sum.k = 2;
  sum.temperature = 0.0;
  expect_error("PaqSoftmaxSumScoresTopK temperature 0", PaqSoftmaxSumScoresTopK(sum, nullptr));
  return c.Result(0);
}

std::vector<int> Range(int begin, int end, int step) {
  std::vector<int> v;
  for (int i = begin; i < end; i += step) v.push_back(i);
  return v;
}

}  // namespace

void AddPruneCases(std::vector<Case>& cases) {
  // n_text, n_vis, heads/kv heads, head_dim, renormalize, entropies, padding.
  for (const AttentionShape& s : {AttentionShape{1, 7, 4, 4, 10, true, true, 0},
                                  AttentionShape{5, 577, 8, 2, 64, true, true, 3},
                                  AttentionShape{33, 576, 8, 2, 64, true, true, 0},
                                  AttentionShape{33, 577, 4, 4, 10, true, false, 5},
                                  AttentionShape{5, 7, 8, 2, 64, false, false, 0},
                                  AttentionShape{33, 577, 4, 4, 10, false, false, 2},
                                  AttentionShape{1, 576, 8, 2, 64, false, false, 1},
                                  AttentionShape{5, 1, 4, 2, 10, true, true, 0},
                                  AttentionShape{9, 65, 4, 1, 256, true, true, 0},
                                  AttentionShape{8, 33, 8, 8, 128, false, false, 0},
                                  // VisionZip's CLS attention: row 0 over every token of CLIP-L.
                                  AttentionShape{1, 577, 16, 16, 64, true, false, 0}}) {
    cases.push_back({AttentionName(s), {"TextVisualAttentionKernel"}, [=] {
                       return TextVisualAttentionCase(s);
                     }});
  }

  // The heads' PAQ made by each head's last block: one row per block and one text row (a block
  // per head), 8 heads on 2 kv heads in strided views, 32 heads at LLaVA's shapes after HAP kept
  // 64, a single visual token, head_dim 256.
  for (const AttentionShape& s : {AttentionShape{1, 7, 4, 4, 10, true, true, 0},
                                  AttentionShape{33, 576, 8, 2, 64, true, true, 3},
                                  AttentionShape{32, 64, 32, 32, 128, true, true, 0},
                                  AttentionShape{5, 1, 4, 2, 10, true, true, 0},
                                  AttentionShape{9, 65, 4, 1, 256, true, true, 0}}) {
    cases.push_back({"TextVisualAttentionPaq" + AttentionName(s).substr(19),
                     {"TextVisualAttentionKernel", "PaqKernel"},
                     [=] { return TextVisualAttentionPaqCase(s); }});
  }

  cases.push_back(
      {"Prune entry points reject bad arguments", {}, [] { return RejectsBadArgumentsCase(); }});

  for (bool from_h : {false, true}) {
    const std::string op = from_h ? "PaqFromRowEntropies " : "Paq ";
    for (auto [n_maps, n_text, n_vis] :
         {std::tuple{8, 33, 577}, {4, 1, 7}, {5, 5, 576}, {3, 33, 7}}) {
      cases.push_back({op + Str(n_maps) + "x" + Str(n_text) + "x" + Str(n_vis), {"PaqKernel"}, [=] {
                         return PaqCase(n_maps, n_text, n_vis, from_h);
                       }});
    }
    cases.push_back(
        {op + "invalid maps give NaN", {"PaqKernel"}, [=] { return PaqRejectsCase(from_h); }});
  }

  const char* paq_kinds[] = {"unit", "equal", "wide"};
  // τ = 1 (the paper's) and τ ≠ 1 at both ends of the request range [0.01, 100] and between,
  // on odd candidate counts too.
  for (auto [n, kind, tau] : {std::tuple{1, PaqValues::kUnit, 1.0},
                              {2, PaqValues::kUnit, 1.0},
                              {7, PaqValues::kUnit, 1.0},
                              {32, PaqValues::kUnit, 1.0},
                              {33, PaqValues::kWide, 1.0},
                              {100, PaqValues::kUnit, 1.0},
                              {28, PaqValues::kEqual, 1.0},
                              {1, PaqValues::kUnit, 0.05},
                              {3, PaqValues::kUnit, 0.05},
                              {7, PaqValues::kUnit, 0.01},
                              {32, PaqValues::kUnit, 0.05},
                              {33, PaqValues::kUnit, 0.3},
                              {97, PaqValues::kUnit, 0.01},
                              {5, PaqValues::kUnit, 100.0},
                              {33, PaqValues::kWide, 0.01},
                              {17, PaqValues::kWide, 2.5},
                              {9, PaqValues::kEqual, 0.01}}) {
    cases.push_back({"PaqSoftmaxWeights n" + Str(n) + " " + paq_kinds[static_cast<int>(kind)] +
                         (tau == 1.0 ? std::string() : " tau " + StrG(tau)),
                     {"PaqSoftmaxKernel"},
                     [=] { return PaqSoftmaxCase(n, kind, tau); }});
  }
  for (auto [bad, at, what] :
       {std::tuple{NAN, 0, "NaN first"}, {INFINITY, 8, "inf last"}, {-INFINITY, 4, "-inf"}}) {
    cases.push_back({std::string("PaqSoftmaxWeights ") + what + " gives NaN weights",
                     {"PaqSoftmaxKernel"},
                     [=] { return PaqSoftmaxRejectsCase(bad, at); }});
  }

  for (auto [n_maps, size, list] : {std::tuple{8, int64_t{33 * 577}, false},
                                    {3, int64_t{5 * 7}, true},
                                    {28, int64_t{33 * 576}, true},
                                    {1, int64_t{577}, false}}) {
    cases.push_back({std::string(list ? "WeightedSumMaps " : "WeightedSumContiguous ") +
                         Str(n_maps) + "x" + Str(size),
                     {"WeightedSumKernel"},
                     [=] { return WeightedSumCase(n_maps, size, list); }});
  }

  for (auto [n_maps, size, tau] : {std::tuple{32, int64_t{32 * 576}, 1.0},
                                   {28, int64_t{33 * 577}, 0.05},
                                   {1, int64_t{5}, 1.0},
                                   {7, int64_t{3 * 9000}, 2.5}}) {
    cases.push_back({"PaqSoftmaxSum " + Str(n_maps) + "x" + Str(size) +
                         (tau == 1.0 ? std::string() : " tau " + StrG(tau)),
                     {"PaqSoftmaxSumKernel"},
                     [=] { return PaqSoftmaxSumCase(n_maps, size, tau); }});
  }
  cases.push_back({"PaqSoftmaxSum NaN PAQ gives NaN throughout", {"PaqSoftmaxSumKernel"}, [] {
                     return PaqSoftmaxSumCase(9, 33 * 7, 1.0, 4);
                   }});
  for (auto [n_rows, n_vis, k, ties] : {std::tuple{int64_t{32}, 576, 32, false},
                                        {int64_t{33}, 577, 192, true},
                                        {int64_t{1}, 7, 7, false},
                                        {int64_t{8 * 33}, 1024, 1, true},
                                        {int64_t{5}, 31, 30, true}}) {
    cases.push_back({"TokenScoresTopK " + Str(n_rows) + "x" + Str(n_vis) + " k" + Str(k) +
                         (ties ? " ties" : ""),
                     {"TokenScoresTopKKernel"},
                     [=] { return TokenScoresTopKCase(n_rows, n_vis, k, ties); }});
  }

  // With the map's PAQ: fewer tokens than PaqKernel has threads, more, a whole 1024, a bad row.
  for (auto [n_text, n_vis, k, bad_row] : {std::tuple{16, 64, 32, false},
                                           {32, 576, 32, false},
                                           {7, 1024, 512, false},
                                           {5, 300, 10, true}}) {
    cases.push_back({"TokenScoresTopK with the PAQ " + Str(n_text) + "x" + Str(n_vis) + " k" +
                         Str(k) + (bad_row ? " bad row" : ""),
                     {"TokenScoresTopKKernel", "PaqKernel"},
                     [=] { return TokenScoresTopKPaqCase(n_text, n_vis, k, bad_row); }});
  }

  // The map made, weighed and decided in one launch: LLaVA's 32 heads at the first layers' token
  // counts (576 tokens: 32 blocks, a thread per token), a few maps of 7 tokens (one block), the
  // most tokens, one text row, a concentrated PAQ-softmax.
  for (auto [n_maps, n_text, n_vis, k, tau] : {std::tuple{32, 32, 576, 144, 1.0},
                                               {32, 32, 64, 36, 1.0},
                                               {8, 5, 7, 3, 1.0},
                                               {4, 9, 1024, 512, 0.05},
                                               {3, 1, 300, 10, 1.0}}) {
    cases.push_back({"PaqSoftmaxSumScoresTopK " + Str(n_maps) + "x" + Str(n_text) + "x" +
                         Str(n_vis) + " k" + Str(k) + (tau == 1.0 ? "" : " tau " + StrG(tau)),
                     {"PaqSoftmaxSumScoresTopKKernel"},
                     [=] { return SumScoresTopKCase(n_maps, n_text, n_vis, k, tau); }});
  }

  for (auto [n_rows, n_vis, rows] : {std::tuple{int64_t{33}, 577, std::vector<int>{}},
                                     {int64_t{8 * 33}, 576, std::vector<int>{}},
                                     {int64_t{1}, 7, std::vector<int>{}},
                                     {int64_t{33}, 577, std::vector<int>{32, 0, 5, 5, 17}},
                                     {int64_t{8 * 33}, 576, Range(1, 8 * 33, 3)},
                                     {int64_t{5}, 7, std::vector<int>{4}}}) {
    cases.push_back({std::string(rows.empty() ? "TokenScores " : "TokenScoresOfRows ") +
                         Str(n_rows) + "x" + Str(n_vis) +
                         (rows.empty() ? "" : " sel " + Str(rows.size())),
                     {"TokenScoresKernel"},
                     [=] { return TokenScoresCase(n_rows, n_vis, rows); }});
  }

  const char* kinds[] = {"distinct", "ties", "all equal", "special"};
  for (auto [n, k, kind] : {std::tuple{577, 1, Scores::kDistinct},
                            {577, 577, Scores::kDistinct},
                            {576, 144, Scores::kDistinct},
                            {576, 100, Scores::kTies},
                            {576, 1, Scores::kTies},
                            {576, 576, Scores::kTies},
                            {7, 3, Scores::kAllEqual},
                            {1, 1, Scores::kDistinct},
                            {4097, 4096, Scores::kTies},
                            {10000, 2500, Scores::kSpecial},
                            {9973, 1, Scores::kSpecial},
                            {576, 100, Scores::kSpecial},
                            {1024, 512, Scores::kSpecial},
                            {1025, 300, Scores::kTies},
                            {33, 0, Scores::kDistinct}}) {
    // Up to 1024 scores the rank kernel, past that the radix select.
    const char* kernel = n <= 1024 ? "StableTopKByRankKernel" : "StableTopKKernel";
    cases.push_back({"StableTopK n" + Str(n) + " k" + Str(k) + " " + kinds[static_cast<int>(kind)],
                     k > 0 ? std::vector<std::string>{kernel} : std::vector<std::string>{},
                     [=] { return TopKCase(n, k, kind); }});
  }
  cases.push_back(
      {"StableTopK NaN marks kept -1", {"StableTopKByRankKernel"}, [] { return TopKNanCase(); }});

  // n_rows, row_bytes (256: F32 rows of 64 in 16-byte units; 148: 37 floats in 4-byte units;
  // 4: I32 positions; 6: 3 F16s, byte units), indices (ascending as after a top-k, or any).
  for (auto [n_rows, row_bytes, idx] :
       {std::tuple{int64_t{40}, size_t{256}, Range(0, 40, 3)},
        {int64_t{13}, size_t{148}, std::vector<int>{12, 0, 5, 5, 7}},
        {int64_t{577}, size_t{4}, Range(2, 577, 4)},
        {int64_t{9}, size_t{6}, std::vector<int>{8, 1, 2, 3, 3}}}) {
    cases.push_back(
        {"GatherRows " + Str(n_rows) + "x" + Str(row_bytes) + "B idx " + Str(idx.size()),
         {"GatherRowsKernel"},
         [=] { return GatherCase(n_rows, row_bytes, idx); }});
  }
  // n_tokens, row_bytes, vis_begin, n_vis, kept: LLaVA's layout (hidden rows, positions), an image
  // at the start or the end, every token kept, none kept, a −1 list.
  for (auto [n_tokens, row_bytes, vis_begin, n_vis, kept] :
       {std::tuple{610, size_t{256}, 5, 576, Range(1, 576, 18)},
        {610, size_t{4}, 5, 576, Range(1, 576, 18)},
        {70, size_t{148}, 0, 64, Range(0, 64, 1)},
        {70, size_t{6}, 6, 64, std::vector<int>{}},
        {40, size_t{256}, 3, 30, Range(29, 30, 1)},
        {40, size_t{256}, 3, 30, std::vector<int>{-1, -1, -1}}}) {
    cases.push_back({"GatherKeptRows " + Str(n_tokens) + "x" + Str(row_bytes) + "B vis " +
                         Str(vis_begin) + "+" + Str(n_vis) + " kept " + Str(kept.size()) +
                         (!kept.empty() && kept[0] < 0 ? " (-1)" : ""),
                     {"GatherKeptRowsKernel"},
                     [=] { return GatherKeptCase(n_tokens, row_bytes, vis_begin, n_vis, kept); }});
  }
  for (auto [n_tokens, a_bytes, b_bytes, vis_begin, n_vis, kept] :
       {std::tuple{610, size_t{256}, size_t{4}, 5, 576, Range(1, 576, 18)},
        {70, size_t{6}, size_t{12}, 6, 64, Range(3, 64, 5)},
        {40, size_t{4}, size_t{256}, 0, 30, std::vector<int>{}}}) {
    cases.push_back(
        {"GatherKeptRowsPair " + Str(n_tokens) + " rows of " + Str(a_bytes) + "B and " +
             Str(b_bytes) + "B vis " + Str(vis_begin) + "+" + Str(n_vis) + " kept " +
             Str(kept.size()),
         {"GatherKeptRowsPairKernel"},
         [=] { return GatherKeptPairCase(n_tokens, a_bytes, b_bytes, vis_begin, n_vis, kept); }});
  }
}

}  // namespace hap::cuda::parity
