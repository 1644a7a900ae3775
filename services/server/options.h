// Service configuration: every option is a flag (--name value / --name=value) with an
// environment-variable fallback (HAP_NAME) and a default. Flags win over the environment.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/thread_pool.h"

namespace hap::svc {

struct OptionSpec {
  std::string flag;           // "max-concurrent"
  std::string env;            // "HAP_MAX_CONCURRENT"
  std::string default_value;  // used when neither is set
  std::string help;
};

class Options {
 public:
  // InvalidArgument for an unknown flag or a flag without its value. `--help` sets help().
  static absl::StatusOr<Options> Parse(const std::vector<std::string>& args,
                                       const std::vector<OptionSpec>& specs);

  bool help() const { return help_; }
  // The value and where it came from (flag, env or default); "" when unset everywhere.
  std::string Get(const std::string& flag) const;
  bool IsSet(const std::string& flag) const;   // given as a flag or in the environment
  bool IsFlag(const std::string& flag) const;  // given as a flag
  absl::StatusOr<int64_t> Int(const std::string& flag, int64_t min, int64_t max) const;
  absl::StatusOr<double> Double(const std::string& flag) const;
  // "on" → true, "off" → false; InvalidArgument naming where the value came from otherwise.
  absl::StatusOr<bool> OnOff(const std::string& flag) const;

  // "usage: NAME [flags]" and one line per option with its env variable and default.
  static std::string Usage(const std::string& program, const std::vector<OptionSpec>& specs);

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> sources_;  // flag → "--flag" / "$ENV"
  bool help_ = false;
};

// Options every service has: where to listen, which model, threads, limits, draining.
std::vector<OptionSpec> CommonOptionSpecs();

// Options that more than one service takes, with the same meaning (and help) in each.
OptionSpec MaxImageBytesSpec();  // hap-encoder, hap-prefill
OptionSpec MaxKvBytesSpec();     // hap-prefill, hap-decode
// --attention-dtype; `attention` says whose operands they are ("the prefill attention's").
OptionSpec AttentionDTypeSpec(const std::string& attention);

struct CommonOptions {
  std::string host = "0.0.0.0";
  int port = 0;  // 0 = pick a free port (printed on stdout)
  std::string model_dir;
  std::string device = "cpu";                     // compute backend: cpu | cuda (runtime/device)
  int threads = 0;                                // model CPU threads; 0 = all cores
  int pool_spin_us = ThreadPool::kDefaultSpinUs;  // compute pool hand-over spin before sleeping
  int max_concurrent = 4;                         // requests running at once
  int queue_length = 16;                          // admitted requests waiting for a worker
  bool warm_up = true;              // one warm-up request before serving (runtime/model/pipeline.h)
  int max_message_bytes = 4 << 20;  // no gRPC message above this
  int64_t drain_timeout_ms = 30000;  // SIGTERM: wait this long for in-flight requests
  // TLS: serve with this PEM certificate chain and key (both or neither); with client_ca set,
  // clients must present a certificate it signed (mutual TLS).
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
  // Telemetry. Tracing: the OpenTelemetry environment (OTEL_*), with these flags winning over
  // it; "" = not given. Metrics: Prometheus /metrics on this port (0 = a free one), -1 = off.
  std::string otlp_endpoint, otlp_protocol, service_name, traces_sampler, traces_sampler_arg;
  int metrics_port = -1;
  // grpc.health.v1 Check alone, plaintext, on this port too (0 = a free one), for probes that
  // cannot speak TLS; -1 = off.
  int health_port = -1;
};
absl::StatusOr<CommonOptions> ReadCommonOptions(const Options& options);

}  // namespace hap::svc
