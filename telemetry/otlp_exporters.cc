#include "telemetry/otlp_exporters.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace hap::telemetry {

namespace collector = opentelemetry::proto::collector::trace::v1;

absl::StatusOr<std::pair<std::string, bool>> GrpcTarget(const std::string& endpoint) {
  absl::string_view e = endpoint;
  bool tls = false;
  if (absl::StartsWithIgnoreCase(e, "https://")) {
    tls = true;
    e.remove_prefix(8);
  } else if (absl::StartsWithIgnoreCase(e, "http://")) {
    e.remove_prefix(7);
  }
  while (!e.empty() && e.back() == '/') e.remove_suffix(1);
  if (e.empty() || e.find('/') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OTLP/gRPC endpoint '", endpoint, "' must be host:port (optionally with http(s)://)"));
  }
  return std::make_pair(std::string(e), tls);
}

absl::StatusOr<std::unique_ptr<OtlpGrpcExporter>> OtlpGrpcExporter::Create(
    const OtlpOptions& options) {
  absl::StatusOr<std::pair<std::string, bool>> target = GrpcTarget(options.endpoint);
  if (!target.ok()) return target.status();
  std::shared_ptr<grpc::ChannelCredentials> creds =
      target->second ? grpc::SslCredentials(grpc::SslCredentialsOptions())
                     : grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  // A collector that comes back is used again within a second or two.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  auto channel = grpc::CreateCustomChannel(target->first, creds, args);
  return std::unique_ptr<OtlpGrpcExporter>(
      new OtlpGrpcExporter(options, collector::TraceService::NewStub(channel)));
}

absl::Status OtlpGrpcExporter::Export(const SpanBatch& batch) {
  const collector::ExportTraceServiceRequest req = EncodeRequest(options_.resource, batch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options_.timeout);
  for (const auto& [k, v] : options_.headers) ctx.AddMetadata(absl::AsciiStrToLower(k), v);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return absl::CancelledError("exporter shut down");
    in_flight_ = &ctx;
  }
  collector::ExportTraceServiceResponse resp;
  const grpc::Status st = stub_->Export(&ctx, req, &resp);
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = nullptr;
  }
  if (!st.ok()) {
    return absl::UnavailableError(absl::StrCat("OTLP/gRPC export to ", options_.endpoint, ": ",
                                               st.error_message(), " (code ",
                                               static_cast<int>(st.error_code()), ")"));
  }
  if (resp.has_partial_success() && resp.partial_success().rejected_spans() > 0) {
    return absl::DataLossError(absl::StrCat("collector rejected ",
                                            resp.partial_success().rejected_spans(),
                                            " spans: ", resp.partial_success().error_message()));
  }
  return absl::OkStatus();
}

void OtlpGrpcExporter::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (in_flight_ != nullptr) in_flight_->TryCancel();
}

absl::StatusOr<std::unique_ptr<OtlpHttpExporter>> OtlpHttpExporter::Create(
    const OtlpOptions& options) {
  absl::StatusOr<HttpUrl> url = ParseHttpUrl(options.endpoint);
  if (!url.ok()) return url.status();
  return std::unique_ptr<OtlpHttpExporter>(new OtlpHttpExporter(options, *url));
}

absl::Status OtlpHttpExporter::Export(const SpanBatch& batch) {
  const std::string body = EncodeRequest(options_.resource, batch).SerializeAsString();
  absl::StatusOr<HttpResult> r = HttpPost(url_, "application/x-protobuf", body, options_.headers,
                                          options_.timeout, &cancelled_);
  if (!r.ok()) {
    return absl::UnavailableError(
        absl::StrCat("OTLP/HTTP export to ", options_.endpoint, ": ", r.status().message()));
  }
  if (r->status < 200 || r->status >= 300) {
    return absl::UnavailableError(
        absl::StrCat("OTLP/HTTP export to ", options_.endpoint, ": HTTP ", r->status));
  }
  collector::ExportTraceServiceResponse resp;
  if (!r->body.empty() && resp.ParseFromString(r->body) && resp.has_partial_success() &&
      resp.partial_success().rejected_spans() > 0) {
    return absl::DataLossError(
        absl::StrCat("collector rejected ", resp.partial_success().rejected_spans(), " spans"));
  }
  return absl::OkStatus();
}

}  // namespace hap::telemetry
