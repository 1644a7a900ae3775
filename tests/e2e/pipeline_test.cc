// The three service binaries on loopback against `hapctl run` in process: token-for-token
// parity for every pruning method (and a sampled run), KV bytes as planned, client cancel
// freeing everything, bad requests and malformed KV transfers rejected, 16 concurrent streams.
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "hap/v1/decode.grpc.pb.h"
#include "runtime/io/config.h"
#include "runtime/prune/planner.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "services/wire/kv_codec.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

using std::chrono::milliseconds;

class PipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(MakeTinyModel("pipeline_tiny8", 1));
    ASSERT_FALSE(model_dir_->empty()) << "hapctl make-tiny failed";
    image_ = new std::string(ReadBytes(TestImagePath()));
    sdk::LocalPipelineOptions o;
    o.model_dir = *model_dir_;
    o.bin_dir = HAP_BIN_DIR;
    o.echo_output = false;
    const std::vector<std::string> limits = {"--max-concurrent", "4", "--queue-length", "32"};
    o.encoder_args = o.decode_args = limits;
    o.prefill_args = limits;
    o.prefill_args.insert(o.prefill_args.end(),
                          {"--max-prompt-tokens", "64", "--max-image-bytes", "200000"});
    auto p = sdk::LocalPipeline::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    pipeline_ = p->release();
    auto c = sdk::Client::Connect(pipeline_->front_door());
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = c->release();
    auto d = sdk::Client::Connect(pipeline_->address(sdk::Service::kDecode));
    ASSERT_TRUE(d.ok()) << d.status();
    decode_client_ = d->release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete decode_client_;
    if (pipeline_ != nullptr) {
      EXPECT_TRUE(pipeline_->Stop().ok()) << "a service did not exit cleanly";
    }
    delete pipeline_;
    delete model_dir_;
    delete image_;
  }

  // Nothing in flight and no KV cache held on prefill and decode (within `timeout`).
  static std::optional<double> AllIdle(milliseconds timeout) {
    return WaitUntil(
        [] {
          for (sdk::Client* c : {client_, decode_client_}) {
            auto s = c->GetState();
            // The decode pool's blocks count too: a cancelled sequence must give them back.
            if (!s.ok() || s->in_flight_requests() != 0 || s->kv_caches_held() != 0 ||
                s->kv_bytes_held() != 0 || s->kv_pool_blocks_in_use() != 0) {
              return false;
            }
          }
          return true;
        },
        timeout);
  }

  static void ExpectSameAsRun(const Ask& ask) { e2e::ExpectSameAsRun(*model_dir_, client_, ask); }

  static std::string* model_dir_;
  static std::string* image_;
  static sdk::LocalPipeline* pipeline_;
  static sdk::Client* client_;
  static sdk::Client* decode_client_;
};
std::string* PipelineTest::model_dir_ = nullptr;
std::string* PipelineTest::image_ = nullptr;
sdk::LocalPipeline* PipelineTest::pipeline_ = nullptr;
sdk::Client* PipelineTest::client_ = nullptr;
sdk::Client* PipelineTest::decode_client_ = nullptr;

TEST_F(PipelineTest, EveryMethodMatchesHapctlRun) {
  for (const char* method :
       {"none", "hap", "uniform", "fastv", "pdrop", "sparsevlm", "visionzip", "random", "divprune",
        "cdpruner-llm", "hap-flat", "uniform-flat", "dart"}) {
    ExpectSameAsRun(MethodAsk(method));
  }
}

TEST_F(PipelineTest, SampledRunMatchesHapctlRun) { ExpectSameAsRun(SampledHapAsk()); }

TEST_F(PipelineTest, StopStringMatchesHapctlRun) {
  Ask ask;
  ask.method = "hap";
  ask.retain = "8";
  ask.max_new_tokens = 24;
  std::string error;
  const std::string text = HapctlRun(*model_dir_, ask, &error)["text"].get<std::string>();
  ASSERT_TRUE(error.empty()) << error;
  // One whole UTF-8 character from the second half of the answer ends it early.
  size_t at = text.size() / 2;
  while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  size_t end = at + 1;
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
  ASSERT_LT(at, text.size());
  ask.stop = text.substr(at, end - at);
  ExpectSameAsRun(ask);
  auto got = client_->Generate(ToRequest(ask, *image_));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->stats.finish_reason(), hap::v1::FINISH_REASON_STOP);
  EXPECT_EQ(got->text.find(ask.stop), std::string::npos);
}

