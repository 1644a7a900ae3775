// Fuzzes the chat-template engine (runtime/text/chat_template.cc): the input is a Jinja template,
// parsed and, when it parses, rendered with a fixed conversation (system, user with an image and
// text parts, assistant, user) and the bos/eos variables, with and without the generation
// prompt. Errors must be InvalidArgument; the sandbox limits keep every render bounded.
#include <string>

#include "nlohmann/json.hpp"
#include "runtime/text/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const nlohmann::json& Conversation() {
  static const nlohmann::json* messages = new nlohmann::json(nlohmann::json::parse(R"([
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": [{"type": "image"},
                                 {"type": "text", "text": "What is in the picture?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A red cube and a blue ball."}]},
    {"role": "user", "content": "Which is larger? \u00e9\u4e2d"}
  ])"));
  return *messages;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tmpl = hap::ChatTemplate::Parse(hap::fuzz::AsView(data, size), "fuzz");
  if (!tmpl.ok()) {
    HAP_FUZZ_CHECK(absl::IsInvalidArgument(tmpl.status()), "unexpected error code: %s",
                   tmpl.status().ToString().c_str());
    return 0;
  }
  const nlohmann::json extra = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  for (bool add_generation_prompt : {false, true}) {
    auto text = tmpl->Render(Conversation(), add_generation_prompt, extra);
    if (!text.ok()) {
      HAP_FUZZ_CHECK(absl::IsInvalidArgument(text.status()), "unexpected error code: %s",
                     text.status().ToString().c_str());
    }
  }
  return 0;
}
