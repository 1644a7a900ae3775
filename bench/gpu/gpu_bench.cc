// The CUDA backend on a real GPU at LLaVA-1.5-7B shapes: encode, prefill and first token of whole
// requests unpruned and with a pruning method at several budgets; the method's scoring and
// selection kernels in device time; where one request's GPU time goes (CUDA events around every
// op, kernels/cuda/op_profile.h), and each op's device time and host issue time. Request stages
// start after a device synchronisation and end with one (TimeRequests), each op's
// time is taken between two synchronisations (the op repeated in between), medians after warm-up;
// no host clock runs around work still queued. bench/gpu/README.md says how to run it with a
// 7B-shape checkpoint and transformers beside it (bench/gpu/run.sh).
//
// Then decode: steps of b sequences at once (b = 1, 8, 32 by default), unpruned and with the
// method at 64 of 576 tokens (11.1%), each step timed from a synchronisation to the sampled
// ids on the host (a step ends with that copy), medians; tokens/s = b / step time. Each is
// timed twice: replaying the step's captured CUDA graph (the default) and op by op.
//
//   gpu_bench --model DIR [--image FILE] [--prompt TEXT] [--retain 192,128,64,32]
//             [--method hap] [--requests N] [--warmup N] [--kv-dtype f32|bf16]
//             [--decode-batches 1,8,32] [--decode-steps N] [--json OUT]
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "base/flags.h"
#include "base/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cuda/add.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/op_profile.h"
#include "kernels/cuda/rope.h"
#include "nlohmann/json.hpp"
#include "runtime/device/device_backend.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/pipeline.h"
#include "runtime/prune/factory.h"
#include "tests/kernels/attention_args.h"

namespace hap {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

[[noreturn]] void Die(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "gpu_bench: %s: %s\n", what.c_str(), std::string(s.message()).c_str());
  std::exit(1);
}

void Check(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(what, s);
}

// One call of an op: its device time (ms) — two warm-up batches, then the median over 7 batches of
// `reps` calls each, every batch between two synchronisations of the backend's stream — and the
// host's time to issue it (µs; the same median, of the time until the last call returned, before
// the batch's synchronisation). Where the host's exceeds the device's, a run of such ops leaves the
// GPU waiting for the host.
struct OpTime {
  double device_ms = 0, host_us = 0;
};
OpTime TimeOp(const Backend& b, const std::string& name, const std::function<absl::Status()>& op,
              int reps = 20) {
  std::vector<double> device, host;
  for (int batch = 0; batch < 9; ++batch) {
    Check(b.Synchronize(), name);
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) Check(op(), name);
    const double issued = MsSince(t0);
    Check(b.Synchronize(), name);
    if (batch < 2) continue;
    device.push_back(MsSince(t0) / reps);
    host.push_back(issued * 1e3 / reps);
  }
  return {Median(device), Median(host)};
}

// Device arrays of random values for the op table.
class Arena {
 public:
  explicit Arena(const Backend& b) : b_(b) {}
  float* F32(int64_t n, float scale = 1.f) {
    std::vector<float> host(n);
    for (float& x : host) x = scale * dist_(rng_);
    return static_cast<float*>(Put(host.data(), sizeof(float) * n));
  }
  // `count` arrays of n values each.
  template <size_t count>
  std::array<float*, count> F32s(int64_t n) {
    std::array<float*, count> out;
    for (float*& p : out) p = F32(n);
    return out;
  }
  double* F64(int64_t n) {
    std::vector<double> host(n, 1.0);
    return static_cast<double*>(Put(host.data(), sizeof(double) * n));
  }
  int32_t* Positions(int n) {
    std::vector<int32_t> host(n);
    for (int i = 0; i < n; ++i) host[i] = i;
    return static_cast<int32_t*>(Put(host.data(), sizeof(int32_t) * n));
  }
  // A BF16 weight [n, k] with entries of about 0.02.
  TensorView Bf16(int64_t n, int64_t k) {
    std::vector<uint16_t> host(n * k);
    for (uint16_t& x : host) x = F32ToBF16(0.02f * dist_(rng_));
    return TensorView(Put(host.data(), host.size() * 2), DType::kBF16, Device::kCuda, {n, k});
  }

 private:
  void* Put(const void* host, size_t bytes) {
    absl::StatusOr<BackendBuffer> buf = BackendBuffer::Allocate(b_, bytes);
    if (!buf.ok()) Die("allocate", buf.status());
    Check(b_.CopyToBackend(buf->data(), host, bytes), "upload");
    buffers_.push_back(*std::move(buf));
    return buffers_.back().data();
  }
  const Backend& b_;
  std::mt19937 rng_{7};
  std::normal_distribution<float> dist_{0.f, 1.f};
  std::vector<BackendBuffer> buffers_;
};

// Self-attention over n rows of `heads` heads of hd (as many kv heads), F32 operands.
AttentionArgs SelfAttention(const float* q, const float* k, const float* v, float* out, float* lse,
                            int n, int heads, int hd, bool causal) {
  return testing_support::SelfAttention(q, k, v, out, lse, n, heads, heads, hd,
                                        1.f / std::sqrt(static_cast<float>(hd)), causal);
}

struct OpRow {
  std::string part, op, shape;
  OpTime t;
  double gflop = 0;  // real floating-point work, 0 where not a product
};

