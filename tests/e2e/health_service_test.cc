// services/server/health_service: NOT_SERVING from the start until told otherwise, per-service
// answers, Watch streams every change, Shutdown ends the streams. An in-process server on port 0.
#include "services/server/health_service.h"

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "base/tsan.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace hap::svc {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(); }
  void TearDown() override { StopServer(); }

  // A fresh HealthService (NOT_SERVING) behind a fresh server on a free port.
  void StartServer() {
    health_ = std::make_unique<HealthService>(std::vector<std::string>{"hap.v1.Generation"});
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(health_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    stub_ = Health::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                                grpc::InsecureChannelCredentials()));
  }
  void StopServer() {
    health_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
    server_.reset();  // before the service it serves
  }

  grpc::Status Check(const std::string& service, HealthCheckResponse* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    HealthCheckRequest req;
    req.set_service(service);
    return stub_->Check(&ctx, req, out);
  }

  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Health::Stub> stub_;
  int port_ = 0;
};

TEST_F(HealthServiceTest, NotServingUntilToldThenPerService) {
  HealthCheckResponse r;
  ASSERT_TRUE(Check("", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(Check("hap.v1.Generation", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);

  health_->SetServing(true);
  ASSERT_TRUE(Check("", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  ASSERT_TRUE(Check("hap.v1.Generation", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  const grpc::Status unknown = Check("hap.v1.Nope", &r);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(unknown.error_message().find("hap.v1.Nope"), std::string::npos);

  health_->SetServing(false);  // draining
  ASSERT_TRUE(Check("", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, WatchStreamsEachChangeAndEndsAtShutdown) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  HealthCheckRequest req;
  auto reader = stub_->Watch(&ctx, req);
  HealthCheckResponse r;
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  health_->SetServing(true);
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  health_->SetServing(true);  // no change, no message
  health_->SetServing(false);
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);

  // A watch of an unknown service reports SERVICE_UNKNOWN instead of failing.
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  req.set_service("hap.v1.Nope");
  auto unknown = stub_->Watch(&ctx2, req);
  ASSERT_TRUE(unknown->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVICE_UNKNOWN);

  health_->Shutdown();
  EXPECT_FALSE(reader->Read(&r));
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_FALSE(unknown->Read(&r));
  EXPECT_TRUE(unknown->Finish().ok());
}

// Shutdown right after the client has read a message often lands while the server's write is
// still completing; the stream must still end (not hang until the deadline).
TEST_F(HealthServiceTest, ShutdownDuringAWriteStillEndsTheStream) {
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    if (round > 0) {
      StopServer();
      StartServer();
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    HealthCheckRequest req;
    auto reader = stub_->Watch(&ctx, req);
    HealthCheckResponse r;
    ASSERT_TRUE(reader->Read(&r));
    health_->SetServing(true);
    ASSERT_TRUE(reader->Read(&r));
    health_->Shutdown();
    EXPECT_FALSE(reader->Read(&r));
    const grpc::Status done = reader->Finish();
    ASSERT_TRUE(done.ok()) << done.error_code() << " " << done.error_message();
  }
}

TEST_F(HealthServiceTest, ClientCancelEndsItsWatch) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  HealthCheckRequest req;
  auto reader = stub_->Watch(ctx.get(), req);
  HealthCheckResponse r;
  ASSERT_TRUE(reader->Read(&r));
  ctx->TryCancel();
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server side is gone too: status changes still work and a new watch starts clean.
  health_->SetServing(true);
  HealthCheckResponse now;
  ASSERT_TRUE(Check("", &now).ok());
  EXPECT_EQ(now.status(), HealthCheckResponse::SERVING);
}

// A unary call to `method` with an empty message, whatever the method's kind: its status.
grpc::Status CallRaw(const std::shared_ptr<grpc::Channel>& channel, const std::string& method) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  // gRPC (uninstrumented) orders the start of the call before its callback; tell TSan.
  HappensBefore(&done);
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status st) {
                   HappensAfter(&done);
                   done.set_value(std::move(st));
                 });
  return done.get_future().get();
}

// The plaintext port for probes that cannot speak TLS (--health-port): Check, answered from the
// process's health service, and nothing else, not even the reflection gRPC adds to every server
// of a process that links it (as the services do).
TEST(HealthCheckServerTest, AnswersCheckAndNothingElse) {
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  const std::string reflection = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
  HealthService health({"hap.v1.Generation"});
  HealthCheckOnly only(&health);
  int port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartHealthCheckServer("127.0.0.1:0", &only, &port);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT(port, 0);
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto stub = Health::NewStub(channel);
  auto check = [&](const std::string& service, HealthCheckResponse* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    HealthCheckRequest req;
    req.set_service(service);
    return stub->Check(&ctx, req, out);
  };
  HealthCheckResponse r;
  ASSERT_TRUE(check("", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  health.SetServing(true);
  ASSERT_TRUE(check("", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  ASSERT_TRUE(check("hap.v1.Generation", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  EXPECT_EQ(check("hap.v1.Debug", &r).error_code(), grpc::StatusCode::NOT_FOUND);
  health.SetServing(false);  // draining
  ASSERT_TRUE(check("", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);

  // No Watch (no stream held open by an unauthenticated caller), no reflection, nothing else.
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto reader = stub->Watch(&ctx, HealthCheckRequest());
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
  for (const std::string& method : {reflection, std::string("/hap.v1.Debug/GetState"),
                                    std::string("/hap.v1.Generation/Generate")}) {
    EXPECT_EQ(CallRaw(channel, method).error_code(), grpc::StatusCode::UNIMPLEMENTED) << method;
  }
  // The check above means something: an ordinary server of this process serves reflection.
  {
    grpc::ServerBuilder builder;
    int plain_port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &plain_port);
    builder.RegisterService(&health);
    std::unique_ptr<grpc::Server> plain = builder.BuildAndStart();
    ASSERT_NE(plain, nullptr);
    auto plain_channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(plain_port),
                                             grpc::InsecureChannelCredentials());
    EXPECT_NE(CallRaw(plain_channel, reflection).error_code(), grpc::StatusCode::UNIMPLEMENTED);
    health.Shutdown();
    plain->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

}  // namespace
}  // namespace hap::svc
