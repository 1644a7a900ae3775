// The three services as child processes on loopback (what `hapctl up` runs and what the
// end-to-end tests start): encoder and decode first on free ports, then prefill pointed at them;
// ready once all three report SERVING on the gRPC health service.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdk/child_process.h"

namespace hap::sdk {

enum class Service { kEncoder, kPrefill, kDecode };
const char* ServiceBinary(Service service);  // "hap-encoder", ...

struct LocalPipelineOptions {
  std::string bin_dir;    // holds the three binaries; empty = FindServiceBinDir()
  std::string model_dir;  // empty = the services' default model
  std::string host = "127.0.0.1";
  // Extra flags for each service (e.g. {"--method", "hap", "--retain", "64"} for prefill).
  std::vector<std::string> encoder_args, prefill_args, decode_args;
  // hap-decode processes; prefill gets all their addresses and spreads calls over them.
  int decode_replicas = 1;
  // More flags for single decode replicas, after decode_args: entry i goes to replica i (the
  // first is address(Service::kDecode)); replicas past the end get none.
  std::vector<std::vector<std::string>> decode_replica_args;
  // hap-encoder and hap-decode replicas this pipeline does not start (running elsewhere):
  // prefill is given their addresses after its own replicas' and spreads calls over all of them.
  std::vector<std::string> external_encoder_addresses, external_decode_addresses;
  // --pool-spin-us for every service: the three share this machine's cores, and a compute pool
  // that spins long takes them from the others (16 concurrent streams on 2 cores: 12 µs did
  // 10-20% better in aggregate than the services' 50 µs default).
  int pool_spin_us = 12;
  // --kv-dtype for hap-prefill and every hap-decode alike (what the prefill's cache holds and
  // sends, what decode's pool holds): "f32" or "bf16"; empty = the services' default (f32).
  std::string kv_dtype;
  // The front door's OpenAI-compatible HTTP API: -1 = off, 0 = a free port (openai_address()).
  int openai_port = -1;
  std::chrono::milliseconds start_timeout{120000};
  bool echo_output = true;  // the children's stdout lines, prefixed, on our stderr
};

// $HAP_BIN_DIR; else the directory of this executable, or its ../../bin (the build tree's
// tools/hapctl → bin), when the binaries are there; else the build tree this was compiled in.
std::string FindServiceBinDir();

class LocalPipeline {
 public:
  static absl::StatusOr<std::unique_ptr<LocalPipeline>> Start(const LocalPipelineOptions& options);
  ~LocalPipeline();  // Stop()

  // host:port of the front door (hap-prefill).
  std::string front_door() const { return address(Service::kPrefill); }
  // host:port of the OpenAI-compatible HTTP API; "" when options.openai_port is -1.
  std::string openai_address() const;
  std::string address(Service service) const;
  // Every hap-decode replica's host:port (the first is address(Service::kDecode)).
  std::vector<std::string> decode_addresses() const;
  ChildProcess* process(Service service) { return procs_[Index(service)].get(); }

  // SIGKILL, for fault tests.
  void Kill(Service service);
  // Starts the service again on the same port and waits until it is SERVING.
  absl::Status Restart(Service service);
  // SIGTERM to prefill, then encoder and decode; SIGKILL whatever is left after `grace`.
  // OK when every service exited with code 0.
  absl::Status Stop(std::chrono::milliseconds grace = std::chrono::seconds(15));

 private:
  LocalPipeline() = default;
  static int Index(Service s) { return static_cast<int>(s); }
  // `replica`: which hap-decode (0 = the first); ignored for the others.
  std::vector<std::string> Argv(Service service, int port, int replica = 0) const;
  absl::Status Launch(Service service, int port);
  // Starts one child and returns it with the port it listens on.
  absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(Service service, int port, int* bound,
                                                      int replica = 0);
  absl::Status WaitServing(Service service);
  absl::Status WaitServingAt(ChildProcess* child, const char* name, const std::string& address);

  LocalPipelineOptions options_;
  std::unique_ptr<ChildProcess> procs_[3];
  int ports_[3] = {0, 0, 0};
  int openai_port_ = 0;  // the HTTP port hap-prefill bound (kept across a restart)
  // Decode replicas beyond the first.
  std::vector<std::unique_ptr<ChildProcess>> extra_decodes_;
  std::vector<int> extra_decode_ports_;
};

}  // namespace hap::sdk
