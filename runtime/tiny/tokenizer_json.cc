// WriteLlavaTokenizerJson: the added tokens llava-hf appends, then the conversion.
#include "runtime/tiny/tokenizer_json.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/io/side_files.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/tokenizer_json_writer.h"

namespace hap {

absl::Status WriteLlavaTokenizerJson(const std::string& dir, const LlavaConfig& config) {
  const std::filesystem::path d(dir);
  const std::string model_path = (d / "tokenizer.model").string();
  HAP_ASSIGN_OR_RETURN(auto sp, Tokenizer::Load(model_path));
  std::vector<ExtraAddedToken> extra;
  if (config.image_token_index >= sp->vocab_size()) {
    extra.push_back({config.image_token_index, kImageTokenContent});
  }
  if (config.text.pad_token_id >= sp->vocab_size() &&
      config.text.pad_token_id != config.image_token_index) {
    extra.push_back({config.text.pad_token_id, kPadTokenContent});
  }
  std::sort(extra.begin(), extra.end(),
            [](const ExtraAddedToken& a, const ExtraAddedToken& b) { return a.id < b.id; });
  HAP_ASSIGN_OR_RETURN(const std::string text, TokenizerJsonFromSentencePiece(model_path, extra));
  const std::string path = (d / "tokenizer.json").string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace hap
