// The Prometheus metrics each service records (prefix hap_), registered on the process's
// registry the first time a service asks for them, so each binary exposes only its own. The
// request counter and end-to-end latency per RPC come from telemetry::RpcMetrics; in-flight,
// queued, KV and exporter figures are read from the service state at scrape time (ServiceHost).
#pragma once

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
  static PrefillMetrics& Get();
};

struct DecodeMetrics {
  telemetry::Histogram* decode_seconds;  // decode loop of one request
  telemetry::Counter* decode_tokens;     // tokens decoded (the first, from prefill, included)
  telemetry::Counter* kv_received_bytes;
  static DecodeMetrics& Get();
};

}  // namespace hap::svc
