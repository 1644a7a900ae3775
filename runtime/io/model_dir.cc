#include "runtime/io/model_dir.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace hap {

std::string ResolveModelDir(const std::string& flag_value) {
  namespace fs = std::filesystem;
  if (!flag_value.empty()) return flag_value;
  if (const char* env = std::getenv("HAP_MODEL_DIR"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share/hap/models" / kDefaultModelName;
    if (fs::is_directory(installed)) return installed.string();
  }
  return (fs::path(HAP_SOURCE_DIR) / "models" / kDefaultModelName).string();
}

std::string TokenizerCorpusPath() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share/hap/tokenizer/corpus.txt";
    if (fs::is_regular_file(installed)) return installed.string();
  }
  return (fs::path(HAP_SOURCE_DIR) / "data/tokenizer/corpus.txt").string();
}

}  // namespace hap