// TimeOp for a kernel entry point called on the default stream, outside the backend: each batch
// between two device synchronisations.
OpTime TimeKernelEntry(const std::string& name, const std::function<cuda::KernelStatus()>& op,
                       int reps = 20) {
  std::vector<double> device, host;
  auto sync = [&] {
    if (cudaDeviceSynchronize() != cudaSuccess) Die(name, absl::InternalError("sync"));
  };
  for (int batch = 0; batch < 9; ++batch) {
    sync();
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) {
      const cuda::KernelStatus st = op();
      if (!st.ok) Die(name, absl::InternalError(st.message));
    }
    const double issued = MsSince(t0);
    sync();
    if (batch < 2) continue;
    device.push_back(MsSince(t0) / reps);
    host.push_back(issued * 1e3 / reps);
  }
  return {Median(device), Median(host)};
}

// The two tensor-core attention paths side by side at one shape (the backend picks one by
// head_dim): FlashAttention, and cuBLAS products around a softmax kernel (NarrowAttention).
void AddAttentionPaths(const Backend& b, const std::string& part, const std::string& shape,
                       const AttentionArgs& narrow, double gflop, std::vector<OpRow>* rows) {
  std::unique_ptr<cuda::Gemm> gemm;
  const cuda::KernelStatus created = cuda::Gemm::Create(nullptr, &gemm);
  if (!created.ok) Die("gemm", absl::InternalError(created.message));
  absl::StatusOr<void*> ws =
      b.Allocate(std::max<size_t>(1, cuda::NarrowAttentionWorkspaceBytes(narrow)));
  if (!ws.ok()) Die("workspace", ws.status());
  rows->push_back(
      {part,
       absl::StrCat("Attention BF16, FlashAttention (", cuda::FlashKeyGroups(narrow), " key group",
                    cuda::FlashKeyGroups(narrow) == 1 ? ")" : "s)"),
       shape,
       TimeKernelEntry(
           "flash", [&] { return cuda::FlashAttention(narrow, cuda::ElemType::kBF16, nullptr); }),
       gflop});
  // The other number of key groups, for the choice by shape (FlashKeyGroups) to be checked.
  const int other = cuda::FlashKeyGroups(narrow) == 1 ? 2 : 1;
  rows->push_back({part,
                   absl::StrCat("Attention BF16, FlashAttention, ", other, " key group",
                                other == 1 ? "" : "s", " (not chosen)"),
                   shape,
                   TimeKernelEntry("flash, other key groups",
                                   [&] {
                                     return cuda::FlashAttention(narrow, cuda::ElemType::kBF16,
                                                                 nullptr, nullptr,
                                                                 cuda::ElemType::kBF16, other);
                                   }),
                   gflop});
  rows->push_back(
      {part, "Attention BF16, cuBLAS + softmax", shape,
       TimeKernelEntry(
           "narrow",
           [&] { return cuda::NarrowAttention(narrow, cuda::ElemType::kBF16, *gemm, *ws); }),
       gflop});
  b.Free(*ws);
}

