// Parity rows: prefill attention (with log-sum-exp) against cpu::AttentionReference, decode
// attention over span lists against cpu::DecodeAttentionReference (both accumulate in F64).
//
// Tolerance: kF32Tol (atol 1e-5, rtol 1e-4) for every output, out and lse, F32 and BF16 KV
// alike, except the narrow path's out (BF16/F16 operands, NarrowAttention): kNarrowOutTol
// (atol 4e-3, rtol 1e-2). The reference rounds q, k, v and the probabilities as the kernel does,
// but from probabilities computed in F64 rather than F32: where the two fall on either side of
// a rounding boundary, one probability differs by one unit in the last place (2^-8 of it for
// BF16), so out can differ by that much of one value row; a wrong rounding, row or head is off
// by orders of magnitude more. The kernels differ from the references only in F32 rounding (dot
// products in F32, an online softmax rescaled per tile/chunk, sums in another order); BF16 caches
// are compared on the same bit patterns the reference widens, exactly, so BF16 storage adds no
// error of its own.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/decode_attention.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/parity/rows.h"
#include "kernels/cuda/rope.h"

namespace hap::cuda::parity {
namespace {

struct PrefillShape {
  int n_q, n_kv, n_heads, n_kv_heads, head_dim;
  bool causal;
  int causal_offset;
  bool lse;
  // q uniform in [-q_range, q_range) and k, v in [-1, 1); scale 1 / sqrt(head_dim) unless set.
  float q_range = 1.f;
  float scale = 0.f;
  // kBF16 / kF16: the narrow path, its scores in chunks of chunk_bytes (0: the default bound).
  DType operands = DType::kF32;
  int64_t chunk_bytes = 0;
  bool flash = false;  // narrow operands through FlashAttention rather than NarrowAttention
  std::vector<int> segments = {};  // lengths of the segments (summing to n_q = n_kv), or none
  int key_groups = 0;              // FlashAttention's (0: by the shape)
};

inline constexpr Tolerance kNarrowOutTol{4e-3, 1e-2};

std::string PrefillName(const PrefillShape& s) {
  std::string name = "Attention " + std::to_string(s.n_q) + "x" + std::to_string(s.n_kv) + " h" +
                     std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv_heads) + " d" +
                     std::to_string(s.head_dim);
  name += s.causal ? " causal+" + std::to_string(s.causal_offset) : " full";
  name += s.lse ? " lse" : " no-lse";
  if (s.scale != 0.f) name += " scale " + std::to_string(static_cast<int>(s.scale));
  if (s.operands != DType::kF32) {
    name += ' ';
    name += DTypeName(s.operands);
    name += " operands";
  }
  if (s.chunk_bytes != 0) name += " chunks of " + std::to_string(s.chunk_bytes) + " B";
  if (s.flash) name += " flash";
  if (s.key_groups != 0) name += absl::StrCat(", key groups ", s.key_groups);
  if (!s.segments.empty()) {
    name += " segments";
    for (int len : s.segments) name += " " + std::to_string(len);
  }
  return name;
}

CaseResult PrefillCase(const PrefillShape& s) {
  const int64_t q_elems = int64_t{s.n_q} * s.n_heads * s.head_dim;
  const int64_t kv_elems = int64_t{s.n_kv} * s.n_kv_heads * s.head_dim;
  const uint64_t seed = 1000 + s.n_q * 31 + s.n_kv * 7 + s.head_dim;
  const std::vector<float> q = RandomFloats(q_elems, seed, -s.q_range, s.q_range);
  const std::vector<float> k = RandomFloats(kv_elems, seed + 1);
  const std::vector<float> v = RandomFloats(kv_elems, seed + 2);

  AttentionArgs args{
      .n_q = s.n_q,
      .n_kv = s.n_kv,
      .n_heads = s.n_heads,
      .n_kv_heads = s.n_kv_heads,
      .head_dim = s.head_dim,
      .scale = s.scale != 0.f ? s.scale : 1.f / std::sqrt(static_cast<float>(s.head_dim)),
      .causal = s.causal,
      .causal_offset = s.causal_offset,
      .operands = s.operands};
  std::vector<int32_t> bounds = {0};
  for (int len : s.segments) bounds.push_back(bounds.back() + len);
  args.n_segments = static_cast<int>(s.segments.size());

  std::vector<float> want_out(q_elems), want_lse(int64_t{s.n_heads} * s.n_q);
  AttentionArgs ref = args;
  ref.q = q.data();
  ref.k = k.data();
  ref.v = v.data();
  ref.out = want_out.data();
  ref.lse = want_lse.data();
  ref.segment_bounds = args.n_segments > 0 ? bounds.data() : nullptr;
  cpu::AttentionReference(ref);

  DeviceBuffer dq = DeviceBuffer::Of(q), dk = DeviceBuffer::Of(k), dv = DeviceBuffer::Of(v);
  DeviceBuffer dout(want_out.size() * sizeof(float)), dlse(want_lse.size() * sizeof(float));
  args.q = dq.as<float>();
  args.k = dk.as<float>();
  args.v = dv.as<float>();
  args.out = dout.as<float>();
  args.lse = s.lse ? dlse.as<float>() : nullptr;
  const DeviceBuffer dbounds = DeviceBuffer::Of(bounds);
  args.segment_bounds = args.n_segments > 0 ? dbounds.as<int32_t>() : nullptr;
  Checker c;
  KernelStatus st;
  double ms = 0;
  if (s.operands == DType::kF32) {
    ms = TimedMs([&] { return Attention(args, nullptr); }, &st);
  } else if (s.flash) {
    // With the output also rounded (BF16) for the o product, the copy must be the F32 output's
    // rounding.
    const ElemType type = s.operands == DType::kBF16 ? ElemType::kBF16 : ElemType::kF16;
    DeviceBuffer rounded(want_out.size() * sizeof(uint16_t));
    ms = TimedMs(
        [&] {
          return FlashAttention(args, type, nullptr, rounded.data(), ElemType::kBF16, s.key_groups);
        },
        &st);
    const std::vector<float> got = dout.Download<float>();
    std::vector<uint16_t> want_rounded(got.size());
    ConvertFromF32(DType::kBF16, got.data(), want_rounded.data(), got.size());
    if (rounded.Download<uint16_t>() != want_rounded) c.Fail("the rounded output differs");
  } else {
    std::unique_ptr<Gemm> gemm;
    c.Status(Gemm::Create(nullptr, &gemm));
    if (gemm == nullptr) return c.Result(0);
    const int64_t chunk = s.chunk_bytes != 0 ? s.chunk_bytes : kNarrowAttentionChunkBytes;
    DeviceBuffer workspace(NarrowAttentionWorkspaceBytes(args, chunk));
    const ElemType type = s.operands == DType::kBF16 ? ElemType::kBF16 : ElemType::kF16;
    ms = TimedMs([&] { return NarrowAttention(args, type, *gemm, workspace.data(), chunk); }, &st);
  }
  c.Status(st);
  c.Output("out", dout, want_out, s.operands == DType::kF32 ? kF32Tol : kNarrowOutTol);
  if (s.lse) c.Output("lse", dlse, want_lse, kF32Tol);
  c.Unchanged("q", dq, q.data());
  c.Unchanged("k", dk, k.data());
  c.Unchanged("v", dv, v.data());
  return c.Result(ms);
}

struct FlashRopeShape {
  int n, n_heads, n_kv_heads, head_dim;
  bool causal;
  // RopeTable covers positions [0, table_positions); rows past it take the F64 path.
  int table_positions;
  DType operands = DType::kBF16;
  std::vector<int> segments = {};  // lengths (summing to n): each restarts its positions at 0
  int key_groups = 0;              // both launches' (0: by the shape)
};

std::string FlashRopeName(const FlashRopeShape& s) {
  std::string name = "FlashAttentionRope " + std::to_string(s.n) + " rows h" +
                     std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv_heads) + " d" +
                     std::to_string(s.head_dim) + (s.causal ? " causal " : " full ") +
                     std::string(DTypeName(s.operands)) + ", table of " +
                     std::to_string(s.table_positions);
  if (!s.segments.empty()) {
    name += ", segments";
    for (int len : s.segments) name += " " + std::to_string(len);
  }
  if (s.key_groups != 0) name += absl::StrCat(", key groups ", s.key_groups);
  return name;
}