TEST_F(PipelineTest, KvBytesReceivedByDecodeAreThePlannedCompactedCache) {
  Ask ask;
  ask.method = "hap";
  ask.retain = "6";
  auto got = client_->Generate(ToRequest(ask, *image_));
  ASSERT_TRUE(got.ok()) << got.status();
  const hap::v1::GenerateStats& s = got->stats;
  EXPECT_EQ(s.kv_bytes_received(), s.kv_bytes());
  EXPECT_LT(s.kv_bytes(), s.kv_bytes_unpruned());
  // The ratio is the plan's: Σ_l (text + N_v(l)) / (L · (text + V)).
  auto cfg = LoadLlavaConfig(*model_dir_);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ModelDims dims;
  dims.n_layers = cfg->text.num_hidden_layers;
  dims.d_model = cfg->text.hidden_size;
  dims.d_ffn = cfg->text.intermediate_size;
  dims.n_heads = cfg->text.num_attention_heads;
  dims.n_kv_heads = cfg->text.num_key_value_heads;
  dims.head_dim = cfg->text.head_dim;
  dims.n_visual_tokens = cfg->num_visual_tokens();
  auto plan = MakePlan(dims, Budget::Retain(6), s.text_tokens());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GT(plan->M, 1);
  EXPECT_EQ(Ids(s.layer_visual_tokens()), plan->layer_visual_tokens);
  EXPECT_NEAR(static_cast<double>(s.kv_bytes()) / s.kv_bytes_unpruned(), plan->kv_cache_fraction,
              1e-12);
  const int64_t row_bytes = int64_t{2} * sizeof(float) * dims.n_kv_heads * dims.head_dim;
  int64_t rows = 0;
  for (int v : plan->layer_visual_tokens) rows += s.text_tokens() + v;
  EXPECT_EQ(s.kv_bytes_received(), rows * row_bytes);
  EXPECT_GE(s.kv_chunks(), dims.n_layers);
}

TEST_F(PipelineTest, ClientCancelStopsDecodeAndFreesEveryCache) {
  // A request that, unstopped, runs for hundreds of tokens.
  const std::optional<Ask> ask = FindLongAsk(*model_dir_, 200);
  ASSERT_TRUE(ask.has_value()) << "no long-running request found on this checkpoint";
  auto request = ToRequest(*ask, *image_);

  sdk::StreamOptions stream;
  int deltas = 0;
  stream.on_delta = [&](const hap::v1::TextDelta&) { return ++deltas < 3; };
  auto got = client_->Generate(request, stream);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled) << got.status();
  EXPECT_EQ(deltas, 3);
  const std::optional<double> ms = AllIdle(milliseconds(1000));
  ASSERT_TRUE(ms.has_value()) << "prefill or decode still holds a request or a KV cache 1 s after "
                                 "the client cancelled";
  std::printf("[ cancel ] prefill and decode idle with no KV cache %.0f ms after the cancel\n",
              *ms);
}

TEST_F(PipelineTest, DeadlineExceededEndsTheRequestEverywhere) {
  const std::optional<Ask> ask = FindLongAsk(*model_dir_, 200);
  ASSERT_TRUE(ask.has_value());
  sdk::StreamOptions stream;
  stream.timeout = milliseconds(40);  // less than 200 tokens take on any machine
  auto got = client_->Generate(ToRequest(*ask, *image_), stream);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_TRUE(AllIdle(milliseconds(1000)).has_value());
}

struct BadCase {
  const char* name;
  std::function<void(hap::v1::GenerateRequest*)> mutate;
  absl::StatusCode code;
  const char* message;  // a substring of the error
};