// The ops of one decoder layer, one vision layer and one HAP scoring layer and stage.
std::vector<OpRow> OpTable(const Backend& b, int n_text) {
  Arena a(b);
  std::vector<OpRow> rows;
  auto add = [&](std::string part, std::string op, std::string shape, double gflop,
                 const std::function<absl::Status()>& fn) {
    rows.push_back({part, op, shape, TimeOp(b, op, fn), gflop});
  };
  // Attention `at` as the op `name` with F32 operands, with BF16 operands, and through the BF16
  // kernels' own entry points.
  auto add_attention = [&](const std::string& part, const std::string& name,
                           const std::string& shape, const AttentionArgs& at, double gflop) {
    add(part, name + ", F32", shape, gflop, [&] { return b.Attention(at); });
    AttentionArgs narrow = at;
    narrow.operands = DType::kBF16;
    add(part, name + ", BF16 operands", shape, gflop, [&] { return b.Attention(narrow); });
    AddAttentionPaths(b, part, shape, narrow, gflop, &rows);
  };
  // What a prefill layer runs instead of Rope (of q and k) and FlashAttention: FlashAttention
  // rotating q and k as it loads them (FlashAttentionRope), which also writes the rotated q and
  // k and v's copy out.
  auto add_flash_rope = [&](const std::string& part, const std::string& shape,
                            const AttentionArgs& narrow, const int32_t* positions, double gflop) {
    constexpr int kTablePositions = 4096;
    const int64_t elems = int64_t{narrow.n_q} * narrow.n_heads * narrow.head_dim;
    const int64_t table = int64_t{kTablePositions} * (narrow.head_dim / 2);
    cuda::FlashRopeArgs rope;
    rope.positions = positions;
    rope.cos_table = a.F32(table);
    rope.sin_table = a.F32(table);
    rope.table_positions = kTablePositions;
    rope.theta = 10000.f;
    const cuda::KernelStatus made =
        cuda::RopeTable(const_cast<float*>(rope.cos_table), const_cast<float*>(rope.sin_table),
                        kTablePositions, narrow.head_dim, rope.theta, nullptr);
    if (!made.ok) Die("rope table", absl::InternalError(made.message));
    const auto [q_out, k_out, v_out] = a.F32s<3>(elems);
    rope.q_out = q_out;
    rope.k_out = k_out;
    rope.v_out = v_out;
    rows.push_back({part, "Attention BF16, FlashAttention + RoPE on load", shape,
                    TimeKernelEntry("flash rope",
                                    [&] {
                                      return cuda::FlashAttentionRope(
                                          narrow, rope, cuda::ElemType::kBF16, nullptr);
                                    }),
                    gflop});
  };
  // Decoder layer: 576 visual + text rows (unpruned), then 32 visual + text rows (a layer after
  // HAP kept 32), hidden 4096, 32 heads of 128, FFN 11008.
  for (const int n : {576 + n_text, 32 + n_text}) {
    const std::string part = n == 576 + n_text ? "llm" : "llm, pruned";
    const int d = 4096, heads = 32, hd = 128, f = 11008;
    const std::string rows_s = std::to_string(n);
    const auto [x, y, q, k, v, out] = a.F32s<6>(int64_t{n} * d);
    float* lse = a.F32(int64_t{heads} * n);
    const auto [gate, up] = a.F32s<2>(int64_t{n} * f);
    float* norm_w = a.F32(d);
    int32_t* pos = a.Positions(n);
    const TensorView wq = a.Bf16(d, d), wg = a.Bf16(f, d), wd = a.Bf16(d, f);
    add(part, "RmsNorm", rows_s + "x4096", 0, [&] { return b.RmsNorm(x, norm_w, y, n, d, 1e-5f); });
    add(part, "Linear q/k/v/o", rows_s + "x4096 · 4096x4096", 2e-9 * n * d * d,
        [&] { return b.Linear(y, wq, nullptr, q, n, LinearRows::kOneSequence); });
    add(part, "Linear gate/up", rows_s + "x4096 · 11008x4096", 2e-9 * n * d * f,
        [&] { return b.Linear(y, wg, nullptr, gate, n, LinearRows::kOneSequence); });
    add(part, "Linear down", rows_s + "x11008 · 4096x11008", 2e-9 * n * d * f,
        [&] { return b.Linear(gate, wd, nullptr, y, n, LinearRows::kOneSequence); });
    add(part, "Rope", rows_s + "x32x128", 0, [&] { return b.Rope(q, pos, n, heads, hd, 10000.f); });
    const double attention_gflop = 2e-9 * 2 * heads * hd * n * (n + 1.0) / 2;
    const AttentionArgs causal = SelfAttention(q, k, v, out, lse, n, heads, hd, /*causal=*/true);
    add_attention(part, "Attention causal", rows_s + "x32x128", causal, attention_gflop);
    AttentionArgs narrow = causal;
    narrow.operands = DType::kBF16;
    add_flash_rope(part, rows_s + "x32x128", narrow, pos, attention_gflop);
    add(part, "SiluMul", rows_s + "x11008", 0, [&] { return b.SiluMul(gate, up, int64_t{n} * f); });
    add(part, "Add", rows_s + "x4096", 0, [&] { return b.Add(y, x, int64_t{n} * d); });
  }
  // The two attention paths at the row counts HAP's layers run with between those two.
  for (const int n : {64 + n_text, 128 + n_text, 192 + n_text, 320 + n_text}) {
    const int d = 4096, heads = 32, hd = 128;
    const auto [q, k, v, out] = a.F32s<4>(int64_t{n} * d);
    AttentionArgs narrow = SelfAttention(q, k, v, out, nullptr, n, heads, hd, /*causal=*/true);
    narrow.operands = DType::kBF16;
    AddAttentionPaths(b, "llm", std::to_string(n) + "x32x128", narrow,
                      2e-9 * 2 * heads * hd * n * (n + 1.0) / 2, &rows);
  }
  // Vision layer (CLIP ViT-L/14 at 336 px): 577 rows, hidden 1024, 16 heads of 64, MLP 4096.
  {
    const int n = 577, d = 1024, heads = 16, hd = 64, f = 4096;
    const auto [x, y] = a.F32s<2>(int64_t{n} * d);
    float* h = a.F32(int64_t{n} * f);
    const auto [q, k, v] = a.F32s<3>(int64_t{n} * d);
    float* w = a.F32(d);
    const TensorView wq = a.Bf16(d, d), w1 = a.Bf16(f, d), w2 = a.Bf16(d, f);
    add("vision", "LayerNorm", "577x1024", 0, [&] { return b.LayerNorm(x, w, w, y, n, d, 1e-5f); });
    add("vision", "Linear q/k/v/o", "577x1024 · 1024x1024", 2e-9 * n * d * d,
        [&] { return b.Linear(x, wq, w, y, n, LinearRows::kOneSequence); });
    add("vision", "Linear fc1", "577x1024 · 4096x1024", 2e-9 * n * d * f,
        [&] { return b.Linear(x, w1, nullptr, h, n, LinearRows::kOneSequence); });
    add("vision", "Linear fc2", "577x4096 · 1024x4096", 2e-9 * n * d * f,
        [&] { return b.Linear(h, w2, nullptr, y, n, LinearRows::kOneSequence); });
    add("vision", "QuickGelu", "577x4096", 0,
        [&] { return b.Activate(Activation::kQuickGelu, h, int64_t{n} * f); });
    add_attention("vision", "Attention", "577x16x64",
                  SelfAttention(q, k, v, y, nullptr, n, heads, hd, /*causal=*/false),
                  2e-9 * 2 * heads * hd * n * n);
  }
  return rows;
}

struct Args {
  std::string model, image, json;
  std::string prompt = "What colour is the shape in the top left corner of the picture?";
  std::string method = "hap";
  std::vector<double> retain = {192, 128, 64, 32};
  int requests = 20, warmup = 3;
  std::string kv_dtype = "f32";
  std::vector<int> decode_batches = {1, 8, 32};
  int decode_steps = 32;
  std::vector<int> prefill_batches = {1, 4, 8};
  // Set: only `warmup` requests of this configuration, then one encode ("encode") or one prefill
  // ("none", or the visual tokens of 576 --method keeps) between cudaProfilerStart and
  // cudaProfilerStop, for a profiler that records that window alone (ncu --profile-from-start
  // off: bench/gpu/kernel_times.sh).
  std::string profile_window;
  double profile_kept = 0;  // the visual tokens of 576 the window's prefill keeps (0: none)
};