// FlashAttentionRope against what it stands for, RopePair and then FlashAttention (out, its
// rounded copy, lse, the rotated q and k and v's copy: byte for byte), and against the CPU's
// Rope and attention reference. Positions ascend with gaps, as a pruned prompt's do, past the
// table where it is short.
CaseResult FlashRopeCase(const FlashRopeShape& s) {
  const int64_t q_elems = int64_t{s.n} * s.n_heads * s.head_dim;
  const int64_t kv_elems = int64_t{s.n} * s.n_kv_heads * s.head_dim;
  const uint64_t seed = 2000 + s.n * 13 + s.head_dim;
  const std::vector<float> q = RandomFloats(q_elems, seed, -2.f, 2.f);
  const std::vector<float> k = RandomFloats(kv_elems, seed + 1, -2.f, 2.f);
  const std::vector<float> v = RandomFloats(kv_elems, seed + 2);
  std::vector<int32_t> bounds = {0};
  for (int len : s.segments) bounds.push_back(bounds.back() + len);
  if (s.segments.empty()) bounds.push_back(s.n);
  std::vector<int32_t> pos(s.n);
  for (size_t g = 0; g + 1 < bounds.size(); ++g) {
    for (int r = bounds[g]; r < bounds[g + 1]; ++r) {
      const int i = r - bounds[g];
      pos[r] = 1 + i * 3 + (i % 2);
    }
  }
  const float theta = 1e4f;
  const ElemType type = s.operands == DType::kBF16 ? ElemType::kBF16 : ElemType::kF16;
  AttentionArgs args{.n_q = s.n,
                     .n_kv = s.n,
                     .n_heads = s.n_heads,
                     .n_kv_heads = s.n_kv_heads,
                     .head_dim = s.head_dim,
                     .scale = 1.f / std::sqrt(static_cast<float>(s.head_dim)),
                     .causal = s.causal,
                     .operands = s.operands};
  args.n_segments = static_cast<int>(s.segments.size());
  Checker c;

  // The CPU: q and k rotated, then the attention of the narrow operands.
  std::vector<float> cq = q, ck = k;
  if (!c.Reference(cpu::Rope(cq.data(), pos.data(), s.n, s.n_heads, s.head_dim, theta)) ||
      !c.Reference(cpu::Rope(ck.data(), pos.data(), s.n, s.n_kv_heads, s.head_dim, theta))) {
    return c.Result(0);
  }
  std::vector<float> want_out(q_elems), want_lse(int64_t{s.n_heads} * s.n);
  AttentionArgs ref = args;
  ref.q = cq.data();
  ref.k = ck.data();
  ref.v = v.data();
  ref.out = want_out.data();
  ref.lse = want_lse.data();
  ref.segment_bounds = args.n_segments > 0 ? bounds.data() : nullptr;
  cpu::AttentionReference(ref);

  const DeviceBuffer dpos = DeviceBuffer::Of(pos), dbounds = DeviceBuffer::Of(bounds);
  args.segment_bounds = args.n_segments > 0 ? dbounds.as<int32_t>() : nullptr;
  // Two launches: RopePair in place, then FlashAttention.
  DeviceBuffer rq = DeviceBuffer::Of(q), rk = DeviceBuffer::Of(k), rv = DeviceBuffer::Of(v);
  DeviceBuffer r_out(q_elems * sizeof(float)), r_lse(want_lse.size() * sizeof(float));
  DeviceBuffer r_rounded(q_elems * sizeof(uint16_t));
  c.Status(RopePair(rq.as<float>(), s.n_heads, rk.as<float>(), s.n_kv_heads, dpos.as<int32_t>(),
                    s.n, s.head_dim, theta, nullptr));
  AttentionArgs two = args;
  two.q = rq.as<float>();
  two.k = rk.as<float>();
  two.v = rv.as<float>();
  two.out = r_out.as<float>();
  two.lse = r_lse.as<float>();
  c.Status(FlashAttention(two, type, nullptr, r_rounded.data(), ElemType::kBF16, s.key_groups));

  // One.
  const std::vector<float> unwritten_q(q_elems, NAN), unwritten_kv(kv_elems, NAN);
  DeviceBuffer dq = DeviceBuffer::Of(q), dk = DeviceBuffer::Of(k), dv = DeviceBuffer::Of(v);
  DeviceBuffer q_out = DeviceBuffer::Of(unwritten_q), k_out = DeviceBuffer::Of(unwritten_kv),
               v_out = DeviceBuffer::Of(unwritten_kv);
  DeviceBuffer dout(q_elems * sizeof(float)), dlse(want_lse.size() * sizeof(float));
  DeviceBuffer rounded(q_elems * sizeof(uint16_t));
  const size_t table_bytes =
      std::max<size_t>(1, sizeof(float) * s.table_positions * (s.head_dim / 2));
  DeviceBuffer cos_table(table_bytes), sin_table(table_bytes);
  c.Status(RopeTable(cos_table.as<float>(), sin_table.as<float>(), s.table_positions, s.head_dim,
                     theta, nullptr));
  FlashRopeArgs rope;
  rope.positions = dpos.as<int32_t>();
  rope.cos_table = cos_table.as<float>();
  rope.sin_table = sin_table.as<float>();
  rope.table_positions = s.table_positions;
  rope.theta = theta;
  rope.q_out = q_out.as<float>();
  rope.k_out = k_out.as<float>();
  rope.v_out = v_out.as<float>();
  AttentionArgs one = args;
  one.q = dq.as<float>();
  one.k = dk.as<float>();
  one.v = dv.as<float>();
  one.out = dout.as<float>();
  one.lse = dlse.as<float>();
  KernelStatus st;
  const double ms = TimedMs(
      [&] {
        return FlashAttentionRope(one, rope, type, nullptr, rounded.data(), ElemType::kBF16,
                                  s.key_groups);
      },
      &st);
  c.Status(st);
  c.Output("out as RopePair + FlashAttention", dout, r_out.Download<float>(), {0, 0});
  c.Output("lse as RopePair + FlashAttention", dlse, r_lse.Download<float>(), {0, 0});
  c.Exact("the rounded out", rounded, r_rounded.Download<uint16_t>().data());
  c.Output("q_out as RopePair", q_out, rq.Download<float>(), {0, 0});
  c.Output("k_out as RopePair", k_out, rk.Download<float>(), {0, 0});
  c.Output("v_out", v_out, v, {0, 0});
  c.Output("out", dout, want_out, kNarrowOutTol);
  c.Output("lse", dlse, want_lse, kF32Tol);
  c.Output("q_out", q_out, cq, kF32Tol);
  c.Output("k_out", k_out, ck, kF32Tol);
  c.Unchanged("q", dq, q.data());
  c.Unchanged("k", dk, k.data());
  c.Unchanged("v", dv, v.data());
  return c.Result(ms);
}

