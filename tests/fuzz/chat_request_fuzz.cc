// Fuzzes the OpenAI-compatible API's request parsing (services/openai/chat_api.cc
// ParseChatRequest with the built-in LLaVA-1.5 template): a body that parses must have been
// rendered with exactly one "<image>" placeholder and an image, and then goes through the front
// door's check (PrefillService::Check) as openai_server.cc sends it; errors map to 400/404/413.
#include <memory>
#include <string>

#include "services/openai/chat_api.h"
#include "tests/fuzz/front_door.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/json_mutator.h"

namespace {

const hap::svc::openai::ChatOptions& Options() {
  static const hap::svc::openai::ChatOptions* options = [] {
    auto* o = new hap::svc::openai::ChatOptions;
    o->model_id = "scenes-llava";
    o->max_image_bytes = 1 << 20;
    o->chat_template = std::make_shared<hap::ChatTemplate>(hap::ChatTemplate::Llava15());
    return o;
  }();
  return *options;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Options();
  hap::fuzz::TheFrontDoor();
  return 0;
}

HAP_FUZZ_JSON_MUTATOR()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto request = hap::svc::openai::ParseChatRequest(hap::fuzz::AsView(data, size), Options());
  if (hap::fuzz::Verbose()) {
    std::fprintf(stderr, "ParseChatRequest: %s\n", request.status().ToString().c_str());
  }
  if (!request.ok()) {
    const hap::svc::openai::ApiError error = hap::svc::openai::RequestError(request.status());
    HAP_FUZZ_CHECK(error.http_status == 400 || error.http_status == 404 || error.http_status == 413,
                   "HTTP %d for %s", error.http_status, request.status().ToString().c_str());
    HAP_FUZZ_CHECK(!error.Body().dump().empty(), "no error body");
    return 0;
  }
  const hap::v1::GenerateRequest& generate = request->generate;
  HAP_FUZZ_CHECK(!generate.image().empty() &&
                     static_cast<int64_t>(generate.image().size()) <= Options().max_image_bytes,
                 "image of %zu bytes accepted", generate.image().size());
  HAP_FUZZ_CHECK(Count(generate.raw_prompt(), "<image>") == 1,
                 "the rendered prompt holds %zu image placeholders:\n%s",
                 Count(generate.raw_prompt(), "<image>"), generate.raw_prompt().c_str());
  HAP_FUZZ_CHECK(!request->include_usage || request->stream, "include_usage without stream");

  auto job = hap::fuzz::TheFrontDoor().service->Check(generate);
  if (hap::fuzz::Verbose()) std::fprintf(stderr, "Check: %s\n", job.status().ToString().c_str());
  if (!job.ok()) {
    HAP_FUZZ_CHECK(absl::IsInvalidArgument(job.status()) || absl::IsResourceExhausted(job.status()),
                   "unexpected error code: %s", job.status().ToString().c_str());
  }
  return 0;
}