absl::Status ParseArgs(int argc, char** argv, Args* a) {
  HAP_ASSIGN_OR_RETURN(Flags f, Flags::Parse(argc, argv,
                                             {"model", "image", "prompt", "method", "json",
                                              "requests", "warmup", "kv-dtype", "decode-steps",
                                              "decode-batches", "prefill-batches", "retain",
                                              "profile-window"},
                                             {}));
  a->model = f.GetOr("model", a->model);
  a->image = f.GetOr("image", a->image);
  a->prompt = f.GetOr("prompt", a->prompt);
  a->method = f.GetOr("method", a->method);
  a->json = f.GetOr("json", a->json);
  a->kv_dtype = f.GetOr("kv-dtype", a->kv_dtype);
  HAP_ASSIGN_OR_RETURN(a->requests, f.PositiveInt("requests", a->requests));
  HAP_ASSIGN_OR_RETURN(const int64_t warmup, f.Int("warmup", a->warmup));
  if (warmup < 0 || warmup > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("--warmup ", warmup, " is not in [0, 1000]"));
  }
  a->warmup = static_cast<int>(warmup);
  HAP_ASSIGN_OR_RETURN(a->decode_steps, f.PositiveInt("decode-steps", a->decode_steps));
  HAP_ASSIGN_OR_RETURN(a->decode_batches, f.PositiveInts("decode-batches", a->decode_batches));
  HAP_ASSIGN_OR_RETURN(a->prefill_batches, f.PositiveInts("prefill-batches", a->prefill_batches));
  HAP_ASSIGN_OR_RETURN(a->retain, f.PositiveNumbers("retain", a->retain));
  a->profile_window = f.GetOr("profile-window", a->profile_window);
  if (!a->profile_window.empty() && a->profile_window != "encode" &&
      a->profile_window != "none") {
    double& kept = a->profile_kept;
    if (!absl::SimpleAtod(a->profile_window, &kept) || !(kept > 0) || kept > 576) {
      return absl::InvalidArgumentError(
          absl::StrCat("--profile-window ", a->profile_window,
                       ": expected encode, none, or the visual tokens of 576 kept (1 to 576)"));
    }
  }
  if (a->model.empty()) {
    return absl::InvalidArgumentError(
        "usage: gpu_bench --model DIR [--image FILE] [--retain 192,128,64,32] [--method hap] "
        "[--requests N] [--warmup N] [--kv-dtype f32|bf16] [--decode-batches 1,8,32] "
        "[--decode-steps N] [--prefill-batches 1,4,8] [--profile-window encode|none|KEPT] "
        "[--json OUT]");
  }
  return absl::OkStatus();
}

// One configuration's requests: the medians and what the last one's prefill reported.
struct RequestTimes {
  std::string name;
  PruneRequest prune;
  std::vector<double> encode_ms, encode_host_ms, prefill_ms;
  double encode = 0, encode_host = 0, prefill = 0, first_token = 0, flops_ratio = 1;
  double avg_visual = 0;
  int prompt_tokens = 0;
  PruneStats stats;
};

// `warmup` + `requests` rounds, each running every configuration once (so a clock that changes
// during the run weighs on all alike). Each stage starts after a synchronisation and ends with
// one: encode with the embeddings in device memory (as the in-process pipeline keeps them, and
// as transformers' get_image_features returns them), and once more with them copied to the host
// (what the encoder service sends); prefill from the device embeddings to the first token's id
// on the host. Then the medians.
void TimeRequests(const LlavaModel& model, const Backend& b, const std::string& image,
                  const PromptText& prompt, const Args& a, std::vector<RequestTimes>* configs) {
  for (int round = 0; round < a.warmup + a.requests; ++round) {
    for (RequestTimes& t : *configs) {
      Check(b.Synchronize(), "sync");
      auto t0 = Clock::now();
      absl::StatusOr<EncodeResult> e = EncodeImage(model, image, t.prune);
      if (!e.ok()) Die("encode", e.status());
      const double encode_host_ms = MsSince(t0);
      Check(b.Synchronize(), "sync");
      t0 = Clock::now();
      e = EncodeImage(model, image, t.prune, /*keep_in_backend=*/true);
      if (!e.ok()) Die("encode", e.status());
      Check(b.Synchronize(), "sync");
      const double encode_ms = MsSince(t0);
      const auto t1 = Clock::now();
      Sampler greedy{SamplingParams{}};
      absl::StatusOr<PrefillResult> p = RunPrefill(model, prompt, *e, t.prune, &greedy);
      if (!p.ok()) Die("prefill (" + t.name + ")", p.status());
      Check(b.Synchronize(), "sync");
      const double prefill_ms = MsSince(t1);
      if (round < a.warmup) continue;
      t.encode_ms.push_back(encode_ms);
      t.encode_host_ms.push_back(encode_host_ms);
      t.prefill_ms.push_back(prefill_ms);
      t.flops_ratio = p->stats.flops_full / p->stats.unpruned_flops_full;
      t.avg_visual = p->stats.average_visual_tokens;
      t.prompt_tokens = p->stats.prompt_tokens;
      t.stats = p->stats.prune;
    }
  }
  for (RequestTimes& t : *configs) {
    t.encode = Median(t.encode_ms);
    t.encode_host = Median(t.encode_host_ms);
    t.prefill = Median(t.prefill_ms);
    std::vector<double> first(t.encode_ms.size());
    for (size_t i = 0; i < first.size(); ++i) first[i] = t.encode_ms[i] + t.prefill_ms[i];
    t.first_token = Median(first);
  }
}

