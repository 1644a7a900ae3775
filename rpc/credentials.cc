#include "rpc/credentials.h"

#include "absl/strings/str_cat.h"
#include "base/file_util.h"

namespace hap::rpc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  absl::StatusOr<std::string> pem = ReadFileToString(path);
  if (!pem.ok()) {
    return absl::Status(pem.status().code(),
                        absl::StrCat("cannot read ", what, ": ", pem.status().message()));
  }
  return pem;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(const TlsOptions& tls) {
  if (!tls.enabled) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!tls.root_certs_file.empty()) {
    auto roots = ReadPem(tls.root_certs_file, "root certificates");
    if (!roots.ok()) return roots.status();
    ssl.pem_root_certs = *roots;
  }
  if (tls.client_cert_file.empty() != tls.client_key_file.empty()) {
    return absl::InvalidArgumentError("mutual TLS needs both a client certificate and its key");
  }
  if (!tls.client_cert_file.empty()) {
    auto cert = ReadPem(tls.client_cert_file, "client certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(tls.client_key_file, "client key");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace hap::rpc
