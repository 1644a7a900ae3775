// The KV cache in BF16 end to end: hap-prefill --kv-dtype bf16 sends DTYPE_BF16 rows to
// hap-decode --kv-dtype bf16, half the bytes of the F32 transfer, and every answer equals
// `hapctl run --kv-dtype bf16` token for token.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/io/config.h"
#include "sdk/client.h"
#include "sdk/local_pipeline.h"
#include "tests/e2e/e2e_util.h"

namespace hap::e2e {
namespace {

class KvBf16Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(MakeTinyModel("kv_bf16_tiny8", 1));
    ASSERT_FALSE(model_dir_->empty()) << "hapctl make-tiny failed";
    image_ = new std::string(ReadBytes(TestImagePath()));
    sdk::LocalPipelineOptions o;
    o.model_dir = *model_dir_;
    o.bin_dir = HAP_BIN_DIR;
    o.echo_output = false;
    o.kv_dtype = "bf16";  // prefill and decode alike
    o.prefill_args = {"--metrics-port", "0"};
    auto p = sdk::LocalPipeline::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    pipeline_ = p->release();
    auto c = sdk::Client::Connect(pipeline_->front_door());
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = c->release();
    auto port = PrefillMetricsPort(pipeline_);
    ASSERT_TRUE(port.ok()) << port.status();
    metrics_port_ = *port;
  }
  static void TearDownTestSuite() {
    delete client_;
    if (pipeline_ != nullptr) {
      EXPECT_TRUE(pipeline_->Stop().ok()) << "a service did not exit cleanly";
    }
    delete pipeline_;
    delete model_dir_;
    delete image_;
  }

  // The services' answer next to hapctl run --kv-dtype bf16 (and its F32 cache's size).
  static void ExpectSameAsBf16Run(Ask ask) {
    SCOPED_TRACE(absl::StrCat("method ", ask.method, " temperature ", ask.temperature));
    ask.kv_dtype = "bf16";
    std::string error;
    const nlohmann::json run = HapctlRun(*model_dir_, ask, &error);
    ASSERT_TRUE(error.empty()) << error;
    ask.kv_dtype = "f32";
    const nlohmann::json run_f32 = HapctlRun(*model_dir_, ask, &error);
    ASSERT_TRUE(error.empty()) << error;
    auto got = client_->Generate(ToRequest(ask, *image_));
    ASSERT_TRUE(got.ok()) << got.status();
    const hap::v1::GenerateStats& s = got->stats;
    EXPECT_EQ(Ids(s.token_ids()), run["token_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(got->text, run["text"].get<std::string>());
    const nlohmann::json& pr = run["pruning"];
    EXPECT_EQ(Ids(s.layer_visual_tokens()), pr["layer_visual_tokens"].get<std::vector<int32_t>>());
    // The cache as held and as sent: BF16, half the F32 cache's bytes, all of it received.
    EXPECT_EQ(s.kv_bytes(), pr["kv_bytes"].get<int64_t>());
    EXPECT_EQ(2 * s.kv_bytes(), run_f32["pruning"]["kv_bytes"].get<int64_t>());
    EXPECT_EQ(2 * s.kv_bytes_unpruned(), run_f32["pruning"]["kv_bytes_unpruned"].get<int64_t>());
    EXPECT_EQ(s.kv_bytes_received(), s.kv_bytes());
  }

  static std::string* model_dir_;
  static std::string* image_;
  static sdk::LocalPipeline* pipeline_;
  static sdk::Client* client_;
  static int metrics_port_;
};
std::string* KvBf16Test::model_dir_ = nullptr;
std::string* KvBf16Test::image_ = nullptr;
sdk::LocalPipeline* KvBf16Test::pipeline_ = nullptr;
sdk::Client* KvBf16Test::client_ = nullptr;
int KvBf16Test::metrics_port_ = 0;

TEST_F(KvBf16Test, AnswersMatchHapctlRunWithBf16Kv) {
  for (const char* method : {"none", "hap", "fastv", "visionzip", "dart"}) {
    Ask ask;
    ask.method = method;
    if (ask.method != "none") ask.retain = std::string("8");
    ask.seed = 3;
    ask.max_new_tokens = 16;
    ExpectSameAsBf16Run(ask);
  }
  Ask sampled;
  sampled.method = "hap";
  sampled.retain = "50%";
  sampled.temperature = 0.8f;
  sampled.top_p = 0.9f;
  sampled.top_k = 40;
  sampled.seed = 7;
  sampled.max_new_tokens = 24;
  ExpectSameAsBf16Run(sampled);
}

// Exactly 2 bytes per K and V value cross the wire, the front door's transfer counter says so,
// and decode's pool blocks are BF16.
TEST_F(KvBf16Test, TransferCarriesTwoBytesPerValue) {
  Ask ask;
  ask.method = "hap";
  ask.retain = "6";
  const double before = ScrapeMetric(metrics_port_, "hap_kv_transfer_bytes_total", 0);
  ASSERT_GE(before, 0);
  auto got = client_->Generate(ToRequest(ask, *image_));
  ASSERT_TRUE(got.ok()) << got.status();
  const hap::v1::GenerateStats& s = got->stats;
  auto cfg = LoadLlavaConfig(*model_dir_);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const int64_t kv_dim = cfg->text.num_key_value_heads * cfg->text.head_dim;
  int64_t rows = 0;
  for (int v : s.layer_visual_tokens()) rows += s.text_tokens() + v;
  EXPECT_EQ(s.kv_bytes_received(), rows * 2 * kv_dim * 2);
  EXPECT_EQ(s.kv_bytes(), s.kv_bytes_received());
  // The counter moves once the decode acknowledged the cache (before the answer ends).
  EXPECT_EQ(ScrapeMetric(metrics_port_, "hap_kv_transfer_bytes_total", 0) - before,
            static_cast<double>(s.kv_bytes_received()));
  auto decode = sdk::Client::Connect(pipeline_->address(sdk::Service::kDecode));
  ASSERT_TRUE(decode.ok()) << decode.status();
  auto state = (*decode)->GetState();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->kv_pool_block_bytes(), 16 * 2 * kv_dim * 2);  // 16 rows of K and V, BF16
  EXPECT_TRUE(Idle(client_));
}

}  // namespace
}  // namespace hap::e2e
