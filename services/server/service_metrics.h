// The Prometheus metrics each service records (prefix hap_), registered on the process's
// registry the first time a service asks for them, so each binary exposes only its own. The
// request counter and end-to-end latency per RPC come from telemetry::RpcMetrics; in-flight,
// queued, KV and exporter figures are read from the service state at scrape time (ServiceHost).
#pragma once

#include "runtime/model/row_sampling.h"
#include "telemetry/metrics.h"

namespace hap::svc {

struct EncoderMetrics {
  telemetry::Histogram* encode_seconds;  // decode + preprocess + vision tower + projector
  static EncoderMetrics& Get();
};

struct PrefillMetrics {
  telemetry::Histogram* prefill_seconds;      // the pruned LLM prefill, tokenisation included
  telemetry::Histogram* group_seconds;        // each layer group: its layers + its pruning step
  telemetry::Histogram* prune_seconds;        // each group's pruning step (PAQ + selection)
  telemetry::Histogram* kv_transfer_seconds;  // first KV message sent → decode's acknowledgement
  telemetry::Histogram* ttft_seconds;         // request received → first token relayed
  telemetry::Histogram* inter_token_seconds;  // between consecutive tokens relayed
  telemetry::Histogram* kept_ratio;           // average visual tokens per layer / image tokens
  telemetry::Counter* input_tokens;           // prompt tokens, visual tokens included (unpruned)
  telemetry::Counter* output_tokens;          // tokens relayed to clients
  telemetry::Counter* flops_saved;            // unpruned − pruned prefill FLOPs (full convention)
  telemetry::Counter* flops_unpruned;         // unpruned prefill FLOPs (full convention)
  telemetry::Counter* kv_transfer_bytes;      // KV cache bytes decode acknowledged
  telemetry::Counter* slow_client_cutoffs;    // Generate calls cut off: the client stopped reading
  telemetry::Counter* prefill_yields;         // turns a sliced prefill handed to waiting ones
  telemetry::Counter* prefill_passes;         // batched passes run (--prefill-batch-tokens)
  telemetry::Counter* kv_device_handovers;    // KV caches decode took on the device (CUDA IPC)
  // hap_peer_retries_total{peer}: calls made again on another replica because the first was
  // unavailable before anything of the request reached it or came back.
  telemetry::Counter* decode_retries;   // peer="decode": before decode took the KV cache
  telemetry::Counter* encoder_retries;  // peer="encoder": before any embedding came back
  static PrefillMetrics& Get();
};

struct DecodeMetrics {
  telemetry::Histogram* decode_seconds;  // decode loop of one request
  telemetry::Counter* decode_tokens;     // tokens decoded (the first, from prefill, included)
  telemetry::Counter* kv_received_bytes;
  static DecodeMetrics& Get();
};

// hap_sampled_rows_total{path}: rows of logits turned into tokens, by how (RowSamplingCounts).
// On a device: "argmax" (a greedy row's id came back), "candidates" (its top logits decided the
// token), "full_row" (the row itself came back: the candidates could not decide). On the CPU
// backend every row is "host" (sampled in place, nothing copied). hap-prefill counts its first
// tokens, hap-decode the rows of its decode steps. All four paths are exported from the start.
struct SampledRowsMetrics {
  telemetry::Counter* argmax;
  telemetry::Counter* candidates;
  telemetry::Counter* full_row;
  telemetry::Counter* host;
  void Count(const RowSamplingCounts& counts) const;
  static SampledRowsMetrics& Get();
};

}  // namespace hap::svc
