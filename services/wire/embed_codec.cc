#include "services/wire/embed_codec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "services/wire/kv_codec.h"

namespace hap::svc {
namespace {

absl::Status Bad(const std::string& what) {
  return absl::InternalError(absl::StrCat("encoder stream: ", what));
}

}  // namespace

absl::StatusOr<std::vector<hap::v1::EmbeddingChunk>> ChunkEmbeddings(
    const std::vector<float>& embeds, int hidden, int max_message_bytes) {
  const int64_t row_bytes = static_cast<int64_t>(hidden) * sizeof(float);
  const int64_t room = static_cast<int64_t>(max_message_bytes) - kChunkOverheadBytes;
  if (hidden <= 0 || room < row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("max message size ", max_message_bytes,
                                                   " is too small for one embedding row"));
  }
  const int n = static_cast<int>(embeds.size() / hidden);
  const int rows_per_chunk = static_cast<int>(room / row_bytes);
  std::vector<hap::v1::EmbeddingChunk> chunks;
  for (int row = 0; row < n; row += rows_per_chunk) {
    const int rows = std::min(rows_per_chunk, n - row);
    hap::v1::EmbeddingChunk& c = chunks.emplace_back();
    c.set_chunk_index(static_cast<int>(chunks.size()) - 1);
    c.set_row_offset(row);
    c.set_n_rows(rows);
    c.set_data(reinterpret_cast<const char*>(embeds.data() + static_cast<size_t>(row) * hidden),
               rows * row_bytes);
    c.set_crc32c(Crc32c(0, c.data()));
  }
  return chunks;
}

absl::Status EmbeddingAssembler::OnHeader(const hap::v1::EmbeddingHeader& h) {
  if (has_header_) return Bad("a second header arrived");
  if (h.hidden() != hidden_) {
    return Bad(absl::StrCat("embeddings have width ", h.hidden(), " but the LLM expects ", hidden_,
                            " (do the encoder and prefill serve the same model?)"));
  }
  if (h.dtype() != hap::v1::DTYPE_F32) return Bad("embeddings must be DTYPE_F32");
  if (h.n_tokens() < 1 || h.n_tokens() > max_tokens_) {
    return Bad(absl::StrCat(h.n_tokens(), " visual tokens is outside [1, ", max_tokens_, "]"));
  }
  if (h.n_chunks() < 1 || h.n_chunks() > h.n_tokens()) {
    return Bad(absl::StrCat("n_chunks ", h.n_chunks(), " is outside [1, ", h.n_tokens(), "]"));
  }
  header_ = h;
  has_header_ = true;
  data_.reserve(static_cast<size_t>(h.n_tokens()) * hidden_);
  return absl::OkStatus();
}

absl::Status EmbeddingAssembler::OnChunk(const hap::v1::EmbeddingChunk& c) {
  if (!has_header_) return Bad("a chunk arrived before the header");
  if (c.chunk_index() != chunks_ || chunks_ >= header_.n_chunks()) {
    return Bad(absl::StrCat("chunk_index ", c.chunk_index(), " where ", chunks_, " was expected"));
  }
  if (c.row_offset() != rows_ || c.n_rows() < 1 || c.n_rows() > header_.n_tokens() - rows_) {
    return Bad(absl::StrCat("chunk ", chunks_, " rows [", c.row_offset(), ", +", c.n_rows(),
                            ") do not continue the ", rows_, " rows received"));
  }
  if (c.data().size() != static_cast<size_t>(c.n_rows()) * hidden_ * sizeof(float)) {
    return Bad(absl::StrCat("chunk ", chunks_, " has ", c.data().size(), " bytes for ", c.n_rows(),
                            " rows"));
  }
  if (Crc32c(0, c.data()) != c.crc32c())
    return Bad(absl::StrCat("chunk ", chunks_, " checksum mismatch"));
  const auto* p = reinterpret_cast<const float*>(c.data().data());
  data_.insert(data_.end(), p, p + static_cast<size_t>(c.n_rows()) * hidden_);
  rows_ += c.n_rows();
  ++chunks_;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> EmbeddingAssembler::Finish() {
  if (!has_header_) return Bad("the stream ended without a header");
  if (chunks_ != header_.n_chunks() || rows_ != header_.n_tokens()) {
    return Bad(absl::StrCat("the stream ended after ", chunks_, " of ", header_.n_chunks(),
                            " chunks (", rows_, " of ", header_.n_tokens(), " rows)"));
  }
  return std::move(data_);
}

}  // namespace hap::svc
