// Channel credentials from PEM files, shared by the client SDK and the services' own calls to
// their peers (prefill -> encoder, prefill -> decode).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"

namespace hap::rpc {

struct TlsOptions {
  bool enabled = false;          // false = plaintext (loopback, inside a cluster mesh)
  std::string root_certs_file;   // PEM roots; empty = the system's
  std::string client_cert_file;  // PEM; with client_key_file for mutual TLS
  std::string client_key_file;
  std::string server_name_override;  // expected server name when it differs from the address
};

// Insecure credentials when !tls.enabled; NotFound naming the file when a PEM cannot be read;
// InvalidArgument for a certificate without its key (or the reverse).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(const TlsOptions& tls);

}  // namespace hap::rpc
