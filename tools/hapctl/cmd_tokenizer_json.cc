// hapctl tokenizer-json: writes tokenizer.json into a llava-hf directory that has only
// SentencePiece's tokenizer.model, so that transformers reads the directory's own file (and
// gives the ids HAP serve gives) instead of converting tokenizer.model itself.
#include <cstdio>

#include "base/status_macros.h"
#include "runtime/io/config.h"
#include "runtime/tiny/tokenizer_json.h"
#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"

namespace hap::cli {
namespace {

absl::Status WriteTokenizerJson(const Flags& flags) {
  HAP_ASSIGN_OR_RETURN(const std::string dir, flags.Required("model"));
  HAP_ASSIGN_OR_RETURN(const LlavaConfig config, LoadLlavaConfig(dir));
  HAP_RETURN_IF_ERROR(WriteLlavaTokenizerJson(dir, config));
  std::printf("wrote %s/tokenizer.json\n", dir.c_str());
  return absl::OkStatus();
}

int CmdTokenizerJson(const std::vector<std::string>& args) {
  auto flags = Flags::Parse(args, {"model"}, {});
  if (!flags.ok()) return Fail("tokenizer-json", flags.status());
  if (absl::Status s = WriteTokenizerJson(*flags); !s.ok()) return Fail("tokenizer-json", s);
  return 0;
}

}  // namespace

// The command name has a hyphen, which clang-format would space out.
// clang-format off
HAP_COMMAND(tokenizer-json, "Write tokenizer.json beside a llava-hf tokenizer.model (--model DIR)",
            CmdTokenizerJson);
// clang-format on

}  // namespace hap::cli
