// hap-decode serving a Qwen2.5-VL directory: a cache the engine prefilled in process (the image
// at its own resolution, pruned by HAP, kept tokens at their 3-D positions) travels to the decode
// service as the prefill service sends one (KvHeader with rope_delta, chunks, trailer), and the
// service answers with exactly the tokens the same decode loop gives in process.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hap/v1/decode.grpc.pb.h"
#include "runtime/model/pipeline.h"
#include "runtime/model/qwen_model.h"
#include "sdk/child_process.h"
#include "sdk/client.h"
#include "services/wire/kv_codec.h"
#include "services/wire/proto_convert.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

constexpr int kMaxNew = 12;

TEST(QwenDecodeTest, TheDecodeServiceContinuesAQwenCacheAsTheEngineDoes) {
  const std::string dir = MakeTinyQwenModel("qwen_decode_tiny", 5, 4);
  ASSERT_FALSE(dir.empty());
  auto model = QwenModel::Load(dir, ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  PruneRequest prune;
  prune.method = "hap";
  auto encoded = EncodeImage(**model, ReadBytes(TestImagePath()), prune);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  prune.retain = 0.5 * encoded->n_vis;
  SamplingParams greedy;
  Sampler sampler(greedy);
  auto prefill = RunPrefill(**model, "Describe the picture.", *encoded, prune, &sampler);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  ASSERT_FALSE(prefill->stats.stages.empty());
  ASSERT_LT(prefill->kv().rope_delta, 0);  // the image advanced the rotary position less
  // In process: the decode loop on a copy of the cache.
  KvCache copy = prefill->cache;
  StopCriteria stop;
  stop.max_new_tokens = kMaxNew;
  auto want = ContinueDecodeLoop(**model, &copy, prefill->first_token, sampler, stop, nullptr);
  ASSERT_TRUE(want.ok()) << want.status();

  // hap-decode on the same directory, sent the cache as hap-prefill sends it.
  auto child = sdk::ChildProcess::Spawn({std::string(HAP_BIN_DIR) + "/hap-decode", "--host",
                                         "127.0.0.1", "--port", "0", "--model", dir},
                                        "");
  ASSERT_TRUE(child.ok()) << child.status();
  auto line =
      (*child)->WaitForLine([](const std::string& l) { return sdk::ParseListeningPort(l) > 0; },
                            std::chrono::seconds(60));
  ASSERT_TRUE(line.ok()) << line.status();
  const std::string address = absl::StrCat("127.0.0.1:", sdk::ParseListeningPort(*line));
  // The port opens before the warm-up step: wait for SERVING, as a client would.
  ASSERT_TRUE(sdk::WaitUntilServing(address, std::chrono::seconds(60)).ok());
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = hap::v1::Decode::NewStub(channel);
  auto chunker = svc::KvChunker::Create(&prefill->kv(), 1 << 16);
  ASSERT_TRUE(chunker.ok()) << chunker.status();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub->Decode(&ctx);
  hap::v1::DecodeRequest out;
  hap::v1::KvHeader* h = out.mutable_header();
  chunker->FillHeader(h);
  EXPECT_EQ(h->rope_delta(), prefill->kv().rope_delta);
  h->set_request_id("qwen-decode-test");
  h->set_d_model((*model)->text_config().hidden_size);
  h->set_vocab_size((*model)->text_config().vocab_size);
  h->set_first_token(prefill->first_token);
  *h->mutable_sampling() = svc::SamplingToProto(greedy);
  h->set_samples_drawn(1);
  h->set_max_new_tokens(kMaxNew);
  ASSERT_TRUE(stream->Write(out));
  while (chunker->Next(out.mutable_chunk())) ASSERT_TRUE(stream->Write(out));
  chunker->FillTrailer(out.mutable_trailer());
  ASSERT_TRUE(stream->Write(out));
  stream->WritesDone();
  hap::v1::DecodeResponse in;
  std::vector<int32_t> got;
  bool done = false;
  while (stream->Read(&in)) {
    if (in.has_done()) {
      got.assign(in.done().token_ids().begin(), in.done().token_ids().end());
      done = true;
    }
  }
  const grpc::Status status = stream->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(done);
  EXPECT_EQ(got, want->tokens);
  EXPECT_GT(got.size(), 4u);  // an answer several steps long, not an early EOS
  EXPECT_EQ((*child)->Terminate(std::chrono::seconds(5)), 0);
}

}  // namespace
}  // namespace hap::e2e
