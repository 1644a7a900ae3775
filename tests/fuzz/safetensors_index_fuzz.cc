// Fuzzes the sharded-checkpoint index (model.safetensors.index.json, runtime/io/weights.cc): a
// scratch model directory holds the two shards of a make-tiny checkpoint (the config is the
// committed seed tests/fuzz/corpus/config_fuzz/make_tiny.json), the input becomes its index, and
// LlavaWeights::Load reads the lot. A load that succeeds must give every weight its shape.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "runtime/io/config.h"
#include "runtime/io/weights.h"
#include "runtime/tiny/tiny_checkpoint.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/json_mutator.h"

namespace {

struct Checkpoint {
  std::string dir;
  hap::LlavaConfig config;
};

const Checkpoint& TheCheckpoint() {
  static const Checkpoint* checkpoint = [] {
    auto* c = new Checkpoint;
    const std::string config_path =
        hap::fuzz::SourceDir() + "/tests/fuzz/corpus/config_fuzz/make_tiny.json";
    std::ifstream in(config_path);
    std::stringstream text;
    text << in.rdbuf();
    auto config = hap::ParseLlavaConfig(text.str(), config_path);
    HAP_FUZZ_CHECK(config.ok(), "%s", std::string(config.status().message()).c_str());
    c->config = *config;
    std::string tmpl = (std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp");
    tmpl += "/hap_fuzz_index_XXXXXX";
    HAP_FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
    c->dir = tmpl;
    absl::Status written =
        hap::WriteRandomLlavaCheckpoint(c->config, c->dir, /*seed=*/0, hap::DType::kF32, 2);
    HAP_FUZZ_CHECK(written.ok(), "%s", std::string(written.message()).c_str());
    // The fuzzer replaces the index it wrote; the process removes the directory when it exits.
    std::atexit([] { std::filesystem::remove_all(TheCheckpoint().dir); });
    return c;
  }();
  return *checkpoint;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  TheCheckpoint();
  return 0;
}

HAP_FUZZ_JSON_MUTATOR()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Checkpoint& c = TheCheckpoint();
  {
    std::ofstream out(c.dir + "/model.safetensors.index.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    HAP_FUZZ_CHECK(out.good(), "cannot write the index");
  }
  // The low bits of the size pick the parts, so one corpus covers all three loads.
  const hap::ModelParts parts = static_cast<hap::ModelParts>(1 + size % 3);
  auto weights = hap::LlavaWeights::Load(c.dir, c.config, parts);
  if (!weights.ok()) return 0;
  const hap::LlavaWeights& w = **weights;
  if (hap::HasPart(parts, hap::ModelParts::kLanguage)) {
    const auto& text = w.text();
    HAP_FUZZ_CHECK(text.layers.size() == static_cast<size_t>(c.config.text.num_hidden_layers),
                   "%zu text layers", text.layers.size());
    HAP_FUZZ_CHECK(text.embed.data != nullptr && text.lm_head.data != nullptr, "no embeddings");
  }
  if (hap::HasPart(parts, hap::ModelParts::kVision)) {
    HAP_FUZZ_CHECK(w.vision().patch_w.data != nullptr, "no patch embedding");
    HAP_FUZZ_CHECK(w.projector().l1_w.data != nullptr, "no projector");
  }
  return 0;
}