struct DecodeShape {
  std::vector<int> span_rows;  // rows of each span, in sequence order
  int n_heads, n_kv_heads, head_dim;
  DType dtype;
  float q_range = 1.f;
  float scale = 0.f;  // 1 / sqrt(head_dim) unless set
};

std::string DecodeName(const DecodeShape& s) {
  const int rows = std::accumulate(s.span_rows.begin(), s.span_rows.end(), 0);
  std::string name = "DecodeAttention " + std::string(DTypeName(s.dtype)) + " " +
                     std::to_string(rows) + " rows in " + std::to_string(s.span_rows.size()) +
                     (s.span_rows.size() == 1 ? " span" : " spans") + " h" +
                     std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv_heads) + " d" +
                     std::to_string(s.head_dim);
  if (s.scale != 0.f) name += " scale " + std::to_string(static_cast<int>(s.scale));
  return name;
}

// Cache rows of `dtype` as raw bytes: F32 as is, BF16 rounded (the reference widens the same
// bits the kernel reads).
std::vector<unsigned char> CacheBytes(const std::vector<float>& x, DType dtype) {
  std::vector<unsigned char> bytes(x.size() * DTypeSize(dtype));
  ConvertFromF32(dtype, x.data(), bytes.data(), x.size());
  return bytes;
}

