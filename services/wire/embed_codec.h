// The visual embeddings on the Encode stream (proto/hap/v1/encoder.proto): split into row
// chunks under the message limit, each with a CRC-32C, and checked and reassembled by prefill.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "hap/v1/encoder.pb.h"

namespace hap::svc {

// embeds F32 [n_tokens, hidden] → chunks of whole rows, each message under max_message_bytes.
absl::StatusOr<std::vector<hap::v1::EmbeddingChunk>> ChunkEmbeddings(
    const std::vector<float>& embeds, int hidden, int max_message_bytes);

class EmbeddingAssembler {
 public:
  // hidden: the LLM width the embeddings must have; max_tokens: the most rows accepted.
  EmbeddingAssembler(int hidden, int max_tokens) : hidden_(hidden), max_tokens_(max_tokens) {}

  // Errors are Internal: a bad stream from our own encoder is a server fault, not the client's.
  absl::Status OnHeader(const hap::v1::EmbeddingHeader& header);
  absl::Status OnChunk(const hap::v1::EmbeddingChunk& chunk);
  // Checks that every row arrived; returns F32 [n_tokens, hidden].
  absl::StatusOr<std::vector<float>> Finish();

  const hap::v1::EmbeddingHeader& header() const { return header_; }

 private:
  const int hidden_, max_tokens_;
  hap::v1::EmbeddingHeader header_;
  bool has_header_ = false;
  int chunks_ = 0;
  int rows_ = 0;
  std::vector<float> data_;
};

}  // namespace hap::svc
