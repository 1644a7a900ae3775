// Fuzzes the request checks of the services on a hap.v1.GenerateRequest parsed from the input:
// the front door's PrefillService::Check (request id, image size, prompt / raw_prompt, sampling,
// stop strings, pruning against the default model, prompt tokenization and the pruner's own
// checks), and the encoder's check of the same pruning (PruneFromProto without defaults, the
// VisionZip counts). Errors must be InvalidArgument or ResourceExhausted; an accepted request
// must carry values inside the documented ranges.
#include <string>

#include "hap/v1/generate.pb.h"
#include "runtime/model/pipeline.h"
#include "services/wire/proto_convert.h"
#include "tests/fuzz/front_door.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/proto_mutator.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hap::fuzz::TheFrontDoor();
  return 0;
}

HAP_FUZZ_PROTO_MUTATOR(hap::v1::GenerateRequest)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hap::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  hap::fuzz::FrontDoor& door = hap::fuzz::TheFrontDoor();

  auto job = door.service->Check(request);
  if (hap::fuzz::Verbose()) std::fprintf(stderr, "Check: %s\n", job.status().ToString().c_str());
  if (!job.ok()) {
    HAP_FUZZ_CHECK(absl::IsInvalidArgument(job.status()) || absl::IsResourceExhausted(job.status()),
                   "unexpected error code: %s", job.status().ToString().c_str());
  } else {
    HAP_FUZZ_CHECK(!job->request_id.empty() && job->request_id.size() <= 256, "request id");
    HAP_FUZZ_CHECK(
        job->stop.max_new_tokens >= 1 && job->stop.max_new_tokens <= hap::svc::kMaxNewTokensLimit,
        "max_new_tokens %d", job->stop.max_new_tokens);
    HAP_FUZZ_CHECK(job->stop.stop_strings.size() <= 16, "stop strings");
    HAP_FUZZ_CHECK(!job->prompt.text.empty(), "empty prompt accepted");
  }

  // The encoder's check of the pruning it runs (services/encoder/encoder_service.cc).
  const int visual_tokens = *door.model->reference_visual_tokens();  // LLaVA's fixed V
  auto prune = hap::svc::PruneFromProto(request.pruning(), hap::v1::Pruning(), visual_tokens);
  if (prune.ok() && prune->method == "visionzip") {
    auto counts = hap::VisionZipCountsFor(*prune, door.model->Dims(visual_tokens));
    if (counts.ok() && counts->enabled()) {  // {0, 0}: the budget keeps every token
      HAP_FUZZ_CHECK(counts->dominant >= 1 && counts->contextual >= 0 &&
                         counts->total() <= visual_tokens,
                     "VisionZip keeps %d of %d tokens", counts->total(), visual_tokens);
    }
    // What the encoder checks and the front door expects back: the same count.
    auto encoded = door.model->EncodedTokens(*prune, visual_tokens);
    HAP_FUZZ_CHECK(encoded.ok() == counts.ok(), "EncodedTokens %s, VisionZipCountsFor %s",
                   encoded.status().ToString().c_str(), counts.status().ToString().c_str());
    if (encoded.ok()) {
      HAP_FUZZ_CHECK(*encoded == (counts->enabled() ? counts->total() : visual_tokens),
                     "EncodedTokens %d", *encoded);
    }
  }
  return 0;
}