// Runs the kernels over `spans` (device pointers), the span list uploaded to device memory, in
// the slices args.max_rows asks for.
KernelStatus RunDecode(DecodeAttentionArgs args, const std::vector<KvSpan>& spans,
                       DeviceBuffer* dspans, double* ms) {
  *dspans = DeviceBuffer::Of(spans);
  args.spans = dspans->as<KvSpan>();
  args.n_spans = static_cast<int>(spans.size());
  DeviceBuffer parts(std::max<size_t>(1, DecodeAttentionPartBytes(args)));
  KernelStatus st;
  *ms = TimedMs([&] { return DecodeAttention(args, parts.data(), nullptr); }, &st);
  return st;
}

// The spans lie in a pool in a shuffled order with an unused (random) row after each, as blocks
// of a paged cache do. With several spans, the same rows as one contiguous span must give the
// same bits.
CaseResult DecodeCase(const DecodeShape& s) {
  const int n_spans = static_cast<int>(s.span_rows.size());
  const int64_t row_elems = int64_t{s.n_kv_heads} * s.head_dim;
  const size_t row_bytes = row_elems * DTypeSize(s.dtype);
  std::vector<int> order(n_spans);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::vector<int64_t> start(n_spans);  // first pool row of each span
  int64_t pool_rows = 0;
  for (int i : order) {
    start[i] = pool_rows;
    pool_rows += s.span_rows[i] + 1;
  }
  const uint64_t seed = 2000 + n_spans * 13 + s.head_dim;
  const std::vector<float> q =
      RandomFloats(int64_t{s.n_heads} * s.head_dim, seed, -s.q_range, s.q_range);
  const std::vector<unsigned char> k =
      CacheBytes(RandomFloats(pool_rows * row_elems, seed + 1), s.dtype);
  const std::vector<unsigned char> v =
      CacheBytes(RandomFloats(pool_rows * row_elems, seed + 2), s.dtype);

  DecodeAttentionArgs args;
  args.kv_dtype = s.dtype;
  args.n_heads = s.n_heads;
  args.n_kv_heads = s.n_kv_heads;
  args.head_dim = s.head_dim;
  args.scale = s.scale != 0.f ? s.scale : 1.f / std::sqrt(static_cast<float>(s.head_dim));

  // Spans into a pool at `k`, `v` (host or device); an empty span has null pointers.
  auto spans_at = [&](const unsigned char* kp, const unsigned char* vp) {
    std::vector<KvSpan> spans(n_spans);
    for (int i = 0; i < n_spans; ++i) {
      spans[i].rows = s.span_rows[i];
      if (s.span_rows[i] > 0) {
        spans[i].k = kp + start[i] * row_bytes;
        spans[i].v = vp + start[i] * row_bytes;
      }
    }
    return spans;
  };
  std::vector<float> want(q.size());
  const std::vector<KvSpan> host_spans = spans_at(k.data(), v.data());
  DecodeAttentionArgs ref = args;
  ref.q = q.data();
  ref.spans = host_spans.data();
  ref.n_spans = n_spans;
  ref.out = want.data();
  cpu::DecodeAttentionReference(ref);

  DeviceBuffer dq = DeviceBuffer::Of(q), dk = DeviceBuffer::Of(k), dv = DeviceBuffer::Of(v);
  DeviceBuffer dout(want.size() * sizeof(float)), dspans;
  args.q = dq.as<float>();
  args.out = dout.as<float>();
  const std::vector<KvSpan> device_spans = spans_at(dk.as<unsigned char>(), dv.as<unsigned char>());
  Checker c;
  double ms = 0;
  // Split across slices as a decode step splits it (the rows given), then in one slice per head
  // (rows not given: each block runs every piece).
  args.max_rows = std::accumulate(s.span_rows.begin(), s.span_rows.end(), 0);
  c.Status(RunDecode(args, device_spans, &dspans, &ms));
  c.Output("out", dout, want, kF32Tol);
  c.Unchanged("q", dq, q.data());
  c.Unchanged("k", dk, k.data());
  c.Unchanged("v", dv, v.data());
  c.Unchanged("spans", dspans, device_spans.data());
  if (DecodeAttentionSlices(args.max_rows) > 1) {
    DecodeAttentionArgs one_slice = args;
    one_slice.max_rows = 0;
    DeviceBuffer dout_one(want.size() * sizeof(float)), dspans_one;
    one_slice.out = dout_one.as<float>();
    double ms_one = 0;
    c.Status(RunDecode(one_slice, device_spans, &dspans_one, &ms_one));
    c.Output("out (one slice)", dout_one, want, kF32Tol);
  }

  if (n_spans > 1) {
    std::vector<unsigned char> kc, vc;  // the rows in sequence order
    for (int i = 0; i < n_spans; ++i) {
      const size_t at = start[i] * row_bytes, n = s.span_rows[i] * row_bytes;
      kc.insert(kc.end(), k.begin() + at, k.begin() + at + n);
      vc.insert(vc.end(), v.begin() + at, v.begin() + at + n);
    }
    DeviceBuffer dkc = DeviceBuffer::Of(kc), dvc = DeviceBuffer::Of(vc);
    DeviceBuffer dout1(want.size() * sizeof(float)), dspan1;
    const int rows = static_cast<int>(kc.size() / row_bytes);
    args.out = dout1.as<float>();
    double ms1 = 0;
    c.Status(RunDecode(args, {KvSpan{dkc.data(), dvc.data(), rows}}, &dspan1, &ms1));
    c.Guards("out (one span)", dout1);
    if (dout.Download<float>() != dout1.Download<float>()) {
      c.Fail("out differs between the span list and one contiguous span");
    }
  }
  return c.Result(ms);
}

