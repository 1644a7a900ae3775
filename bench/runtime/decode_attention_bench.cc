// One layer's decode attention for a batched step of B sequences: the batch in one call
// (DecodeAttentionArgs::n_seqs, what the decoder does) against one call per sequence (what it
// did before), on a paged cache of 16-row blocks. Prints the median over repeats in microseconds
// and checks that both give the same bits.
//
//   decode_attention_bench [--heads 32] [--kv-heads 32] [--head-dim 128] [--rows 640]
//                          [--batches 1,4,16,64] [--dtype bf16] [--repeats 51] [--threads N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "base/flags.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"
#include "bench/common/percentile.h"
#include "kernels/cpu/decode_attention.h"
#include "tests/kernels/attention_args.h"

namespace hap {
namespace {

using bench::MedianUs;

int Main(int argc, char** argv) {
  int heads = 32, kv_heads = 32, hd = 128, rows = 640, repeats = 51, threads = 0;
  std::vector<int> batches = {1, 4, 16, 64};
  DType dtype = DType::kBF16;
  const absl::Status parsed = [&]() -> absl::Status {
    HAP_ASSIGN_OR_RETURN(Flags f, Flags::Parse(argc, argv,
                                               {"dtype", "batches", "heads", "kv-heads", "head-dim",
                                                "rows", "repeats", "threads"},
                                               {}));
    HAP_ASSIGN_OR_RETURN(heads, f.PositiveInt("heads", heads));
    HAP_ASSIGN_OR_RETURN(kv_heads, f.PositiveInt("kv-heads", kv_heads));
    HAP_ASSIGN_OR_RETURN(hd, f.PositiveInt("head-dim", hd));
    HAP_ASSIGN_OR_RETURN(rows, f.PositiveInt("rows", rows));
    HAP_ASSIGN_OR_RETURN(repeats, f.PositiveInt("repeats", repeats));
    HAP_ASSIGN_OR_RETURN(threads, f.PositiveInt("threads", 0));
    HAP_ASSIGN_OR_RETURN(batches, f.PositiveInts("batches", batches));
    const std::string name = f.GetOr("dtype", "bf16");
    if (name != "f32" && name != "bf16") {
      return absl::InvalidArgumentError(absl::StrCat("--dtype '", name, "' is not f32 or bf16"));
    }
    dtype = name == "bf16" ? DType::kBF16 : DType::kF32;
    return absl::OkStatus();
  }();
  if (!parsed.ok()) {
    std::fprintf(stderr, "decode_attention_bench: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  SetDefaultPoolThreads(threads);
  std::printf(
      "heads %d/%d, head_dim %d, %d cached rows per sequence in 16-row blocks, %s KV, pool of %d "
      "threads; median of %d, us per layer\n\n",
      heads, kv_heads, hd, rows, std::string(DTypeName(dtype)).c_str(), DefaultPool().size(),
      repeats);
  std::printf("%8s %14s %14s %8s %10s\n", "batch", "one call", "per sequence", "ratio",
              "same bits");
  const int64_t row_elems = int64_t{kv_heads} * hd;
  const int q_dim = heads * hd;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int b : batches) {
    // Each sequence's blocks in a pool of its own (as a paged pool hands them out).
    const size_t n = static_cast<size_t>(b) * rows * row_elems;
    std::vector<float> kf(n), vf(n), q(static_cast<size_t>(b) * q_dim);
    for (float& x : kf) x = u(rng);
    for (float& x : vf) x = u(rng);
    for (float& x : q) x = u(rng);
    std::vector<uint8_t> k(n * DTypeSize(dtype)), v(n * DTypeSize(dtype));
    ConvertFromF32(dtype, kf.data(), k.data(), n);
    ConvertFromF32(dtype, vf.data(), v.data(), n);
    const size_t row_bytes = row_elems * DTypeSize(dtype);
    std::vector<KvSpan> spans;
    std::vector<int> span_begin = {0};
    for (int s = 0; s < b; ++s) {
      for (int r = 0; r < rows; r += 16) {
        const size_t at = (static_cast<size_t>(s) * rows + r) * row_bytes;
        spans.push_back({k.data() + at, v.data() + at, std::min(16, rows - r)});
      }
      span_begin.push_back(static_cast<int>(spans.size()));
    }
    DecodeAttentionArgs a =
        testing_support::DecodeOverSpans(q.data(), spans, span_begin.data(), b, dtype, heads,
                                         kv_heads, hd, 1.f / std::sqrt(static_cast<float>(hd)));
    std::vector<float> out_batch(q.size()), out_each(q.size());
    a.out = out_batch.data();
    bool ok = true;
    const double batch_us = MedianUs(repeats, [&] { ok &= cpu::DecodeAttention(a).ok(); });
    const double each_us = MedianUs(repeats, [&] {
      for (int s = 0; s < b; ++s) {
        DecodeAttentionArgs one = a;
        one.q = q.data() + static_cast<size_t>(s) * q_dim;
        one.out = out_each.data() + static_cast<size_t>(s) * q_dim;
        one.spans = spans.data() + span_begin[s];
        one.n_spans = span_begin[s + 1] - span_begin[s];
        one.n_seqs = 1;
        one.span_begin = nullptr;
        ok &= cpu::DecodeAttention(one).ok();
      }
    });
    if (!ok) {
      std::fprintf(stderr, "decode_attention_bench: DecodeAttention failed\n");
      return 1;
    }
    const bool same = std::memcmp(out_batch.data(), out_each.data(), sizeof(float) * q.size()) == 0;
    std::printf("%8d %14.1f %14.1f %7.2fx %10s\n", b, batch_us, each_us, each_us / batch_us,
                same ? "yes" : "NO");
    if (!same) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace hap

int main(int argc, char** argv) { return hap::Main(argc, argv); }