// Decode steps of `batch` copies of one request (prefilled with `prune`, each with its own cache
// in device memory with room for the steps), the batch's tokens fed back: `warmup` steps, then
// the median of `steps`. A step starts after a synchronisation and ends when its sampled ids are
// on the host. `graphs`: the steps replay captured graphs (DecodeWorkspace), else op by op.
struct DecodeTimes {
  std::string name;
  int batch = 0, context = 0;
  double step_ms = 0;
};

DecodeTimes TimeDecode(const LlavaModel& model, const Backend& b, const std::string& image,
                       const PromptText& prompt, const std::string& name, const PruneRequest& prune,
                       int batch, int warmup, int steps, bool graphs) {
  absl::StatusOr<EncodeResult> e = EncodeImage(model, image, prune, /*keep_in_backend=*/true);
  if (!e.ok()) Die("encode", e.status());
  std::vector<PrefillResult> seqs;
  std::vector<Sampler> samplers(batch, Sampler{SamplingParams{}});
  std::vector<int32_t> tokens;
  for (int i = 0; i < batch; ++i) {
    absl::StatusOr<PrefillResult> p =
        RunPrefill(model, prompt, *e, prune, &samplers[i], warmup + steps + 1);
    if (!p.ok()) Die("prefill (" + name + ")", p.status());
    tokens.push_back(p->first_token);
    seqs.push_back(std::move(*p));
  }
  std::vector<KvStore*> caches;
  std::vector<Sampler*> sampler_ptrs;
  for (int i = 0; i < batch; ++i) {
    caches.push_back(&seqs[i].kv());
    sampler_ptrs.push_back(&samplers[i]);
  }
  DecodeTimes t;
  t.name = name;
  t.batch = batch;
  t.context = caches[0]->len(model.config().text.num_hidden_layers - 1);
  DecodeWorkspace workspace(b, graphs);
  std::vector<double> ms;
  for (int s = 0; s < warmup + steps; ++s) {
    Check(b.Synchronize(), "sync");
    const auto t0 = Clock::now();
    absl::StatusOr<std::vector<int32_t>> next =
        model.DecodeBatchSampled(tokens, caches, sampler_ptrs, nullptr, &workspace);
    if (!next.ok()) Die("decode (" + name + ")", next.status());
    if (s >= warmup) ms.push_back(MsSince(t0));
    tokens = *next;
  }
  t.step_ms = Median(ms);
  return t;
}

// `batch` copies of one request's prompt prefilled one after another and in one batched pass
// (LlavaModel::PrefillBatch: one product per weight and one attention launch per layer for all of
// them), each with its own pruner and its first token drawn: `warmup` rounds, then the medians of
// `rounds`. Each starts from the image embeddings on the host after a synchronisation and ends
// when every first token's id is on the host.
struct PrefillBatchTimes {
  double solo_ms = 0, batched_ms = 0;
  int prompt_tokens = 0;
};

PrefillBatchTimes TimePrefillBatch(const LlavaModel& model, const Backend& b,
                                   const EncodeResult& encoded, const PromptText& prompt,
                                   const std::string& name, const PruneRequest& prune, int batch,
                                   int warmup, int rounds) {
  absl::StatusOr<PromptTokens> tokens = model.Tokenize(prompt, encoded.n_vis);
  if (!tokens.ok()) Die("tokenize", tokens.status());
  PruneRequest req = prune;
  req.text_tokens = static_cast<int>(tokens->ids.size()) - tokens->n_vis;
  auto pruners = [&] {
    std::vector<std::unique_ptr<Pruner>> out;
    for (int i = 0; i < batch; ++i) {
      absl::StatusOr<std::unique_ptr<Pruner>> p = MakePruner(req, DimsOf(model.config()));
      if (!p.ok()) Die("pruner (" + name + ")", p.status());
      out.push_back(std::move(*p));
    }
    return out;
  };
  std::vector<double> solo, batched;
  for (int round = 0; round < warmup + rounds; ++round) {
    std::vector<std::unique_ptr<Pruner>> mine = pruners();
    std::vector<Sampler> samplers(batch, Sampler{SamplingParams{}});
    Check(b.Synchronize(), "sync");
    auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) {
      absl::StatusOr<PrefillOutput> out =
          model.Prefill(*tokens, encoded.embeds, mine[i].get(), &samplers[i]);
      if (!out.ok()) Die("prefill (" + name + ")", out.status());
    }
    Check(b.Synchronize(), "sync");
    if (round >= warmup) solo.push_back(MsSince(t0));
    mine = pruners();
    std::vector<PrefillPrompt> prompts(batch);
    for (int i = 0; i < batch; ++i) {
      prompts[i].prompt = &*tokens;
      prompts[i].image_embeds = &encoded.embeds;
      prompts[i].pruner = mine[i].get();
      prompts[i].sampler = &samplers[i];
    }
    Check(b.Synchronize(), "sync");
    t0 = Clock::now();
    absl::StatusOr<std::vector<PrefillOutput>> outs = model.PrefillBatch(prompts);
    if (!outs.ok()) Die("batched prefill (" + name + ")", outs.status());
    Check(b.Synchronize(), "sync");
    if (round >= warmup) batched.push_back(MsSince(t0));
  }
  return {Median(solo), Median(batched), static_cast<int>(tokens->ids.size())};
}