// Sequences of different lengths decoded in one launch (a batched decode step): their blocks of
// 16 rows interleaved in one pool, as a paged pool holds them. Each sequence's output must equal
// the reference and, bit for bit, its own launch alone.
CaseResult DecodeBatchCase(DType dtype) {
  const std::vector<int> lengths = {1, 300, 37, 130};
  const int n_seqs = static_cast<int>(lengths.size());
  const int n_heads = 8, n_kv_heads = 2, hd = 64;
  const int64_t q_elems = int64_t{n_heads} * hd;
  const int64_t row_elems = int64_t{n_kv_heads} * hd;
  const size_t row_bytes = row_elems * DTypeSize(dtype);
  // Blocks (sequence, first row, rows) in pool order: round robin over the sequences.
  struct Block {
    int seq, row, rows;
    int64_t pool_row = 0;
  };
  std::vector<std::vector<Block>> blocks(n_seqs);
  int64_t pool_rows = 0;
  for (int r = 0;; r += 16) {
    bool any = false;
    for (int i = 0; i < n_seqs; ++i) {
      if (r >= lengths[i]) continue;
      blocks[i].push_back({i, r, std::min(16, lengths[i] - r), pool_rows});
      pool_rows += 16;
      any = true;
    }
    if (!any) break;
  }
  const std::vector<float> q = RandomFloats(n_seqs * q_elems, 3100, -1.f, 1.f);
  const std::vector<unsigned char> k = CacheBytes(RandomFloats(pool_rows * row_elems, 3101), dtype);
  const std::vector<unsigned char> v = CacheBytes(RandomFloats(pool_rows * row_elems, 3102), dtype);
  auto spans_at = [&](const unsigned char* kp, const unsigned char* vp, int seq) {
    std::vector<KvSpan> spans;
    for (const Block& b : blocks[seq]) {
      spans.push_back({kp + b.pool_row * row_bytes, vp + b.pool_row * row_bytes, b.rows});
    }
    return spans;
  };
  std::vector<int> span_begin = {0};
  std::vector<KvSpan> host_spans;
  for (int i = 0; i < n_seqs; ++i) {
    const std::vector<KvSpan> s = spans_at(k.data(), v.data(), i);
    host_spans.insert(host_spans.end(), s.begin(), s.end());
    span_begin.push_back(static_cast<int>(host_spans.size()));
  }
  DecodeAttentionArgs args;
  args.kv_dtype = dtype;
  args.n_heads = n_heads;
  args.n_kv_heads = n_kv_heads;
  args.head_dim = hd;
  args.scale = 1.f / std::sqrt(static_cast<float>(hd));
  args.n_seqs = n_seqs;
  std::vector<float> want(q.size());
  DecodeAttentionArgs ref = args;
  ref.q = q.data();
  ref.out = want.data();
  ref.spans = host_spans.data();
  ref.n_spans = static_cast<int>(host_spans.size());
  ref.span_begin = span_begin.data();
  cpu::DecodeAttentionReference(ref);

  DeviceBuffer dq = DeviceBuffer::Of(q), dk = DeviceBuffer::Of(k), dv = DeviceBuffer::Of(v);
  DeviceBuffer dout(want.size() * sizeof(float)), dspans;
  std::vector<KvSpan> device_spans;
  for (int i = 0; i < n_seqs; ++i) {
    const std::vector<KvSpan> s = spans_at(dk.as<unsigned char>(), dv.as<unsigned char>(), i);
    device_spans.insert(device_spans.end(), s.begin(), s.end());
  }
  DeviceBuffer dbegin = DeviceBuffer::Of(span_begin);
  args.q = dq.as<float>();
  args.out = dout.as<float>();
  args.span_begin = dbegin.as<int>();
  args.max_rows = *std::max_element(lengths.begin(), lengths.end());
  Checker c;
  double ms = 0;
  c.Status(RunDecode(args, device_spans, &dspans, &ms));
  c.Output("out", dout, want, kF32Tol);
  c.Unchanged("span_begin", dbegin, span_begin.data());
  const std::vector<float> batched = dout.Download<float>();
  for (int i = 0; i < n_seqs; ++i) {
    DecodeAttentionArgs one = args;
    one.n_seqs = 1;
    one.span_begin = nullptr;
    one.max_rows = lengths[i];  // fewer slices than the batch's launch
    one.q = dq.as<float>() + i * q_elems;
    DeviceBuffer dsolo(q_elems * sizeof(float)), dspan1;
    one.out = dsolo.as<float>();
    double ms1 = 0;
    c.Status(
        RunDecode(one, spans_at(dk.as<unsigned char>(), dv.as<unsigned char>(), i), &dspan1, &ms1));
    const std::vector<float> solo = dsolo.Download<float>();
    if (std::memcmp(solo.data(), batched.data() + i * q_elems, q_elems * sizeof(float)) != 0) {
      c.Fail("sequence " + std::to_string(i) + " differs between the batch and its own launch");
    }
  }
  return c.Result(ms);
}