TEST_F(PipelineTest, BadRequestsGetClearErrorsAndTheServiceKeepsServing) {
  const std::string long_prompt = [] {
    std::string p;
    for (int i = 0; i < 200; ++i) p += "colour shape size ";
    return p;
  }();
  const std::vector<BadCase> cases = {
      {"no image", [](auto* r) { r->clear_image(); }, absl::StatusCode::kInvalidArgument,
       "image is required"},
      {"corrupt image", [](auto* r) { r->set_image(r->image().substr(0, 200)); },
       absl::StatusCode::kInvalidArgument, "JPEG"},
      {"not an image", [](auto* r) { r->set_image("GIF89a not really an image at all"); },
       absl::StatusCode::kInvalidArgument, "encoder"},
      {"empty prompt", [](auto* r) { r->clear_prompt(); }, absl::StatusCode::kInvalidArgument,
       "prompt is empty"},
      {"prompt too long", [&](auto* r) { r->set_prompt(long_prompt); },
       absl::StatusCode::kInvalidArgument, "context is 64"},
      {"unknown method", [](auto* r) { r->mutable_pruning()->set_method("magic"); },
       absl::StatusCode::kInvalidArgument, "unknown pruning method 'magic'"},
      {"budget below the reachable minimum",
       [](auto* r) {
         r->mutable_pruning()->set_method("hap");
         r->mutable_pruning()->set_retain("1");
       },
       absl::StatusCode::kInvalidArgument, "minimum"},
      {"budget not a number",
       [](auto* r) {
         r->mutable_pruning()->set_method("hap");
         r->mutable_pruning()->set_retain("lots");
       },
       absl::StatusCode::kInvalidArgument, "retain 'lots'"},
      {"negative flops",
       [](auto* r) {
         r->mutable_pruning()->set_method("fastv");
         r->mutable_pruning()->set_flops(-0.5);
       },
       absl::StatusCode::kInvalidArgument, "flops"},
      {"oversized image", [](auto* r) { r->set_image(std::string(300000, 'x')); },
       absl::StatusCode::kResourceExhausted, "limit is 200000"},
      {"top_p out of range", [](auto* r) { r->mutable_sampling()->set_top_p(1.5f); },
       absl::StatusCode::kInvalidArgument, "top_p"},
      {"max_new_tokens negative", [](auto* r) { r->set_max_new_tokens(-4); },
       absl::StatusCode::kInvalidArgument, "max_new_tokens"},
      // Fails proto3 parsing on the server; gRPC answers before the service sees the call
      // (documented in generate.proto). The point here: the server keeps serving.
      {"prompt not UTF-8", [](auto* r) { r->set_prompt("what colour is the \xff\xfe circle?"); },
       absl::StatusCode::kUnimplemented, ""},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    hap::v1::GenerateRequest req = ToRequest(Ask(), *image_);
    c.mutate(&req);
    auto got = client_->Generate(req);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), c.code) << got.status();
    EXPECT_NE(got.status().message().find(c.message), std::string::npos) << got.status();
  }
  auto serving = client_->IsServing();
  ASSERT_TRUE(serving.ok() && *serving);
  auto ok = client_->Generate(ToRequest(Ask(), *image_));
  EXPECT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(AllIdle(milliseconds(1000)).has_value());
}

// A small valid cache for the decode model, sent by hand.
struct RawKv {
  hap::v1::DecodeRequest header;
  std::vector<hap::v1::DecodeRequest> chunks;
  hap::v1::DecodeRequest trailer;
};

RawKv MakeRawKv(const LlavaConfig& cfg, int rows) {
  KvCache cache;
  cache.kv_dim = cfg.text.num_key_value_heads * cfg.text.head_dim;
  cache.next_position = rows + 3;
  for (int l = 0; l < cfg.text.num_hidden_layers; ++l) {
    LayerKv& layer = cache.layers.emplace_back();
    for (int r = 0; r < rows; ++r) {
      layer.positions.push_back(r + (r > 1 ? 3 : 0));  // a gap, as pruning leaves
      for (int i = 0; i < cache.kv_dim; ++i) {
        layer.k.push_back(0.01f * ((l * 7 + r * 3 + i) % 17));
        layer.v.push_back(-0.02f * ((l + r * 5 + i) % 13));
      }
    }
  }
  auto chunker = svc::KvChunker::Create(&cache, 4 << 20);
  RawKv kv;
  hap::v1::KvHeader* h = kv.header.mutable_header();
  chunker->FillHeader(h);
  h->set_request_id("raw");
  h->set_d_model(cfg.text.hidden_size);
  h->set_vocab_size(cfg.text.vocab_size);
  h->set_first_token(5);
  h->set_samples_drawn(1);
  h->set_max_new_tokens(3);
  hap::v1::DecodeRequest c;
  while (chunker->Next(c.mutable_chunk())) kv.chunks.push_back(c);
  chunker->FillTrailer(kv.trailer.mutable_trailer());
  return kv;
}

