// Prefill in slices, as the front door runs it (services/prefill/generate_reactor.cc): each
// prefill holds a ComputeGate turn, the decoder reports each layer's rows through the turn hook,
// and a TurnBudget hands the turn to the prefills waiting behind it. A short prompt that arrives
// during a long prefill finishes first, both results equal their runs alone bit for bit, and the
// rows reported are the rows each layer processed.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/compute_gate.h"
#include "gtest/gtest.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/cancellation.h"
#include "runtime/model/pipeline.h"
#include "runtime/tiny/tiny_model.h"
#include "tests/common/tiny_checkpoint.h"

namespace hap {
namespace {

constexpr int kLayers = 8;

class PrefillSlicesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/e2e/slices_tiny";
    auto model = testing_support::WriteAndLoadTiny(testing_support::TinyOptions(0, kLayers), dir);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
    auto png = testing_support::SyntheticPng(40, 40, [](size_t i) { return i * 7; });
    ASSERT_TRUE(png.ok());
    png_ = new std::string(std::move(*png));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete png_;
  }

  // One request: its prompt and pruning, what it produced, and the rows its layers reported.
  struct Job {
    std::string prompt;
    PruneRequest prune;
    absl::StatusOr<PrefillResult> result = absl::UnknownError("not run");
    std::vector<int64_t> rows;
  };

  static Job MakeJob(std::string prompt, const std::string& method, std::optional<double> retain) {
    Job j;
    j.prompt = std::move(prompt);
    j.prune.method = method;
    j.prune.retain = retain;
    return j;
  }

  static absl::StatusOr<PrefillResult> RunAlone(const Job& job) {
    auto encoded = EncodeImage(*model_, *png_, job.prune);
    if (!encoded.ok()) return encoded.status();
    Sampler sampler{SamplingParams()};
    return RunPrefill(*model_, job.prompt, *encoded, job.prune, &sampler);
  }

  // Greedy decode of `steps` tokens from a prefill's cache: every logit of every step.
  static std::vector<std::vector<float>> Continue(PrefillResult& r, int steps) {
    std::vector<std::vector<float>> out;
    int32_t token = r.first_token;
    for (int i = 0; i < steps; ++i) {
      auto logits = model_->DecodeStep(token, &r.cache);
      EXPECT_TRUE(logits.ok()) << logits.status();
      if (!logits.ok()) break;
      out.push_back(*logits);
      token =
          static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    }
    return out;
  }

  static LlavaModel* model_;
  static std::string* png_;
};

LlavaModel* PrefillSlicesTest::model_ = nullptr;
std::string* PrefillSlicesTest::png_ = nullptr;