// Bad arguments are errors, before any launch.
CaseResult ArgumentChecks() {
  Checker c;
  DeviceBuffer buf(4096);
  float* p = buf.as<float>();
  auto expect_error = [&](const std::string& what, const KernelStatus& st) {
    if (st.ok) c.Fail(what + " was accepted");
  };
  const AttentionArgs good{p, p, p, p + 512, nullptr, 2, 4, 4, 2, 8, 0.5f, true, 2};
  if (KernelStatus st = Attention(good, nullptr); !st.ok) c.Fail("good args: " + st.message);
  AttentionArgs a = good;
  a.q = nullptr;
  expect_error("Attention with a null q", Attention(a, nullptr));
  a = good;
  a.n_kv_heads = 3;
  expect_error("Attention with 4 heads on 3 kv heads", Attention(a, nullptr));
  a = good;
  a.head_dim = kMaxAttentionHeadDim + 1;
  expect_error("Attention with head_dim 257", Attention(a, nullptr));
  a = good;
  a.causal_offset = 3;
  expect_error("Attention with a causal offset past the keys", Attention(a, nullptr));
  a = good;
  a.n_kv = 0;
  expect_error("Attention with no key", Attention(a, nullptr));
  a = good;
  a.n_segments = 1;
  expect_error("Attention with segments and no bounds", Attention(a, nullptr));
  a.segment_bounds = reinterpret_cast<const int32_t*>(p);
  expect_error("Attention with segments and n_kv != n_q", Attention(a, nullptr));
  std::unique_ptr<Gemm> gemm;
  c.Status(Gemm::Create(nullptr, &gemm));
  if (gemm != nullptr) {
    a = good;
    a.n_kv_heads = 3;
    expect_error("NarrowAttention with 4 heads on 3 kv heads",
                 NarrowAttention(a, ElemType::kBF16, *gemm, p));
    expect_error("NarrowAttention with F32 operands",
                 NarrowAttention(good, ElemType::kF32, *gemm, p));
    AttentionArgs odd = good;
    odd.head_dim = 24;
    expect_error("FlashAttention with head_dim 24", FlashAttention(odd, ElemType::kBF16, nullptr));
    expect_error("FlashAttention with F32 operands", FlashAttention(good, ElemType::kF32, nullptr));
    expect_error("FlashAttention with 3 key groups",
                 FlashAttention(good, ElemType::kBF16, nullptr, nullptr, ElemType::kBF16, 3));
    expect_error("NarrowAttention without a workspace",
                 NarrowAttention(good, ElemType::kBF16, *gemm, nullptr));
  }
  AttentionArgs square = good;
  square.head_dim = 16;
  square.n_kv = square.n_q;
  square.causal_offset = 0;
  FlashRopeArgs rope;
  rope.positions = reinterpret_cast<const int32_t*>(p + 1024);
  rope.q_out = rope.k_out = rope.v_out = p + 2048;
  expect_error("FlashAttentionRope with n_kv != n_q",
               FlashAttentionRope(good, rope, ElemType::kBF16, nullptr));
  FlashRopeArgs bad = rope;
  bad.k_out = nullptr;
  expect_error("FlashAttentionRope without k_out",
               FlashAttentionRope(square, bad, ElemType::kBF16, nullptr));
  bad = rope;
  bad.positions = nullptr;
  expect_error("FlashAttentionRope without positions",
               FlashAttentionRope(square, bad, ElemType::kBF16, nullptr));
  bad = rope;
  bad.v_out = p;
  expect_error("FlashAttentionRope writing v_out over v",
               FlashAttentionRope(square, bad, ElemType::kBF16, nullptr));
  bad = rope;
  bad.table_positions = 8;
  expect_error("FlashAttentionRope with a table of 8 positions and no cos/sin",
               FlashAttentionRope(square, bad, ElemType::kBF16, nullptr));
  expect_error("FlashAttentionRope with F32 operands",
               FlashAttentionRope(square, rope, ElemType::kF32, nullptr));

  DecodeAttentionArgs d;
  d.q = p;
  d.out = p;
  d.n_heads = 4;
  d.n_kv_heads = 2;
  d.head_dim = 8;
  expect_error("DecodeAttention with no span", DecodeAttention(d, nullptr, nullptr));
  d.spans = reinterpret_cast<const KvSpan*>(p);
  d.n_spans = 1;
  d.kv_dtype = DType::kF16;
  expect_error("DecodeAttention with F16 KV", DecodeAttention(d, nullptr, nullptr));
  d.kv_dtype = DType::kF32;
  d.n_kv_heads = 3;
  expect_error("DecodeAttention with 4 heads on 3 kv heads", DecodeAttention(d, nullptr, nullptr));
  d.n_kv_heads = 2;
  d.n_seqs = 2;
  expect_error("DecodeAttention of 2 sequences without span_begin",
               DecodeAttention(d, nullptr, nullptr));
  d.n_seqs = 0;
  expect_error("DecodeAttention of 0 sequences", DecodeAttention(d, nullptr, nullptr));
  c.Guards("buffer", buf);
  return c.Result(0);
}

}  // namespace

