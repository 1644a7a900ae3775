// Fuzzes prefill's receipt of the encoder's embedding stream (services/wire/embed_codec.cc
// EmbeddingAssembler): the input's first byte holds flags (bit 0: recompute each chunk's
// CRC-32C so mutations get past the checksum), the rest is a stream of hap.v1.EncodeResponse
// messages (see fuzz_util.h SplitStream), fed until the first error as prefill does. Errors are
// Internal (a bad stream from our own encoder is a server fault); Finish must return exactly
// n_tokens x hidden values, and the chunks re-made by ChunkEmbeddings must assemble the same.
#include <cstring>
#include <vector>

#include "base/crc32c.h"
#include "hap/v1/encoder.pb.h"
#include "services/wire/embed_codec.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/proto_mutator.h"

namespace {

constexpr int kHidden = 8;      // the LLM width the embeddings must have
constexpr int kMaxTokens = 64;  // visual tokens accepted

}  // namespace

HAP_FUZZ_PROTO_STREAM_MUTATOR(hap::v1::EncodeResponse)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool fix_crc = data[0] & 1;
  hap::svc::EmbeddingAssembler assembler(kHidden, kMaxTokens);
  absl::Status status;
  for (std::string_view bytes : hap::fuzz::SplitStream(data + 1, size - 1)) {
    hap::v1::EncodeResponse response;
    if (!response.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return 0;
    if (response.has_header()) {
      status = assembler.OnHeader(response.header());
    } else if (response.has_chunk()) {
      hap::v1::EmbeddingChunk* chunk = response.mutable_chunk();
      if (fix_crc) chunk->set_crc32c(hap::Crc32c(0, chunk->data()));
      status = assembler.OnChunk(*chunk);
    } else {
      return 0;
    }
    if (!status.ok()) break;
  }
  if (!status.ok()) {
    HAP_FUZZ_CHECK(absl::IsInternal(status), "unexpected error code: %s",
                   status.ToString().c_str());
    return 0;
  }
  const int n_tokens = assembler.header().n_tokens();
  auto embeds = assembler.Finish();
  if (!embeds.ok()) {
    HAP_FUZZ_CHECK(absl::IsInternal(embeds.status()), "unexpected error code: %s",
                   embeds.status().ToString().c_str());
    return 0;
  }
  HAP_FUZZ_CHECK(embeds->size() == static_cast<size_t>(n_tokens) * kHidden, "%zu values",
                 embeds->size());

  // The sending side's chunking of the same rows assembles to the same bytes.
  auto chunks = hap::svc::ChunkEmbeddings(*embeds, kHidden, 512 + 3 * kHidden * 4);
  HAP_FUZZ_CHECK(chunks.ok(), "%s", chunks.status().ToString().c_str());
  hap::v1::EmbeddingHeader header = assembler.header();
  header.set_n_chunks(static_cast<int>(chunks->size()));
  hap::svc::EmbeddingAssembler again(kHidden, kMaxTokens);
  HAP_FUZZ_CHECK(again.OnHeader(header).ok(), "re-chunked header refused");
  for (const auto& c : *chunks) HAP_FUZZ_CHECK(again.OnChunk(c).ok(), "re-chunked chunk refused");
  auto round = again.Finish();
  HAP_FUZZ_CHECK(round.ok() && round->size() == embeds->size() &&
                     std::memcmp(round->data(), embeds->data(), embeds->size() * 4) == 0,
                 "re-chunked embeddings differ");
  return 0;
}
