// Random-weight llava-hf checkpoints of any size (config.json, safetensors, tokenizer.model, the
// tokenizer.json made from it, and the side files of runtime/io/side_files.h), shared by
// `hapctl make-tiny`, the tests and the benchmarks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "runtime/tiny/tiny_checkpoint.h"

namespace hap {

struct TinyModelOptions {
  uint64_t seed = 0;
  int layers = 2;
  int hidden = 64;
  int heads = 4;
  int kv_heads = 4;
  int intermediate = 176;  // make-tiny's default: 11/4 of hidden rounded to 16
  int image_size = 56;     // patch 14 → (image_size/14)² visual tokens
  int vision_layers = 2;
  int vision_hidden = 64;
  int vision_heads = 4;
  int sp_vocab = 512;      // SentencePiece vocabulary (≥ 362 for the shipped corpus)
  // The model's vocabulary (embedding and LM head rows); 0 = the tokenizer's + <image>, <pad>,
  // padded to 64. Larger values give a real model's shapes (32064 for LLaVA-1.5-7B); the extra
  // ids decode to nothing.
  int model_vocab = 0;
  DType dtype = DType::kF32;
  int shards = 1;
  std::string corpus_path;  // text the tokenizer is trained on (data/tokenizer/corpus.txt)
  // Called after each weights file is written (WriteRandomLlavaCheckpoint); null = silent.
  std::function<void(const CheckpointProgress&)> progress;
};

// Writes the checkpoint into `dir` (created). InvalidArgument for sizes out of range.
absl::Status WriteTinyModel(const TinyModelOptions& options, const std::string& dir);

}  // namespace hap