void AddAttentionCases(std::vector<Case>& cases) {
  const PrefillShape prefill[] = {
      // n_q, n_kv, heads, kv_heads, head_dim, causal, offset, lse
      {1, 1, 1, 1, 64, false, 0, true},
      {7, 50, 4, 4, 10, true, 43, true},      // the last 7 rows of a 50-token causal prefix
      {77, 77, 8, 2, 24, true, 0, true},      // GQA, square causal
      {130, 200, 8, 2, 64, false, 0, false},  // GQA, full, n_kv not a multiple of the tile
      {130, 257, 2, 1, 128, true, 127, true},
      {7, 100, 8, 2, 128, true, 93, false},
      {20, 37, 2, 2, 256, false, 0, true},  // the widest head: 8-key tiles
      {9, 40, 3, 1, 17, false, 0, true},    // an odd head_dim, 3 query heads on one kv head
      // Scores of several units (scale 1): the running max changes between tiles.
      {33, 65, 4, 2, 32, true, 32, true, 2.f, 1.f},
  };
  for (const PrefillShape& s : prefill) {
    cases.push_back({PrefillName(s), {"AttentionKernel"}, [=] { return PrefillCase(s); }});
  }
  // Segments (variable-length attention): tiles of 16 rows that straddle segments, an empty
  // segment, a segment of one row, causal within each.
  PrefillShape segmented[] = {
      {100, 100, 4, 2, 32, false, 0, true},
      {100, 100, 2, 2, 24, true, 0, true},
      {64, 64, 2, 2, 256, false, 0, false},  // 8-key tiles
  };
  segmented[0].segments = {16, 20, 0, 64};
  segmented[1].segments = {37, 1, 62};
  segmented[2].segments = {9, 55};
  for (const PrefillShape& s : segmented) {
    cases.push_back({PrefillName(s), {"AttentionKernel"}, [=] { return PrefillCase(s); }});
  }
  // The narrow path (cuBLAS products around ChunkSoftmaxKernel).
  PrefillShape narrow[] = {
      {77, 77, 8, 2, 24, true, 0, true},   // GQA, square causal: the decoder's prefill
      {65, 65, 4, 4, 32, false, 0, true},  // full: the vision tower
      {7, 50, 4, 4, 10, true, 43, false},  // causal offset, no lse
      {9, 40, 3, 1, 17, false, 0, true},   // odd head_dim, 3 query heads on one kv head
      {60, 60, 4, 2, 16, true, 0, true},   // in chunks of 5 rows (4 of them past the first)
      {33, 65, 4, 2, 32, true, 32, true, 2.f, 1.f},  // peaked scores
      {40, 40, 2, 2, 64, true, 0, true},             // F16
  };
  narrow[4].chunk_bytes = 5 * 4 * 60 * 6;
  for (int i = 0; i < 6; ++i) narrow[i].operands = DType::kBF16;
  narrow[6].operands = DType::kF16;
  PrefillShape narrow_segmented[] = {
      {65, 65, 4, 4, 24, false, 0, true},
      {60, 60, 4, 2, 16, true, 0, true},  // in chunks of 5 rows, which straddle segments
  };
  narrow_segmented[0].segments = {30, 0, 35};
  narrow_segmented[1].segments = {7, 13, 40};
  narrow_segmented[1].chunk_bytes = 5 * 4 * 60 * 6;
  for (PrefillShape& s : narrow_segmented) s.operands = DType::kBF16;
  for (const PrefillShape& s : narrow) {
    cases.push_back(
        {PrefillName(s), {"RoundQkvKernel", "ChunkSoftmaxKernel"}, [=] { return PrefillCase(s); }});
  }
  for (const PrefillShape& s : narrow_segmented) {
    cases.push_back(
        {PrefillName(s), {"RoundQkvKernel", "ChunkSoftmaxKernel"}, [=] { return PrefillCase(s); }});
  }

  // FlashAttention (tensor-core fragments, the emulation's mma): tiles of 64 query rows and 64
  // keys, the last ones partial.
  PrefillShape flash[] = {
      {130, 130, 4, 2, 64, true, 0, true},           // GQA, causal over 3 row and 3 key tiles
      {65, 65, 4, 4, 32, false, 0, true},            // full: the vision tower
      {7, 150, 2, 2, 16, true, 143, false},          // causal offset, no lse, one partial row tile
      {33, 65, 4, 2, 32, true, 32, true, 2.f, 1.f},  // peaked scores: the max moves
      {70, 70, 2, 1, 48, true, 0, true},             // 3 k-steps per key, 2 heads on one kv head
      {40, 40, 2, 2, 128, true, 0, true},            // LLaMA's head_dim, F16
  };
  // Each with one key group and with two (these shapes, of few blocks, choose two).
  for (PrefillShape& s : flash) {
    s.operands = &s == &flash[5] ? DType::kF16 : DType::kBF16;
    s.flash = true;
    for (int groups : {1, 2}) {
      s.key_groups = groups;
      cases.push_back({PrefillName(s), {"FlashAttentionKernel"}, [=] { return PrefillCase(s); }});
    }
  }
  // Segments: Qwen2.5-VL's vision windows (64 patches each, one tile), then windows of other
  // lengths whose row and key tiles straddle them, an empty one, causal within each.
  PrefillShape flash_segmented[] = {
      {256, 256, 4, 4, 32, false, 0, true},
      {150, 150, 2, 1, 64, true, 0, true},
      {130, 130, 2, 2, 16, false, 0, false},
  };
  flash_segmented[0].segments = {64, 64, 64, 64};
  flash_segmented[1].segments = {10, 70, 0, 70};
  flash_segmented[2].segments = {100, 1, 29};
  for (PrefillShape& s : flash_segmented) {
    s.operands = DType::kBF16;
    s.flash = true;
    for (int groups : {1, 2}) {
      s.key_groups = groups;
      cases.push_back({PrefillName(s), {"FlashAttentionKernel"}, [=] { return PrefillCase(s); }});
    }
  }
  // By the shape: 5 blocks of 64 rows over 60 heads of 16 (300 blocks) is more than a wave, one
  // group (the shapes above give few blocks, two).
  {
    PrefillShape s{64 * 5 - 3, 64 * 5 - 3, 60, 4, 16, true, 0, true};
    s.operands = DType::kBF16;
    s.flash = true;
    cases.push_back({PrefillName(s), {"FlashAttentionKernel"}, [=] { return PrefillCase(s); }});
  }

  // FlashAttentionRope: RoPE on load. A short table (positions past it computed in F64), GQA,
  // segments whose positions restart, F16, LLaMA's head of 128.
  FlashRopeShape flash_rope[] = {
      {130, 4, 2, 64, true, 4096},
      {130, 4, 2, 64, true, 200},  // rows from 67 on past the table
      {70, 2, 1, 48, true, 0},     // no table: every angle in F64
      {65, 4, 4, 32, false, 4096},
      {40, 2, 2, 128, true, 4096, DType::kF16},
      {150, 2, 1, 64, true, 4096, DType::kBF16, {10, 70, 0, 70}},
  };
  for (const FlashRopeShape& s : flash_rope) {
    cases.push_back({FlashRopeName(s),
                     {"FlashAttentionKernel", "RopeTableKernel", "RopeKernel"},
                     [=] { return FlashRopeCase(s); }});
  }
  // The same with each number of key groups named (the shapes above choose two).
  for (int groups : {1, 2}) {
    for (int i : {0, 4, 5}) {
      FlashRopeShape s = flash_rope[i];
      s.key_groups = groups;
      cases.push_back({FlashRopeName(s),
                       {"FlashAttentionKernel", "RopeTableKernel", "RopeKernel"},
                       [=] { return FlashRopeCase(s); }});
    }
  }

  // Blocks of 16 rows, the last one partial.
  auto blocks = [](int rows) {
    std::vector<int> r(rows / 16, 16);
    if (rows % 16 != 0) r.push_back(rows % 16);
    return r;
  };
  const DecodeShape decode[] = {
      {{37}, 8, 2, 64, DType::kF32},
      {blocks(300), 8, 2, 128, DType::kF32},
      {blocks(300), 8, 2, 128, DType::kBF16},
      {{5}, 4, 4, 10, DType::kBF16},
      {{130}, 2, 2, 256, DType::kBF16},
      {blocks(137), 6, 3, 17, DType::kBF16},
      // Uneven spans, an empty one among them, and peaked scores.
      {{7, 1, 0, 30, 200, 3}, 2, 1, 24, DType::kF32, 4.f, 1.f},
      // More pieces than slices: a block runs several.
      {blocks(4200), 2, 1, 64, DType::kBF16},
  };
  for (const DecodeShape& s : decode) {
    std::vector<std::string> kernels = {"DecodeAttentionSplitKernel"};
    const int rows = std::accumulate(s.span_rows.begin(), s.span_rows.end(), 0);
    if (DecodeAttentionSlices(rows) > 1) kernels.push_back("DecodeAttentionCombineKernel");
    cases.push_back({DecodeName(s), kernels, [=] { return DecodeCase(s); }});
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    cases.push_back({"DecodeAttention " + std::string(DTypeName(dtype)) +
                         " batch of 4 sequences (1, 300, 37, 130 rows) in one launch",
                     {"DecodeAttentionSplitKernel", "DecodeAttentionCombineKernel"},
                     [dtype] { return DecodeBatchCase(dtype); }});
  }
  cases.push_back({"Attention, DecodeAttention argument checks",
                   {"AttentionKernel", "RoundQkvKernel", "ChunkSoftmaxKernel"},
                   ArgumentChecks});
}

}  // namespace hap::cuda::parity