// The pruning methods' scoring and selection kernels (kernels/cuda: text→visual rows, PAQ,
// PAQ-softmax, weighted sums, token scores, top-k).
bool IsPruningKernel(const std::string& name) {
  for (const char* k :
       {"TextVisualAttentionKernel", "PaqKernel", "PaqSoftmaxKernel", "PaqSoftmaxSumKernel",
        "PaqSoftmaxSumScoresTopKKernel", "WeightedSumKernel", "TokenScoresKernel",
        "TokenScoresTopKKernel", "StableTopKKernel", "StableTopKByRankKernel"}) {
    if (name == k) return true;
  }
  return false;
}

// One request of `t`'s configuration with every op bracketed by CUDA events
// (kernels/cuda/op_profile.h): how long the GPU was busy, how long it sat idle waiting for the
// host, and the ops that took the most of either. The events add host work of their own, so the
// idle time is an upper bound.
Json ProfileRequest(const LlavaModel& model, const Backend& b, const std::string& image,
                    const PromptText& prompt, const RequestTimes& t, bool print) {
  Json j;
  for (const char* stage : {"encode", "prefill"}) {
    absl::StatusOr<EncodeResult> e = EncodeImage(model, image, t.prune, true);
    if (!e.ok()) Die("encode", e.status());
    Check(b.Synchronize(), "sync");
    cuda::profile::Enable();
    if (std::string(stage) == "encode") {
      e = EncodeImage(model, image, t.prune, true);
      if (!e.ok()) Die("encode", e.status());
    } else {
      Sampler greedy{SamplingParams{}};
      absl::StatusOr<PrefillResult> p = RunPrefill(model, prompt, *e, t.prune, &greedy);
      if (!p.ok()) Die("prefill", p.status());
    }
    cuda::profile::Summary sum;
    const cuda::KernelStatus st = cuda::profile::Take(&sum);
    if (!st.ok) Die("profile", absl::InternalError(st.message));
    double pruning_ms = 0;
    for (const auto& x : sum.entries) {
      if (IsPruningKernel(x.name)) pruning_ms += x.device_ms;
    }
    j[stage] = {{"ops", sum.ops},
                {"busy_ms", sum.busy_ms},
                {"span_ms", sum.span_ms},
                {"pruning_kernels_ms", pruning_ms}};
    if (!print) continue;
    std::printf("\n%s, %s: %lld ops, GPU busy %.2f of %.2f ms (idle %.2f ms, %.0f%%)\n",
                t.name.c_str(), stage, static_cast<long long>(sum.ops), sum.busy_ms, sum.span_ms,
                sum.span_ms - sum.busy_ms, 100 * (sum.span_ms - sum.busy_ms) / sum.span_ms);
    std::printf("| op | count | device ms | GPU idle before it, ms |\n|---|---|---|---|\n");
    std::vector<cuda::profile::Entry> by_idle = sum.entries;
    std::sort(by_idle.begin(), by_idle.end(),
              [](const auto& x, const auto& y) { return x.idle_before_ms > y.idle_before_ms; });
    // The ten that took the most device time, then any other among the five with most idle.
    std::vector<cuda::profile::Entry> shown(
        sum.entries.begin(), sum.entries.begin() + std::min<size_t>(10, sum.entries.size()));
    for (size_t i = 0; i < std::min<size_t>(5, by_idle.size()); ++i) {
      if (std::none_of(shown.begin(), shown.end(),
                       [&](const auto& x) { return x.name == by_idle[i].name; })) {
        shown.push_back(by_idle[i]);
      }
    }
    Json entries = Json::array();
    for (const auto& x : shown) {
      std::printf("| %s | %lld | %.3f | %.3f |\n", x.name.c_str(), static_cast<long long>(x.count),
                  x.device_ms, x.idle_before_ms);
      entries.push_back({{"op", x.name},
                         {"count", x.count},
                         {"device_ms", x.device_ms},
                         {"idle_before_ms", x.idle_before_ms}});
    }
    j[stage]["entries"] = entries;
  }
  return j;
}

// --profile-window: `warmup` requests of the configuration, then the window's encode or prefill
// alone between cudaProfilerStart and cudaProfilerStop, each side of it synchronised.
int ProfileWindow(const LlavaModel& model, const Backend& b, const std::string& image,
                  const PromptText& prompt, const Args& a) {
  PruneRequest prune;
  prune.method = "none";
  if (a.profile_kept > 0) {
    prune.method = a.method;
    prune.retain = a.profile_kept * model.config().num_visual_tokens() / 576.0;
  }
  const bool encode = a.profile_window == "encode";
  for (int round = 0; round <= a.warmup; ++round) {
    absl::StatusOr<EncodeResult> e = EncodeImage(model, image, prune, /*keep_in_backend=*/true);
    if (!e.ok()) Die("encode", e.status());
    Check(b.Synchronize(), "sync");
    const bool profiled = round == a.warmup;
    if (profiled && cudaProfilerStart() != cudaSuccess) {
      Die("cudaProfilerStart", absl::InternalError("failed"));
    }
    const auto t0 = Clock::now();
    if (encode) {
      e = EncodeImage(model, image, prune, /*keep_in_backend=*/true);
      if (!e.ok()) Die("encode", e.status());
    } else {
      Sampler greedy{SamplingParams{}};
      absl::StatusOr<PrefillResult> p = RunPrefill(model, prompt, *e, prune, &greedy);
      if (!p.ok()) Die("prefill", p.status());
    }
    Check(b.Synchronize(), "sync");
    if (!profiled) continue;
    const double ms = MsSince(t0);
    if (cudaProfilerStop() != cudaSuccess) Die("cudaProfilerStop", absl::InternalError("failed"));
    std::printf("profiled window: one %s of %s, %.2f ms of wall time (under the profiler)\n",
                encode ? "encode" : "prefill",
                encode ? "the image" : (prune.method + " " + a.profile_window).c_str(), ms);
  }
  return 0;
}

