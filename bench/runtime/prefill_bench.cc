// Prefill/decode throughput of the CPU runtime, the GFLOP/s prefill reaches next to OpenBLAS
// sgemm's own on the same machine in the same run, and — with pruning — the prefill speedup
// next to the FLOPs ratio and the share of prefill time spent computing PAQ and selecting.
//
//   prefill_bench --model DIR --image FILE [--prompt TEXT] [--decode-tokens N] [--repeats R]
//                 [--retain 192,128,64,32] [--method hap] [--kv-dtype f32|bf16]
// --retain takes counts relative to LLaVA-1.5's 576 visual tokens (the paper's 192/128/64/32)
// and scales them to the model's V.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "base/flags.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "kernels/cpu/bf16_gemm.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/pipeline.h"

namespace hap {
namespace {

// Real floating-point operations (2 per multiply-add) of one prefill, from the per-layer
// sequence lengths it ran with.
double PrefillFlops(const LlavaConfig& c, const PrefillTrace& trace) {
  const double d = c.text.hidden_size, f = c.text.intermediate_size;
  const double q_dim = c.text.num_attention_heads * c.text.head_dim;
  const double kv_dim = c.text.num_key_value_heads * c.text.head_dim;
  double flops = 0;
  for (int n : trace.tokens_per_layer) {
    flops += 2.0 * n * (d * (q_dim + 2 * kv_dim) + q_dim * d + 3 * d * f);
    flops += 2.0 * 2.0 * q_dim * (static_cast<double>(n) * (n + 1) / 2);  // QKᵀ and PV, causal
  }
  return flops + 2.0 * d * c.text.vocab_size;
}

// OpenBLAS sgemm on all of the pool's threads (the engine runs it on one thread per pool thread;
// this is OpenBLAS's own best on the machine), restored to one thread afterwards.
double SgemmGflops(int m, int k, int n, int repeats) {
  std::vector<float> a(static_cast<size_t>(m) * k, 0.01f), b(static_cast<size_t>(n) * k, 0.02f),
      c(static_cast<size_t>(m) * n);
  openblas_set_num_threads(DefaultPool().size());
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, a.data(), k, b.data(), k, 0.f,
              c.data(), n);
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, a.data(), k, b.data(), k,
                0.f, c.data(), n);
    best = std::min(best, MsSince(t0));
  }
  openblas_set_num_threads(1);
  return 2.0 * m * k * n / (best / 1e3) / 1e9;
}

// The engine's BF16-weight product (cpu::Bf16Gemm) on the same shape; 0 where the CPU lacks it.
double Bf16GemmGflops(int m, int k, int n, int repeats) {
  if (!cpu::HasBf16DotProduct()) return 0;
  std::vector<float> a(static_cast<size_t>(m) * k, 0.01f), c(static_cast<size_t>(m) * n);
  std::vector<uint16_t> b(static_cast<size_t>(n) * k, F32ToBF16(0.02f));
  cpu::Bf16Gemm(a.data(), m, k, b.data(), n, c.data());
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    cpu::Bf16Gemm(a.data(), m, k, b.data(), n, c.data());
    best = std::min(best, MsSince(t0));
  }
  return 2.0 * m * k * n / (best / 1e3) / 1e9;
}

struct Args {
  std::string model, image, prompt = "What colour is the shape in the top left corner?";
  int decode_tokens = 16, repeats = 2;
  std::string method = "hap";
  std::vector<double> retain;
  DType kv_dtype = DType::kF32;
};

// Memory read bandwidth in GB/s: the best of three passes summing a 1 GiB buffer as 64-bit
// words on every thread of the compute pool (a stream the prefetchers follow, like a weight).
double ReadBandwidthGBs() {
  const size_t n = (size_t{1} << 30) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n, 1);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    std::atomic<uint64_t> total{0};
    const auto t0 = Clock::now();
    DefaultPool().ParallelFor(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
      uint64_t sum = 0;
      for (int64_t i = b; i < e; ++i) sum += buf[i];
      total += sum;
    });
    const double s = MsSince(t0) / 1e3;
    if (total.load() == n) best = std::max(best, n * sizeof(uint64_t) / s / 1e9);
  }
  return best;
}