// Sends `messages` on one Decode call and returns its status.
grpc::Status SendRaw(hap::v1::Decode::Stub* stub,
                     const std::vector<hap::v1::DecodeRequest>& messages) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub->Decode(&ctx);
  for (const auto& m : messages) {
    if (!stream->Write(m)) break;
  }
  stream->WritesDone();
  hap::v1::DecodeResponse resp;
  while (stream->Read(&resp)) {
  }
  return stream->Finish();
}

TEST_F(PipelineTest, MalformedKvTransfersGetInvalidArgument) {
  auto cfg = LoadLlavaConfig(*model_dir_);
  ASSERT_TRUE(cfg.ok());
  auto stub = hap::v1::Decode::NewStub(decode_client_->channel());
  const RawKv kv = MakeRawKv(*cfg, 5);
  auto stream_of = [&](const hap::v1::DecodeRequest& header,
                       const std::vector<hap::v1::DecodeRequest>& chunks,
                       std::optional<hap::v1::DecodeRequest> trailer) {
    std::vector<hap::v1::DecodeRequest> all = {header};
    all.insert(all.end(), chunks.begin(), chunks.end());
    if (trailer) all.push_back(*trailer);
    return all;
  };
  // The well-formed transfer decodes.
  ASSERT_TRUE(SendRaw(stub.get(), stream_of(kv.header, kv.chunks, kv.trailer)).ok());

  struct Case {
    const char* name;
    std::vector<hap::v1::DecodeRequest> messages;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back(
      {"chunk before header", {kv.chunks[0], kv.header}, "first message must be a KvHeader"});
  {
    auto h = kv.header;
    h.mutable_header()->set_n_layers(3);
    cases.push_back({"wrong n_layers", stream_of(h, kv.chunks, kv.trailer), "n_layers is 3"});
  }
  {
    auto h = kv.header;
    h.mutable_header()->set_dtype(hap::v1::DTYPE_BF16);
    cases.push_back({"unsupported dtype", stream_of(h, kv.chunks, kv.trailer), "DTYPE_BF16"});
  }
  {
    auto chunks = kv.chunks;
    std::swap(chunks[0], chunks[1]);
    cases.push_back({"out of order", stream_of(kv.header, chunks, kv.trailer), "out of order"});
  }
  {
    auto chunks = kv.chunks;
    std::string k = chunks[2].chunk().k();
    k[7] ^= 0x40;
    chunks[2].mutable_chunk()->set_k(k);
    cases.push_back({"corrupted payload", stream_of(kv.header, chunks, kv.trailer), "checksum"});
  }
  {
    auto chunks = kv.chunks;
    chunks[0].mutable_chunk()->set_layer(99);
    cases.push_back(
        {"layer out of range", stream_of(kv.header, chunks, kv.trailer), "outside [0, 8)"});
  }
  {
    auto chunks = kv.chunks;
    chunks[1].mutable_chunk()->mutable_v()->resize(12);
    cases.push_back({"short payload", stream_of(kv.header, chunks, kv.trailer), "bytes"});
  }
  {
    auto chunks = kv.chunks;
    chunks[0].mutable_chunk()->set_dtype(hap::v1::DTYPE_F16);
    cases.push_back({"chunk dtype", stream_of(kv.header, chunks, kv.trailer), "differs"});
  }
  {
    auto chunks = kv.chunks;
    chunks.erase(chunks.begin() + 3);
    for (size_t i = 3; i < chunks.size(); ++i) chunks[i].mutable_chunk()->set_chunk_index(i);
    cases.push_back({"layer skipped", stream_of(kv.header, chunks, kv.trailer), "incomplete"});
  }
  {
    auto chunks = kv.chunks;
    chunks[4].mutable_chunk()->set_positions(0, 100);
    cases.push_back(
        {"position past next_position", stream_of(kv.header, chunks, kv.trailer), "position"});
  }
  cases.push_back(
      {"no trailer", stream_of(kv.header, kv.chunks, std::nullopt), "before the trailer"});
  {
    auto t = kv.trailer;
    t.mutable_trailer()->set_kv_bytes(t.trailer().kv_bytes() + 4);
    cases.push_back({"trailer totals", stream_of(kv.header, kv.chunks, t), "trailer totals"});
  }
  {
    auto h = kv.header;
    h.mutable_header()->set_first_token(1 << 20);
    cases.push_back(
        {"first token outside vocab", stream_of(h, kv.chunks, kv.trailer), "first_token"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const grpc::Status st = SendRaw(stub.get(), c.messages);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find(c.message), std::string::npos) << st.error_message();
  }
  auto serving = decode_client_->IsServing();
  ASSERT_TRUE(serving.ok() && *serving);
  EXPECT_TRUE(AllIdle(milliseconds(1000)).has_value()) << "a rejected transfer left a KV cache";
  auto ok = client_->Generate(ToRequest(Ask(), *image_));
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST_F(PipelineTest, SixteenConcurrentStreamsEqualSequentialRuns) {
  const char* methods[] = {"none",      "hap",          "fastv",   "pdrop",    "sparsevlm",
                           "visionzip", "random",       "uniform", "divprune", "cdpruner-llm",
                           "hap-flat",  "uniform-flat", "dart"};
  std::vector<hap::v1::GenerateRequest> requests;
  for (int i = 0; i < 16; ++i) {
    Ask ask;
    ask.method = methods[i % 13];
    ask.retain = ask.method == "none" ? "" : (i < 8 ? "8" : "50%");
    ask.temperature = i % 3 == 0 ? 0.f : 0.9f;
    ask.seed = 100 + i;
    ask.max_new_tokens = 10;
    ask.prompt = i % 2 ? "What is in the picture?" : "How many objects are there?";
    requests.push_back(ToRequest(ask, *image_));
  }
  std::vector<std::vector<int32_t>> sequential;
  for (const auto& r : requests) {
    auto got = client_->Generate(r);
    ASSERT_TRUE(got.ok()) << got.status();
    sequential.push_back(Ids(got->stats.token_ids()));
  }
  std::vector<absl::StatusOr<sdk::GenerateResult>> concurrent(16, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] { concurrent[i] = client_->Generate(requests[i]); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    ASSERT_TRUE(concurrent[i].ok()) << concurrent[i].status();
    EXPECT_EQ(Ids(concurrent[i]->stats.token_ids()), sequential[i]);
    EXPECT_EQ(concurrent[i]->streamed_token_ids.size() +
                  (concurrent[i]->stats.finish_reason() == hap::v1::FINISH_REASON_EOS ? 1 : 0),
              sequential[i].size());
  }
  EXPECT_TRUE(AllIdle(milliseconds(1000)).has_value());
}

// Server reflection answers list_services (a raw call: the reflection protos' C++ code lives
// inside libgrpc++_reflection and has no installed header).
TEST_F(PipelineTest, ReflectionListsTheServices) {
  grpc::GenericStub stub(client_->channel());
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok = false;
  auto step = [&](intptr_t id) {
    return cq.Next(&tag, &ok) && tag == reinterpret_cast<void*>(id) && ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(step(1));
  // ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
  grpc::Slice request(std::string("\x3a\x00", 2));
  grpc::ByteBuffer out(&request, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  ASSERT_TRUE(step(2));
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(3));
  ASSERT_TRUE(step(3));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(in.Dump(&slices).ok());
  std::string response;
  for (const grpc::Slice& sl : slices) {
    response.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  for (const char* service : {"hap.v1.Generation", "hap.v1.Debug", "grpc.health.v1.Health"}) {
    EXPECT_NE(response.find(service), std::string::npos) << service;
  }
  call->WritesDone(reinterpret_cast<void*>(4));
  ASSERT_TRUE(step(4));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  ASSERT_TRUE(step(5));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

}  // namespace
}  // namespace hap::e2e
