// Helpers shared by the hap_io tests: scratch directories, raw file bytes, a tiny LLaVA config.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "runtime/io/config.h"
#include "tests/common/files.h"

namespace hap::testing {

// A fresh directory under gtest's temp dir, removed with everything in it on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = ::testing::TempDir() + "hap_io_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A safetensors file from a literal header and data section (no padding, no validation), for
// crafting broken files.
inline std::string RawSafetensors(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// Little-endian bytes of floats.
inline std::string FloatBytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  return out;
}

// A small but complete LLaVA: 3 CLIP layers (2 used with feature layer -2), 28 px images of
// 14 px patches (4 patches), GQA text model with 2 layers.
inline LlavaConfig TinyConfig() {
  LlavaConfig c;
  c.vision.hidden_size = 32;
  c.vision.intermediate_size = 64;
  c.vision.num_hidden_layers = 3;
  c.vision.num_attention_heads = 4;
  c.vision.image_size = 28;
  c.vision.patch_size = 14;
  c.vision.projection_dim = 16;
  c.text.vocab_size = 80;
  c.text.hidden_size = 32;
  c.text.intermediate_size = 48;
  c.text.num_hidden_layers = 2;
  c.text.num_attention_heads = 4;
  c.text.num_key_value_heads = 2;
  c.text.head_dim = 8;
  c.text.max_position_embeddings = 128;
  c.image_token_index = 79;
  c.image_seq_length = 4;
  return c;
}

}  // namespace hap::testing
