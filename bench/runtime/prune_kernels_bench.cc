// Per-layer cost of HAP's scoring kernels at one layer's shapes: text→visual attention rows
// (scalar reference, fast path with row entropies), PAQ of every head (reference on the maps,
// Paq, PaqFromRowEntropies), and the head-weighted sum, with the largest differences between
// the fast paths and the references. Prints the median over repeats, in microseconds.
//
//   prune_kernels_bench [--heads 16] [--kv-heads 16] [--head-dim 64] [--text 20]
//                       [--vis 576,144,64] [--repeats 21] [--threads N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"
#include "bench/common/percentile.h"
#include "kernels/cpu/prune/attention_rows.h"
#include "kernels/cpu/prune/paq.h"
#include "kernels/cpu/prune/weighted_sum.h"
#include "tests/kernels/attention_args.h"

namespace hap {
namespace {

using bench::MedianUs;

int Main(int argc, char** argv) {
  int heads = 16, kv_heads = 16, hd = 64, n_text = 20, repeats = 21, threads = 0;
  std::vector<int> vis = {576, 144, 64};
  const absl::Status parsed = [&]() -> absl::Status {
    HAP_ASSIGN_OR_RETURN(
        Flags f,
        Flags::Parse(argc, argv,
                     {"heads", "kv-heads", "head-dim", "text", "repeats", "threads", "vis"}, {}));
    HAP_ASSIGN_OR_RETURN(heads, f.PositiveInt("heads", heads));
    HAP_ASSIGN_OR_RETURN(kv_heads, f.PositiveInt("kv-heads", kv_heads));
    HAP_ASSIGN_OR_RETURN(hd, f.PositiveInt("head-dim", hd));
    HAP_ASSIGN_OR_RETURN(n_text, f.PositiveInt("text", n_text));
    HAP_ASSIGN_OR_RETURN(repeats, f.PositiveInt("repeats", repeats));
    HAP_ASSIGN_OR_RETURN(threads, f.PositiveInt("threads", 0));
    HAP_ASSIGN_OR_RETURN(vis, f.PositiveInts("vis", vis));
    return absl::OkStatus();
  }();
  if (!parsed.ok()) {
    std::fprintf(stderr, "prune_kernels_bench: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  SetDefaultPoolThreads(threads);
  std::printf(
      "heads %d/%d, head_dim %d, %d text rows, pool of %d threads; median of %d, us per "
      "layer\n\n",
      heads, kv_heads, hd, n_text, DefaultPool().size(), repeats);
  std::printf(
      "| n_vis | rows ref | rows fast | PAQ ref | Paq | PaqFromRowEntropies | weighted "
      "sum | max abs diff rows | max abs diff PAQ (Paq, FromRowEntropies) |\n"
      "|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.5f);
  for (int n_vis : vis) {
    std::vector<float> q(size_t(n_text) * heads * hd), k(size_t(n_vis) * kv_heads * hd);
    for (float& x : q) x = nd(rng);
    for (float& x : k) x = nd(rng);
    const size_t map_size = size_t(n_text) * n_vis;
    std::vector<float> ref(heads * map_size), fast(heads * map_size), layer(map_size);
    std::vector<double> entropy(size_t(heads) * n_text);
    kernels::TextVisualAttentionArgs a = testing_support::TextVisualRows(
        q.data(), k.data(), /*lse=*/nullptr, n_text, n_vis, heads, kv_heads, hd,
        1.f / std::sqrt(float(hd)), /*out=*/nullptr);  // renormalised
    const auto rows = [&](float* out, bool reference) {
      a.out = out;
      a.row_entropy = reference ? nullptr : entropy.data();
      const absl::Status s =
          reference ? kernels::TextVisualAttentionReference(a) : kernels::TextVisualAttention(a);
      if (!s.ok()) std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    };
    const double rows_ref = MedianUs(repeats, [&] { rows(ref.data(), true); });
    const double rows_fast = MedianUs(repeats, [&] { rows(fast.data(), false); });
    double rows_err = 0;
    for (size_t e = 0; e < ref.size(); ++e) {
      rows_err = std::max<double>(rows_err, std::abs(ref[e] - fast[e]));
    }
    std::vector<float> paq_ref(heads), paq_fast(heads), paq_ent(heads), w(heads, 1.f / heads);
    const double p_ref = MedianUs(repeats, [&] {
      (void)kernels::PaqReference(ref.data(), heads, n_text, n_vis, paq_ref.data());
    });
    const double p_fast = MedianUs(
        repeats, [&] { (void)kernels::Paq(ref.data(), heads, n_text, n_vis, paq_fast.data()); });
    const double p_ent = MedianUs(repeats, [&] {
      (void)kernels::PaqFromRowEntropies(fast.data(), entropy.data(), heads, n_text, n_vis,
                                         paq_ent.data());
    });
    double paq_err = 0, ent_err = 0;
    for (int h = 0; h < heads; ++h) {
      paq_err = std::max<double>(paq_err, std::abs(paq_ref[h] - paq_fast[h]));
      ent_err = std::max<double>(ent_err, std::abs(paq_ref[h] - paq_ent[h]));
    }
    const double wsum = MedianUs(repeats, [&] {
      (void)kernels::WeightedSumContiguous(ref.data(), w.data(), heads, map_size, layer.data());
    });
    std::printf("| %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.2g | %.2g, %.2g |\n", n_vis,
                rows_ref, rows_fast, p_ref, p_fast, p_ent, wsum, rows_err, paq_err, ent_err);
  }
  return 0;
}

}  // namespace
}  // namespace hap

int main(int argc, char** argv) { return hap::Main(argc, argv); }