// Peak resident memory of this process (VmHWM), bytes.
int64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

// Bytes one decode step reads from the weights: every decoder matrix, the final norm and the LM
// head (one embedding row is negligible).
int64_t WeightBytesPerToken(const TextWeights& w) {
  int64_t bytes = w.lm_head.bytes() + w.norm.bytes();
  for (const LlamaLayerWeights& l : w.layers) {
    for (const Weight* t : {&l.attn_norm, &l.q, &l.k, &l.v, &l.o, &l.mlp_norm, &l.gate, &l.up,
                            &l.down}) {
      bytes += t->bytes();
    }
  }
  return bytes;
}

int Main(int argc, char** argv) {
  Args a;
  const absl::Status parsed = [&]() -> absl::Status {
    HAP_ASSIGN_OR_RETURN(Flags f, Flags::Parse(argc, argv,
                                               {"model", "image", "prompt", "decode-tokens",
                                                "repeats", "method", "kv-dtype", "retain"},
                                               {}));
    a.model = f.GetOr("model", a.model);
    a.image = f.GetOr("image", a.image);
    a.prompt = f.GetOr("prompt", a.prompt);
    a.method = f.GetOr("method", a.method);
    HAP_ASSIGN_OR_RETURN(const int64_t decode_tokens, f.Int("decode-tokens", a.decode_tokens));
    if (decode_tokens < 0 || decode_tokens > (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--decode-tokens ", decode_tokens, " is not in [0, 1048576]"));
    }
    a.decode_tokens = static_cast<int>(decode_tokens);
    HAP_ASSIGN_OR_RETURN(a.repeats, f.PositiveInt("repeats", a.repeats));
    if (std::optional<std::string> kv = f.Get("kv-dtype")) {
      HAP_ASSIGN_OR_RETURN(a.kv_dtype, ParseKvDTypeFlagValue("--kv-dtype", *kv));
    }
    HAP_ASSIGN_OR_RETURN(a.retain, f.PositiveNumbers("retain", a.retain));
    return absl::OkStatus();
  }();
  if (!parsed.ok()) {
    std::fprintf(stderr, "prefill_bench: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  if (a.model.empty() || a.image.empty()) {
    std::fprintf(stderr,
                 "usage: prefill_bench --model DIR --image FILE [--retain 192,128,64,32] "
                 "[--kv-dtype f32|bf16]\n");
    return 2;
  }
  std::ifstream f(a.image, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const auto t_load = Clock::now();
  ModelOptions options;
  options.kv_dtype = a.kv_dtype;
  auto model = LlavaModel::Load(a.model, options);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  const double load_ms = MsSince(t_load);
  const LlavaConfig& c = (*model)->config();
  const int V = c.num_visual_tokens();
  std::printf("model: %d layers, hidden %d, %d/%d heads, ffn %d, V=%d visual tokens; load %.0f ms\n",
              c.text.num_hidden_layers, c.text.hidden_size, c.text.num_attention_heads,
              c.text.num_key_value_heads, c.text.intermediate_size, V, load_ms);

  auto run = [&](const PruneRequest& prune, int decode_tokens) -> absl::StatusOr<GenerateResult> {
    GenerateRequest req;
    req.image_bytes = ss.str();
    req.prompt = a.prompt;
    req.prune = prune;
    req.stop.max_new_tokens = decode_tokens;
    return Generate(**model, req, nullptr);
  };
  // Unpruned: best of `repeats` prefills, decode measured on the last.
  PruneRequest none;
  none.method = "none";
  double best_prefill = 1e30, decode_tps = 0;
  GenerateResult base;
  for (int r = 0; r < a.repeats; ++r) {
    auto res = run(none, a.decode_tokens);
    if (!res.ok()) {
      std::fprintf(stderr, "%s\n", std::string(res.status().message()).c_str());
      return 1;
    }
    if (res->timings.prefill_ms < best_prefill) {
      best_prefill = res->timings.prefill_ms;
      base = *res;
    }
    decode_tps = std::max(decode_tps, res->timings.decode_tokens_per_s);
  }
  const int n_prompt = base.stats.prompt_tokens;
  const double gflop = PrefillFlops(c, base.trace) / 1e9;
  const double sgemm = SgemmGflops(n_prompt, c.text.hidden_size, c.text.intermediate_size, 3);
  std::printf("unpruned: prompt %d tokens | encode %.1f ms | prefill %.1f ms = %.1f tokens/s, "
              "%.1f GFLOP -> %.1f GFLOP/s | decode %.2f tokens/s\n",
              n_prompt, base.timings.encode_ms, best_prefill, n_prompt / (best_prefill / 1e3),
              gflop, gflop / (best_prefill / 1e3), decode_tps);
  std::printf("OpenBLAS sgemm [%d x %d] x [%d x %d]: %.1f GFLOP/s (prefill reaches %.0f%% of it)\n",
              n_prompt, c.text.hidden_size, c.text.hidden_size, c.text.intermediate_size, sgemm,
              100.0 * gflop / (best_prefill / 1e3) / sgemm);
  const double bf16 = Bf16GemmGflops(n_prompt, c.text.hidden_size, c.text.intermediate_size, 3);
  if (bf16 > 0) {
    std::printf("BF16 dot-product GEMM (the engine's, for BF16 weights), same shape: %.1f GFLOP/s "
                "(prefill reaches %.0f%% of it)\n",
                bf16, 100.0 * gflop / (best_prefill / 1e3) / bf16);
  }
  // Before the bandwidth probe's 1 GiB buffer.
  const int64_t peak_rss = PeakRssBytes();
  // Decode reads every weight and the whole KV cache once per token: their bytes over the
  // memory bandwidth bound the single-stream rate.
  const double gbs = ReadBandwidthGBs();
  const double weight_gb = WeightBytesPerToken((*model)->weights().text()) / 1e9;
  const double kv_gb = base.stats.kv_bytes / 1e9;  // the prompt's cache; it grows by a row per token
  const double bound = gbs / (weight_gb + kv_gb);
  std::printf("decode bound: (%.3f GB of weights + %.3f GB of KV cache per token) / %.1f GB/s "
              "memory read = %.1f tokens/s; measured %.2f (%.0f%% of it)\n",
              weight_gb, kv_gb, gbs, bound, decode_tps, 100.0 * decode_tps / bound);
  std::printf("peak RSS after the unpruned runs %.0f MiB (weights as stored %.0f MiB)\n",
              peak_rss / 1048576.0, (*model)->weights().stored_bytes() / 1048576.0);

  if (!a.retain.empty()) {
    std::printf("\n| method | retain (of 576) | avg visual tokens | prefill ms | speedup | FLOPs "
                "ratio (full) | FLOPs ratio (paper) | PAQ+select ms | share of prefill |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    for (double r576 : a.retain) {
      PruneRequest p;
      p.method = a.method;
      p.retain = r576 * V / 576.0;
      double best = 1e30;
      GenerateResult best_res;
      for (int r = 0; r < a.repeats; ++r) {
        auto res = run(p, 1);
        if (!res.ok()) {
          std::fprintf(stderr, "retain %.0f: %s\n", r576, std::string(res.status().message()).c_str());
          return 1;
        }
        if (res->timings.prefill_ms < best) {
          best = res->timings.prefill_ms;
          best_res = *res;
        }
      }
      const PrefillStats& s = best_res.stats;
      std::printf("| %s | %.0f (%.1f%%) | %.1f | %.1f | %.2fx | %.3f | %.3f | %.2f | %.2f%% |\n",
                  a.method.c_str(), r576, 100.0 * r576 / 576, s.average_visual_tokens, best,
                  best_prefill / best, s.flops_full / s.unpruned_flops_full,
                  s.flops_paper / s.unpruned_flops_paper, s.score_select_ms,
                  100.0 * s.score_select_ms / best);
    }
  }
  return 0;
}

}  // namespace
}  // namespace hap

int main(int argc, char** argv) { return hap::Main(argc, argv); }
