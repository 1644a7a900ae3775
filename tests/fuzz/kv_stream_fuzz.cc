// Fuzzes the receiving side of the KV-cache transfer (services/wire/kv_codec.cc KvAssembler):
// the input's first byte holds flags (bit 0: recompute each chunk's CRC-32C so mutations get
// past the checksum; bit 1: assemble into a small KV block pool, as hap-decode does; bit 2: the
// pool holds BF16 rather than F32), the rest
// is a stream of hap.v1.DecodeRequest messages (header, chunks, trailer; see
// fuzz_util.h SplitStream). The stream stops at its first error, as the Decode RPC does. A
// stream the assembler completes must hold exactly the rows the header announced, and every
// pool block must be back once the assembler is gone.
#include <cstdio>
#include <memory>

#include "hap/v1/decode.pb.h"
#include "runtime/engine/kv_block_pool.h"
#include "runtime/engine/paged_kv.h"
#include "services/wire/kv_codec.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/proto_mutator.h"

namespace {

// A model of 2 layers with KV rows of 4 values (kv_dim), 64 positions and 32 tokens: small
// enough that mutations reach whole valid streams, F32 or BF16 (tests/fuzz/make_corpus.py
// writes them).
constexpr hap::svc::KvExpectation kExpect{/*n_layers=*/2, /*kv_dim=*/4, /*d_model=*/8,
                                          /*vocab_size=*/32, /*max_positions=*/64};

hap::KvBlockPool& Pool(hap::DType dtype) {
  // 24 blocks of 4 rows: enough for some streams, too few for others (host fallback).
  static hap::KvBlockPool* f32 =
      hap::KvBlockPool::Create(4, kExpect.kv_dim, hap::DType::kF32, 24 * 4 * 4 * 4 * 2)->release();
  static hap::KvBlockPool* bf16 =
      hap::KvBlockPool::Create(4, kExpect.kv_dim, hap::DType::kBF16, 24 * 4 * 4 * 2 * 2)->release();
  return dtype == hap::DType::kBF16 ? *bf16 : *f32;
}

absl::Status Feed(hap::svc::KvAssembler& assembler, std::string_view bytes, bool fix_crc) {
  hap::v1::DecodeRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("unparsable message");
  }
  switch (request.kind_case()) {
    case hap::v1::DecodeRequest::kHeader:
      return assembler.OnHeader(request.header());
    case hap::v1::DecodeRequest::kChunk:
      if (fix_crc) {
        request.mutable_chunk()->set_crc32c(hap::svc::KvChunkChecksum(request.chunk()));
      }
      return assembler.OnChunk(request.chunk());
    case hap::v1::DecodeRequest::kTrailer:
      return assembler.OnTrailer(request.trailer());
    case hap::v1::DecodeRequest::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("empty message");
}

}  // namespace

HAP_FUZZ_PROTO_STREAM_MUTATOR(hap::v1::DecodeRequest)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool fix_crc = data[0] & 1, use_pool = data[0] & 2;
  hap::KvBlockPool& pool = Pool(data[0] & 4 ? hap::DType::kBF16 : hap::DType::kF32);
  {
    hap::svc::KvAssembler assembler(kExpect, use_pool ? &pool : nullptr);
    for (std::string_view message : hap::fuzz::SplitStream(data + 1, size - 1)) {
      absl::Status s = Feed(assembler, message, fix_crc);
      if (hap::fuzz::Verbose()) std::fprintf(stderr, "message: %s\n", s.ToString().c_str());
      if (!s.ok()) {
        HAP_FUZZ_CHECK(absl::IsInvalidArgument(s), "unexpected error code: %s",
                       s.ToString().c_str());
        break;
      }
    }
    if (hap::fuzz::Verbose()) {
      std::fprintf(stderr, "complete: %d, in blocks: %d\n", assembler.complete(),
                   assembler.in_blocks());
    }
    if (assembler.complete()) {
      const hap::v1::KvHeader& h = assembler.header();
      HAP_FUZZ_CHECK(assembler.bytes_received() == assembler.expected_bytes(),
                     "%lld bytes received, %lld expected",
                     static_cast<long long>(assembler.bytes_received()),
                     static_cast<long long>(assembler.expected_bytes()));
      if (assembler.in_blocks()) {
        std::unique_ptr<hap::PagedKv> paged = assembler.TakePaged();
        for (int l = 0; l < h.n_layers(); ++l) {
          HAP_FUZZ_CHECK(paged->len(l) == h.layer_rows(l), "layer %d: %d rows of %d", l,
                         paged->len(l), h.layer_rows(l));
        }
      } else {
        hap::KvCache cache = assembler.TakeCache();
        HAP_FUZZ_CHECK(static_cast<int>(cache.layers.size()) == h.n_layers(), "layers");
        const bool bf16 = cache.dtype() == hap::DType::kBF16;
        HAP_FUZZ_CHECK(bf16 == (h.dtype() == hap::v1::DTYPE_BF16), "cache dtype");
        for (int l = 0; l < h.n_layers(); ++l) {
          const hap::LayerKv& layer = cache.layers[l];
          const size_t values = static_cast<size_t>(layer.len()) * h.kv_dim();
          HAP_FUZZ_CHECK(layer.len() == h.layer_rows(l) &&
                             (bf16 ? layer.k_bf16.size() : layer.k.size()) == values &&
                             (bf16 ? layer.v_bf16.size() : layer.v.size()) == values &&
                             (bf16 ? layer.k.size() : layer.k_bf16.size()) == 0,
                         "layer %d: %d rows of %d", l, layer.len(), h.layer_rows(l));
          for (int r = 1; r < layer.len(); ++r) {
            HAP_FUZZ_CHECK(layer.positions[r - 1] < layer.positions[r], "positions not increasing");
          }
        }
      }
    }
  }
  HAP_FUZZ_CHECK(pool.stats().blocks_in_use == 0, "%lld pool blocks not returned",
                 static_cast<long long>(pool.stats().blocks_in_use));
  return 0;
}
