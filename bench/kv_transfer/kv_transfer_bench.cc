// KV transfer and end-to-end latency benchmark (a program, not a test; prints numbers):
//  1. KV transfer throughput prefill → decode over loopback gRPC (chunked, checksummed, checked)
//     next to a raw TCP copy of the same bytes in the same run;
//  2. TTFT and inter-token latency through the three services, unpruned and pruned.
// It starts hap-encoder/-prefill/-decode as child processes on the model you pass.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/timer.h"
#include "bench/common/bench_options.h"
#include "bench/common/percentile.h"
#include "bench/common/services_bench.h"
#include "bench/kv_transfer/tcp_copy.h"
#include "hap/v1/decode.grpc.pb.h"
#include "runtime/io/config.h"
#include "runtime/io/model_dir.h"
#include "runtime/model/kv_cache.h"
#include "runtime/prune/planner.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "services/server/options.h"
#include "services/wire/kv_codec.h"

namespace hap::bench {
namespace {

std::vector<svc::OptionSpec> Specs() {
  return {
      ModelSpec(),
      ImageSpec("image for the end-to-end requests"),
      {"prompt", "HAP_BENCH_PROMPT", "What is in the picture?", "question"},
      {"method", "HAP_BENCH_METHOD", "hap", "pruning method for the pruned run"},
      {"retain", "HAP_BENCH_RETAIN", "11.1%", "its budget (64 of 576 visual tokens)"},
      {"requests", "HAP_BENCH_REQUESTS", "5", "end-to-end requests per configuration"},
      {"max-new-tokens", "HAP_BENCH_MAX_NEW_TOKENS", "32", "tokens per request"},
      {"transfer-iters", "HAP_BENCH_TRANSFER_ITERS", "5", "KV transfers (and TCP copies) timed"},
      {"text-tokens", "HAP_BENCH_TEXT_TOKENS", "40", "prompt text rows in the synthetic KV cache"},
      {"max-message-bytes", "HAP_MAX_MESSAGE_BYTES", "4194304", "gRPC message limit (chunk size)"},
      {"threads", "HAP_THREADS", "0", "model threads per service"},
      BinDirSpec(),
      {"kv-dtype", "HAP_KV_DTYPE", "f32",
       "KV cache dtype of the transfer and of prefill and decode: f32 or bf16"},
  };
}

// A cache shaped like the unpruned prompt of this model (values are arbitrary), in `dtype`.
KvCache SyntheticCache(const LlavaConfig& cfg, int text_tokens, DType dtype) {
  KvCache c;
  c.kv_dim = cfg.text.num_key_value_heads * cfg.text.head_dim;
  const int rows = cfg.num_visual_tokens() + text_tokens;
  c.next_position = rows;
  for (int l = 0; l < cfg.text.num_hidden_layers; ++l) {
    LayerKv& layer = c.layers.emplace_back();
    layer.k.resize(static_cast<size_t>(rows) * c.kv_dim);
    layer.v.resize(static_cast<size_t>(rows) * c.kv_dim);
    for (size_t i = 0; i < layer.k.size(); ++i) {
      layer.k[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f;
      layer.v[i] = -layer.k[i];
    }
    layer.positions.resize(rows);
    std::iota(layer.positions.begin(), layer.positions.end(), 0);
  }
  if (dtype == DType::kF32) return c;
  KvCache narrow;
  narrow.SetDType(dtype).IgnoreError();  // F32 or BF16, checked by the caller
  narrow.kv_dim = c.kv_dim;
  narrow.next_position = c.next_position;
  narrow.layers.resize(c.layers.size());
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const LayerKv& src = c.layers[l];
    narrow
        .Append(CpuBackend(), static_cast<int>(l), src.k.data(), src.v.data(), src.positions.data(),
                src.len())
        .IgnoreError();
  }
  return narrow;
}

// One transfer to decode; seconds from the header write to decode's acknowledgement.
absl::StatusOr<double> TransferOnce(hap::v1::Decode::Stub* stub, const KvCache& cache,
                                    const LlavaConfig& cfg, int max_message_bytes) {
  auto chunker = svc::KvChunker::Create(&cache, max_message_bytes);
  if (!chunker.ok()) return chunker.status();
  grpc::ClientContext ctx;
  auto stream = stub->Decode(&ctx);
  hap::v1::DecodeRequest msg;
  hap::v1::KvHeader* h = msg.mutable_header();
  chunker->FillHeader(h);
  h->set_request_id("bench");
  h->set_d_model(cfg.text.hidden_size);
  h->set_vocab_size(cfg.text.vocab_size);
  h->set_first_token(1);
  h->set_samples_drawn(1);
  h->set_max_new_tokens(1);
  const auto t0 = Clock::now();
  bool ok = stream->Write(msg);
  while (ok && chunker->Next(msg.mutable_chunk())) ok = stream->Write(msg);
  if (ok) {
    chunker->FillTrailer(msg.mutable_trailer());
    ok = stream->Write(msg);
  }
  stream->WritesDone();
  hap::v1::DecodeResponse resp;
  double seconds = -1;
  while (stream->Read(&resp)) {
    if (resp.has_ack() && seconds < 0) {
      seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    }
  }
  const grpc::Status st = stream->Finish();
  if (!st.ok())
    return absl::UnavailableError(absl::StrCat("transfer failed: ", st.error_message()));
  if (seconds < 0) return absl::InternalError("no acknowledgement from decode");
  return seconds;
}

// The codec's CPU cost without any transport: chunk + serialize on the sender, parse + check +
// assemble on the receiver. Seconds for the whole cache.
struct CodecCost {
  double send_s = 0, receive_s = 0;
};
absl::StatusOr<CodecCost> CodecOnly(const KvCache& cache, const LlavaConfig& cfg,
                                    int max_message_bytes) {
  auto chunker = svc::KvChunker::Create(&cache, max_message_bytes);
  if (!chunker.ok()) return chunker.status();
  hap::v1::DecodeRequest msg;
  hap::v1::KvHeader* h = msg.mutable_header();
  chunker->FillHeader(h);
  h->set_d_model(cfg.text.hidden_size);
  h->set_vocab_size(cfg.text.vocab_size);
  h->set_first_token(1);
  h->set_samples_drawn(1);
  h->set_max_new_tokens(1);
  std::vector<std::string> wire;
  wire.push_back(msg.SerializeAsString());
  const auto t0 = Clock::now();
  while (chunker->Next(msg.mutable_chunk())) wire.push_back(msg.SerializeAsString());
  chunker->FillTrailer(msg.mutable_trailer());
  wire.push_back(msg.SerializeAsString());
  const auto t1 = Clock::now();
  svc::KvExpectation e;
  e.n_layers = cfg.text.num_hidden_layers;
  e.kv_dim = cache.kv_dim;
  e.d_model = cfg.text.hidden_size;
  e.vocab_size = cfg.text.vocab_size;
  e.max_positions = cfg.text.max_position_embeddings;
  svc::KvAssembler assembler(e);
  hap::v1::DecodeRequest in;
  for (const std::string& w : wire) {
    if (!in.ParseFromString(w)) return absl::InternalError("parse failed");
    absl::Status s = in.has_header()  ? assembler.OnHeader(in.header())
                     : in.has_chunk() ? assembler.OnChunk(in.chunk())
                                      : assembler.OnTrailer(in.trailer());
    if (!s.ok()) return s;
  }
  const auto t2 = Clock::now();
  return CodecCost{std::chrono::duration<double>(t1 - t0).count(),
                   std::chrono::duration<double>(t2 - t1).count()};
}

int TransferBench(const sdk::LocalPipeline& pipeline, const LlavaConfig& cfg, int text_tokens,
                  int iters, int max_message_bytes, DType dtype) {
  const KvCache cache = SyntheticCache(cfg, text_tokens, dtype);
  const double gb = cache.bytes() / 1e9;
  auto channel = sdk::MakeChannel(pipeline.address(sdk::Service::kDecode), sdk::ClientOptions());
  if (!channel.ok()) return 1;
  auto stub = hap::v1::Decode::NewStub(*channel);
  auto chunker = svc::KvChunker::Create(&cache, max_message_bytes);
  std::printf(
      "== KV transfer: %d layers x %d rows x kv_dim %d = %.1f MB (K+V, %s), %d chunks of "
      "<= %d bytes ==\n",
      cfg.text.num_hidden_layers, cache.layers[0].len(), cache.kv_dim, cache.bytes() / 1e6,
      std::string(DTypeName(dtype)).c_str(), chunker.ok() ? chunker->n_chunks() : 0,
      max_message_bytes);
  std::vector<std::string_view> parts;
  for (int l = 0; l < cache.n_layers(); ++l) {
    const size_t bytes = static_cast<size_t>(cache.len(l)) * cache.row_bytes();
    parts.emplace_back(reinterpret_cast<const char*>(cache.k_bytes(l)), bytes);
    parts.emplace_back(reinterpret_cast<const char*>(cache.v_bytes(l)), bytes);
  }
  std::vector<double> grpc_s, tcp_s, send_s, receive_s;
  if (auto warm = TransferOnce(stub.get(), cache, cfg, max_message_bytes); !warm.ok()) {
    std::fprintf(stderr, "kv transfer: %s\n", std::string(warm.status().message()).c_str());
    return 1;
  }
  for (int i = 0; i < iters; ++i) {
    auto s = TransferOnce(stub.get(), cache, cfg, max_message_bytes);
    auto t = TcpCopySeconds(parts);
    if (!s.ok() || !t.ok()) {
      std::fprintf(stderr, "kv transfer: %s\n",
                   std::string((s.ok() ? t.status() : s.status()).message()).c_str());
      return 1;
    }
    grpc_s.push_back(*s);
    tcp_s.push_back(*t);
    if (auto c = CodecOnly(cache, cfg, max_message_bytes); c.ok()) {
      send_s.push_back(c->send_s);
      receive_s.push_back(c->receive_s);
    }
  }
  auto row = [&](const char* name, const std::vector<double>& s) {
    std::printf("  %-34s median %7.2f ms  %6.2f GB/s   best %7.2f ms  %6.2f GB/s\n", name,
                Median(s) * 1e3, gb / Median(s), *std::min_element(s.begin(), s.end()) * 1e3,
                gb / *std::min_element(s.begin(), s.end()));
  };
  row("gRPC Decode stream (to ack)", grpc_s);
  row("raw TCP copy, same bytes", tcp_s);
  std::printf("  gRPC / TCP throughput (median)     %.0f%%\n",
              100.0 * Median(tcp_s) / Median(grpc_s));
  row("codec only: chunk+CRC+serialize", send_s);
  row("codec only: parse+check+assemble", receive_s);
  std::printf("\n");
  return 0;
}

struct E2eRow {
  std::string name;
  std::vector<double> ttft, itl, server_ttft, prefill, kv_ms, decode_tps;
  double kv_bytes = 0, kv_unpruned = 0, avg_visual = 0;
};

int E2eBench(sdk::Client* client, const std::string& image, const svc::Options& o, int requests,
             int max_new) {
  std::vector<std::pair<std::string, hap::v1::Pruning>> configs;
  hap::v1::Pruning none;
  none.set_method("none");
  configs.emplace_back("none (unpruned)", none);
  hap::v1::Pruning pruned;
  pruned.set_method(o.Get("method"));
  pruned.set_retain(o.Get("retain"));
  configs.emplace_back(absl::StrCat(o.Get("method"), " retain ", o.Get("retain")), pruned);
  std::vector<E2eRow> rows;
  for (const auto& [name, pruning] : configs) {
    E2eRow row;
    row.name = name;
    hap::v1::GenerateRequest req;
    req.set_image(image);
    req.set_prompt(o.Get("prompt"));
    req.set_max_new_tokens(max_new);
    *req.mutable_pruning() = pruning;
    for (int i = -1; i < requests; ++i) {  // i = -1 warms up
      auto got = client->Generate(req);
      if (!got.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), got.status().ToString().c_str());
        return 1;
      }
      if (i < 0) continue;
      const auto& t = got->stats.timings();
      row.ttft.push_back(got->ttft_ms);
      for (size_t k = 1; k < got->token_times_ms.size(); ++k) {
        row.itl.push_back(got->token_times_ms[k] - got->token_times_ms[k - 1]);
      }
      row.server_ttft.push_back(t.ttft_ms());
      row.prefill.push_back(t.prefill_ms());
      row.kv_ms.push_back(t.kv_transfer_ms());
      row.decode_tps.push_back(t.decode_tokens_per_s());
      row.kv_bytes = got->stats.kv_bytes();
      row.kv_unpruned = got->stats.kv_bytes_unpruned();
      row.avg_visual = got->stats.average_visual_tokens();
    }
    rows.push_back(row);
  }
  std::printf(
      "== End to end: %d requests x %d new tokens per configuration (client-side TTFT "
      "and inter-token latency) ==\n",
      requests, max_new);
  std::printf("  %-22s %9s %9s %9s %9s %9s %9s %9s %10s %8s\n", "config", "TTFT p50", "TTFT p90",
              "ITL p50", "ITL p90", "prefill", "KV xfer", "dec tok/s", "KV MB", "vis tok");
  for (const E2eRow& r : rows) {
    std::printf("  %-22s %7.1fms %7.1fms %7.2fms %7.2fms %7.1fms %7.2fms %9.1f %10.2f %8.1f\n",
                r.name.c_str(), Median(r.ttft), Percentile(r.ttft, 0.9), Median(r.itl),
                Percentile(r.itl, 0.9), Median(r.prefill), Median(r.kv_ms), Median(r.decode_tps),
                r.kv_bytes / 1e6, r.avg_visual);
  }
  if (rows.size() == 2 && Median(rows[1].ttft) > 0) {
    std::printf("  pruned / unpruned: TTFT %.2fx, prefill %.2fx, KV bytes %.2fx\n",
                Median(rows[1].ttft) / Median(rows[0].ttft),
                Median(rows[1].prefill) / Median(rows[0].prefill),
                rows[1].kv_bytes / rows[0].kv_bytes);
    std::printf("\n");
  }
  return 0;
}

