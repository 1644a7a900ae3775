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
#include "tests/e2e/pipeline_fixture.h"

namespace hap::e2e {
namespace {

class KvBf16Test : public PipelineSuite {
 protected:
  static void SetUpTestSuite() {
    sdk::LocalPipelineOptions o;
    o.kv_dtype = "bf16";  // prefill and decode alike
    o.prefill_args = {"--metrics-port", "0"};
    StartPipeline("kv_bf16_tiny8", 1, o);
    client_ = Connect(sdk::Service::kPrefill).release();
    auto port = PrefillMetricsPort(pipeline_);
    ASSERT_TRUE(port.ok()) << port.status();
    metrics_port_ = *port;
  }
  static void TearDownTestSuite() {
    delete client_;
    PipelineSuite::TearDownTestSuite();
  }

  // The services' answer equals hapctl run --kv-dtype bf16's, and their cache is half the bytes
  // of hapctl run's F32 one.
  static void ExpectSameAsBf16Run(Ask ask) {
    ask.kv_dtype = "bf16";
    hap::v1::GenerateStats s;
    ExpectSameAsRun(*model_dir_, client_, ask, &s);
    ask.kv_dtype = "f32";
    std::string error;
    const nlohmann::json run_f32 = HapctlRun(*model_dir_, ask, &error);
    ASSERT_TRUE(error.empty()) << error;
    EXPECT_EQ(2 * s.kv_bytes(), run_f32["pruning"]["kv_bytes"].get<int64_t>());
    EXPECT_EQ(2 * s.kv_bytes_unpruned(), run_f32["pruning"]["kv_bytes_unpruned"].get<int64_t>());
  }

  static sdk::Client* client_;
  static int metrics_port_;
};
sdk::Client* KvBf16Test::client_ = nullptr;
int KvBf16Test::metrics_port_ = 0;

TEST_F(KvBf16Test, AnswersMatchHapctlRunWithBf16Kv) {
  for (const char* method : {"none", "hap", "fastv", "visionzip", "dart"}) {
    Ask ask = MethodAsk(method);
    ask.max_new_tokens = 16;
    ExpectSameAsBf16Run(ask);
  }
  ExpectSameAsBf16Run(SampledHapAsk());
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