TEST_F(PrefillSlicesTest, AShortPromptOvertakesALongOneAndBothEqualTheirSoloRuns) {
  Job long_job = MakeJob(
      "Describe every object in this picture in detail, with its colour, its size, where it is "
      "and what it is next to, then say what the whole scene is.",
      "none", std::nullopt);
  Job short_job = MakeJob("What is it?", "hap", 4.0);
  auto long_alone = RunAlone(long_job);
  auto short_alone = RunAlone(short_job);
  ASSERT_TRUE(long_alone.ok()) << long_alone.status();
  ASSERT_TRUE(short_alone.ok()) << short_alone.status();
  const int64_t long_rows = long_alone->trace.tokens_per_layer[0];
  ASSERT_GT(long_rows, 2 * short_alone->trace.tokens_per_layer[0]);

  // A slice of 2 long layers: chunk tokens · layers = 2 · long_rows.
  const int64_t budget = 2 * long_rows;
  ComputeGate gate;
  std::atomic<bool> long_at_layer_4{false};
  std::mutex mu;
  std::vector<std::string> order;  // "L4": the long prefill about to run its layer 4
  auto run = [&](Job* job, const char* name, bool wait_for_other_at_layer_4) {
    auto encoded = EncodeImage(*model_, *png_, job->prune);
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    ComputeGate::Hold hold = gate.Enter();
    TurnBudget turns(&hold, budget);
    ScopedTurnHook hook([&](int64_t rows) {
      if (wait_for_other_at_layer_4 && job->rows.size() == 4) {
        // The short request is started now, during the long prefill, and queues at the gate.
        long_at_layer_4 = true;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (gate.waiting_turns() == 0 && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::yield();
        }
        EXPECT_EQ(gate.waiting_turns(), 1) << "the short request never queued";
      }
      turns.Spend(rows);  // may hand the turn on first
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(absl::StrCat(name, job->rows.size()));
      }
      job->rows.push_back(rows);
    });
    Sampler sampler{SamplingParams()};
    job->result = RunPrefill(*model_, job->prompt, *encoded, job->prune, &sampler);
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(absl::StrCat(name, " done"));
  };
  std::thread long_thread(run, &long_job, "L", true);
  // The short request starts once the long one is about to run its layer 4 (not earlier: a
  // waiter present when the long one ends its first slice would be let in there).
  while (!long_at_layer_4) std::this_thread::yield();
  std::thread short_thread(run, &short_job, "S", false);
  long_thread.join();
  short_thread.join();
  ASSERT_TRUE(long_job.result.ok()) << long_job.result.status();
  ASSERT_TRUE(short_job.result.ok()) << short_job.result.status();

  // The turn hook saw each layer's rows before it ran.
  EXPECT_EQ(long_job.rows.size(), static_cast<size_t>(kLayers));
  for (int l = 0; l < kLayers; ++l) {
    EXPECT_EQ(long_job.rows[l], long_job.result->trace.tokens_per_layer[l]) << "layer " << l;
    EXPECT_EQ(short_job.rows[l], short_job.result->trace.tokens_per_layer[l]) << "layer " << l;
  }
  // The long prefill ran layers 0-1 as one slice and 2-3 as the next (nobody waited when it
  // ended the first); the short one arrived before layer 4 and took the turn there. Its whole
  // prefill fits in one slice, so it ran to its end before the long one went on.
  int64_t short_total = 0;
  for (int64_t r : short_job.rows) short_total += r;
  ASSERT_LE(short_total, budget);
  std::vector<std::string> expected = {"L0", "L1", "L2", "L3"};
  for (int l = 0; l < kLayers; ++l) expected.push_back(absl::StrCat("S", l));
  expected.push_back("S done");
  for (int l = 4; l < kLayers; ++l) expected.push_back(absl::StrCat("L", l));
  expected.push_back("L done");
  EXPECT_EQ(order, expected);

  // Identical to the solo runs: first token, per-layer rows, and the caches' next logits.
  for (auto [job, alone] : {std::pair{&long_job, &*long_alone}, {&short_job, &*short_alone}}) {
    PrefillResult& r = *job->result;
    EXPECT_EQ(r.first_token, alone->first_token);
    EXPECT_EQ(r.stats.layer_visual_tokens, alone->stats.layer_visual_tokens);
    EXPECT_EQ(r.cache.total_rows(), alone->cache.total_rows());
    const auto sliced = Continue(r, 3);
    const auto solo = Continue(*alone, 3);
    ASSERT_EQ(sliced.size(), solo.size());
    for (size_t i = 0; i < sliced.size(); ++i) {
      EXPECT_EQ(sliced[i], solo[i]) << job->prompt << ", step " << i;
    }
  }
}

TEST_F(PrefillSlicesTest, WithoutAHookOrWaitersNothingChanges) {
  Job job = MakeJob("What is it?", "hap", 4.0);
  std::vector<int64_t> rows;
  {
    ScopedTurnHook hook([&](int64_t r) { rows.push_back(r); });
    auto r = RunAlone(job);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(rows, std::vector<int64_t>(r->trace.tokens_per_layer.begin(),
                                         r->trace.tokens_per_layer.end()));
  }
  rows.clear();
  ASSERT_TRUE(RunAlone(job).ok());  // the scope is gone: nothing is reported
  EXPECT_TRUE(rows.empty());
  BeforeLayer(5);  // without a hook: a no-op
}

// A prefill cancelled while a layer runs stops before its next slice boundary: it does not wait
// for a turn it would only give back (holding its activations and cache meanwhile).
TEST_F(PrefillSlicesTest, ACancelledPrefillTakesNoFurtherTurn) {
  Job job = MakeJob("What is it?", "none", std::nullopt);
  auto encoded = EncodeImage(*model_, *png_, job.prune);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  int hooks = 0;
  int asked_after_third = 0;
  // Cancelled from the check after the third layer's hook and its own check: during layer 2.
  ScopedCancellation cancel([&] { return hooks >= 3 && ++asked_after_third >= 2; });
  ScopedTurnHook hook([&](int64_t) { ++hooks; });
  Sampler sampler{SamplingParams()};
  auto r = RunPrefill(*model_, job.prompt, *encoded, job.prune, &sampler);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_EQ(hooks, 3);
}

}  // namespace
}  // namespace hap