int Main(int argc, char** argv) {
  int exit_code = 0;
  std::optional<svc::Options> o =
      ParseBenchOptions(argc, argv, "kv_transfer_bench", Specs(), &exit_code);
  if (!o) return exit_code;
  auto requests = o->Int("requests", 1, 100000);
  auto max_new = o->Int("max-new-tokens", 2, 1 << 20);
  auto iters = o->Int("transfer-iters", 1, 10000);
  auto text_tokens = o->Int("text-tokens", 1, 1 << 20);
  auto max_msg = o->Int("max-message-bytes", 4096, 1 << 30);
  for (const absl::Status& s : {requests.status(), max_new.status(), iters.status(),
                                text_tokens.status(), max_msg.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "kv_transfer_bench: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  const std::string model = ResolveModelDir(o->Get("model"));
  auto cfg = LoadLlavaConfig(model);
  if (!cfg.ok()) {
    std::fprintf(stderr, "kv_transfer_bench: %s\n", std::string(cfg.status().message()).c_str());
    return 1;
  }
  const std::string kv_dtype = o->Get("kv-dtype");
  const absl::StatusOr<DType> parsed_kv_dtype = ParseKvDTypeFlagValue("--kv-dtype", kv_dtype);
  if (!parsed_kv_dtype.ok()) {
    std::fprintf(stderr, "kv_transfer_bench: %s\n",
                 std::string(parsed_kv_dtype.status().message()).c_str());
    return 2;
  }
  std::ifstream f(o->Get("image"), std::ios::binary);
  const std::string image((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  sdk::LocalPipelineOptions po = QuietPipelineOptions(
      *o, model,
      {"--threads", o->Get("threads"), "--max-message-bytes", o->Get("max-message-bytes")});
  po.kv_dtype = kv_dtype;
  auto pipeline = sdk::LocalPipeline::Start(po);
  if (!pipeline.ok()) {
    std::fprintf(stderr, "kv_transfer_bench: %s\n", pipeline.status().ToString().c_str());
    return 1;
  }
  std::printf("model %s: %d layers, hidden %d, kv_dim %d, %d visual tokens\n\n", model.c_str(),
              cfg->text.num_hidden_layers, cfg->text.hidden_size,
              cfg->text.num_key_value_heads * cfg->text.head_dim, cfg->num_visual_tokens());
  if (int rc =
          TransferBench(**pipeline, *cfg, static_cast<int>(*text_tokens), static_cast<int>(*iters),
                        static_cast<int>(*max_msg), *parsed_kv_dtype);
      rc != 0) {
    return rc;
  }
  auto client = sdk::Client::Connect((*pipeline)->front_door());
  if (!client.ok()) return 1;
  return E2eBench(client->get(), image, *o, static_cast<int>(*requests),
                  static_cast<int>(*max_new));
}

}  // namespace
}  // namespace hap::bench

int main(int argc, char** argv) { return hap::bench::Main(argc, argv); }