int Main(int argc, char** argv) {
  Args a;
  if (absl::Status parsed = ParseArgs(argc, argv, &a); !parsed.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", std::string(parsed.message()).c_str());
    return 2;
  }
  absl::StatusOr<const Backend*> backend = BackendForDevice("cuda");
  if (!backend.ok()) Die("--device cuda", backend.status());
  const Backend& b = **backend;

  Json out;
  cudaDeviceProp prop{};
  int device = 0, driver = 0, runtime = 0;
  cudaGetDevice(&device);
  cudaGetDeviceProperties(&prop, device);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::printf("GPU: %s (%d SMs, %.0f GiB), CUDA driver %d.%d, runtime %d.%d, %s\n", prop.name,
              prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, driver / 1000,
              driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, date);
  out["gpu"] = prop.name;
  out["cuda_driver"] = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  out["date"] = date;

  ModelOptions options;
  options.backend = &b;
  absl::StatusOr<DType> kv_dtype = ParseKvDTypeFlagValue("--kv-dtype", a.kv_dtype);
  if (!kv_dtype.ok()) Die("--kv-dtype", kv_dtype.status());
  options.kv_dtype = *kv_dtype;
  const auto t_load = Clock::now();
  absl::StatusOr<std::unique_ptr<LlavaModel>> model = LlavaModel::Load(a.model, options);
  if (!model.ok()) Die("load " + a.model, model.status());
  std::printf("model %s: loaded in %.1f s\n", a.model.c_str(), MsSince(t_load) / 1e3);
  const LlavaConfig& c = (*model)->config();
  const int V = c.num_visual_tokens();

  absl::StatusOr<std::string> pattern = PatternPng(336);
  if (!pattern.ok()) Die("image", pattern.status());
  std::string image = *pattern;
  if (!a.image.empty()) {
    std::ifstream f(a.image, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    image = ss.str();
  }
  const PromptText prompt(a.prompt);
  if (!a.profile_window.empty()) return ProfileWindow(**model, b, image, prompt, a);

  // Whole requests first (the op table's random arrays would otherwise share the device).
  std::vector<RequestTimes> configs(1);
  configs[0].name = "none";
  configs[0].prune.method = "none";
  for (double r576 : a.retain) {
    RequestTimes t;
    t.name = a.method + " " + std::to_string(static_cast<int>(r576));
    t.prune.method = a.method;
    t.prune.retain = r576 * V / 576.0;
    configs.push_back(t);
  }
  TimeRequests(**model, b, image, prompt, a, &configs);
  const RequestTimes& base = configs[0];
  const int n_text = base.prompt_tokens - V;
  std::printf(
      "\nprompt: %d tokens (%d visual, %d text); median of %d rounds after %d warm-up, "
      "each round one request of every configuration\n",
      base.prompt_tokens, V, n_text, a.requests, a.warmup);
  std::printf(
      "\n| config | encode ms | encode to host ms | prefill ms | first token ms | prefill speedup "
      "| FLOPs ratio | %s kernels ms (device, one profiled request) | share of prefill |\n",
      a.method.c_str());
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| none | %.2f | %.2f | %.2f | %.2f | 1.00x | 1.000 | — | — |\n", base.encode,
              base.encode_host, base.prefill, base.first_token);
  Json reqs = Json::array();
  reqs.push_back({{"config", "none"},
                  {"encode_ms", base.encode},
                  {"encode_to_host_ms", base.encode_host},
                  {"prefill_ms", base.prefill},
                  {"first_token_ms", base.first_token},
                  {"prompt_tokens", base.prompt_tokens}});
  Json profiles;
  for (const RequestTimes& t : configs) {
    profiles[t.name] = ProfileRequest(**model, b, image, prompt, t, /*print=*/false);
  }
  for (size_t i = 1; i < configs.size(); ++i) {
    const RequestTimes& t = configs[i];
    // The method's kernels over the whole prefill, device time (events around each).
    const double select_ms = profiles[t.name]["prefill"]["pruning_kernels_ms"].get<double>();
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2fx | %.3f | %.2f | %.1f%% |\n",
                t.name.c_str(), t.encode, t.encode_host, t.prefill, t.first_token,
                base.prefill / t.prefill, t.flops_ratio, select_ms, 100 * select_ms / t.prefill);
    reqs.push_back({{"config", t.name},
                    {"encode_ms", t.encode},
                    {"encode_to_host_ms", t.encode_host},
                    {"prefill_ms", t.prefill},
                    {"first_token_ms", t.first_token},
                    {"flops_ratio", t.flops_ratio},
                    {"avg_visual_tokens", t.avg_visual},
                    {"select_ms_device", select_ms}});
  }
  out["requests"] = reqs;
  for (const RequestTimes& t : configs) {
    if (t.name == "none" || t.name == configs.back().name) {
      profiles[t.name] = ProfileRequest(**model, b, image, prompt, t, /*print=*/true);
    }
  }
  out["profiles"] = profiles;

  // The pruned configuration the decode and batched-prefill tables set beside "none": the method
  // keeping 64 of LLaVA's 576 visual tokens.
  PruneRequest hap_64;
  hap_64.method = a.method;
  hap_64.retain = 64.0 * V / 576.0;
  const std::string hap_name = a.method + " 64";

  // Decode: a step of b sequences; the bound is the weights read once per step.
  {
    std::printf(
        "\n| decode | batch | last layer's cache rows | step ms | tokens/s | step ms op by op "
        "(no graphs) | graphs speedup |\n"
        "|---|---|---|---|---|---|---|\n");
    Json decode = Json::array();
    for (const auto& [name, prune] :
         {std::pair<std::string, PruneRequest>{"none", base.prune}, {hap_name, hap_64}}) {
      for (int batch : a.decode_batches) {
        const DecodeTimes t = TimeDecode(**model, b, image, prompt, name, prune, batch, a.warmup,
                                         a.decode_steps, /*graphs=*/true);
        const DecodeTimes eager = TimeDecode(**model, b, image, prompt, name, prune, batch,
                                             a.warmup, a.decode_steps, /*graphs=*/false);
        std::printf("| %s | %d | %d | %.2f | %.1f | %.2f | %.2fx |\n", name.c_str(), batch,
                    t.context, t.step_ms, 1e3 * batch / t.step_ms, eager.step_ms,
                    eager.step_ms / t.step_ms);
        decode.push_back({{"config", name},
                          {"batch", batch},
                          {"context", t.context},
                          {"step_ms", t.step_ms},
                          {"tokens_per_s", 1e3 * batch / t.step_ms},
                          {"step_ms_op_by_op", eager.step_ms}});
      }
    }
    out["decode"] = decode;
    out["kv_dtype"] = a.kv_dtype;
  }

  // Prefill of several prompts: one after another, then in one batched pass.
  {
    std::printf(
        "\n| prefill of several prompts | prompts | one after another, ms | one pass, ms | "
        "speed-up | prompt tokens/s in one pass |\n|---|---|---|---|---|---|\n");
    PruneRequest none;
    none.method = "none";
    absl::StatusOr<EncodeResult> encoded = EncodeImage(**model, image, none);
    if (!encoded.ok()) Die("encode", encoded.status());
    Json batches = Json::array();
    for (const auto& [name, prune] :
         {std::pair<std::string, PruneRequest>{"none", none}, {hap_name, hap_64}}) {
      for (int batch : a.prefill_batches) {
        const PrefillBatchTimes t = TimePrefillBatch(**model, b, *encoded, prompt, name, prune,
                                                     batch, a.warmup, a.requests);
        const double tokens_per_s = 1e3 * batch * t.prompt_tokens / t.batched_ms;
        std::printf("| %s | %d | %.2f | %.2f | %.2fx | %.0f |\n", name.c_str(), batch, t.solo_ms,
                    t.batched_ms, t.solo_ms / t.batched_ms, tokens_per_s);
        batches.push_back({{"config", name},
                           {"prompts", batch},
                           {"solo_ms", t.solo_ms},
                           {"batched_ms", t.batched_ms},
                           {"prompt_tokens", t.prompt_tokens}});
      }
    }
    out["prefill_batches"] = batches;
  }

  std::printf(
      "\n| part | op | shape | device ms | TFLOP/s | host µs to issue |\n"
      "|---|---|---|---|---|---|\n");
  Json ops = Json::array();
  for (const OpRow& r : OpTable(b, n_text)) {
    const std::string tflops = r.gflop > 0 ? std::to_string(r.gflop / r.t.device_ms) : "";
    std::printf("| %s | %s | %s | %.4f | %s | %.1f |\n", r.part.c_str(), r.op.c_str(),
                r.shape.c_str(), r.t.device_ms, tflops.substr(0, 5).c_str(), r.t.host_us);
    ops.push_back({{"part", r.part},
                   {"op", r.op},
                   {"shape", r.shape},
                   {"ms", r.t.device_ms},
                   {"host_us", r.t.host_us}});
  }
  out["ops"] = ops;
  // The floor under every small op: a one-value Add through the backend (its checks, its
  // stream) against the kernel's own entry point on the default stream, host µs per call.
  {
    absl::StatusOr<void*> mem = b.Allocate(sizeof(float));
    if (!mem.ok()) Die("allocate", mem.status());
    float* one = static_cast<float*>(*mem);
    const float zero = 0.f;
    Check(b.CopyToBackend(one, &zero, sizeof(float)), "upload");
    auto per_call_us = [&](const std::function<void()>& call) {
      std::vector<double> us;
      for (int batch = 0; batch < 7; ++batch) {
        if (cudaDeviceSynchronize() != cudaSuccess) Die("sync", absl::InternalError("cuda"));
        const auto t0 = Clock::now();
        for (int r = 0; r < 200; ++r) call();
        us.push_back(MsSince(t0) * 1e3 / 200);
      }
      if (cudaDeviceSynchronize() != cudaSuccess) Die("sync", absl::InternalError("cuda"));
      return Median(us);
    };
    const double raw = per_call_us([&] {
      const cuda::KernelStatus st = cuda::Add(one, one, 1, nullptr);
      if (!st.ok) Die("cuda::Add", absl::InternalError(st.message));
    });
    const double backend = per_call_us([&] { Check(b.Add(one, one, 1), "Add"); });
    b.Free(one);
    std::printf(
        "\nA one-value Add, host µs per call: %.2f through the backend, %.2f through the "
        "kernel's entry point (cudaLaunchKernel and the launch wrapper)\n",
        backend, raw);
    out["launch_floor_us"] = {{"backend_add", backend}, {"kernel_entry_add", raw}};
  }
  if (!a.json.empty()) {
    std::ofstream f(a.json);
    f << out.dump(2) << "\n";
    if (!f) Die("--json", absl::InternalError("cannot write " + a.json));
  }
  return 0;
}

}  // namespace
}  // namespace hap

int main(int argc, char** argv) { return hap::Main(argc, argv); }
