// The KV transfer codec on its own: CRC-32C, chunks under the message limit that reassemble
// into the identical cache, and the receiver's checks on headers and chunks.
#include "services/wire/kv_codec.h"

#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "base/crc32c.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "runtime/engine/kv_block_pool.h"
#include "runtime/engine/paged_kv.h"
#include "services/wire/embed_codec.h"

namespace hap::svc {
namespace {

KvCache MakeCache(int layers, int kv_dim) {
  KvCache c;
  c.kv_dim = kv_dim;
  c.next_position = 200;
  c.rope_delta = -90;  // an M-RoPE image's tokens advance the rotary position less
  for (int l = 0; l < layers; ++l) {
    LayerKv& layer = c.layers.emplace_back();
    const int rows = 150 - 20 * l;  // pruned layers hold fewer rows
    for (int r = 0; r < rows; ++r) {
      layer.positions.push_back(r + (r >= 10 ? 40 : 0));
      for (int i = 0; i < kv_dim; ++i) {
        layer.k.push_back(static_cast<float>(l * 1000 + r) + i * 1e-3f);
        layer.v.push_back(-static_cast<float>(l * 1000 + r) - i * 1e-3f);
      }
    }
  }
  return c;
}

// `c`'s rows as a BF16 cache: appended as the prefill appends them (Backend::StoreF32As).
KvCache ToBf16(const KvCache& c) {
  KvCache out;
  EXPECT_TRUE(out.SetDType(DType::kBF16).ok());
  out.kv_dim = c.kv_dim;
  out.next_position = c.next_position;
  out.layers.resize(c.layers.size());
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const LayerKv& src = c.layers[l];
    EXPECT_TRUE(out.Append(CpuBackend(), static_cast<int>(l), src.k.data(), src.v.data(),
                           src.positions.data(), src.len())
                    .ok());
  }
  return out;
}

KvExpectation Expect(const KvCache& c) {
  KvExpectation e;
  e.n_layers = static_cast<int>(c.layers.size());
  e.kv_dim = c.kv_dim;
  e.d_model = 64;
  e.vocab_size = 100;
  e.max_positions = 4096;
  return e;
}

hap::v1::KvHeader Header(const KvChunker& chunker) {
  hap::v1::KvHeader h;
  chunker.FillHeader(&h);
  h.set_d_model(64);
  h.set_vocab_size(100);
  h.set_first_token(3);
  h.set_samples_drawn(1);
  h.set_max_new_tokens(4);
  return h;
}

TEST(Crc32cTest, KnownValueAndChaining) {
  EXPECT_EQ(Crc32c(0, std::string_view("123456789")), 0xE3069283u);
  const std::string a = "hello, ", b = "world of many bytes beyond eight";
  EXPECT_EQ(Crc32c(Crc32c(0, a), b), Crc32c(0, a + b));
}

TEST(KvCodecTest, ChunksStayUnderTheLimitAndReassembleExactly) {
  const KvCache cache = MakeCache(4, 32);
  const int limit = 8192;
  auto chunker = KvChunker::Create(&cache, limit);
  ASSERT_TRUE(chunker.ok()) << chunker.status();
  KvAssembler assembler(Expect(cache));
  hap::v1::DecodeRequest msg;
  *msg.mutable_header() = Header(*chunker);
  ASSERT_TRUE(assembler.OnHeader(msg.header()).ok());
  int chunks = 0;
  while (chunker->Next(msg.mutable_chunk())) {
    EXPECT_LE(msg.ByteSizeLong(), static_cast<size_t>(limit));
    ASSERT_TRUE(assembler.OnChunk(msg.chunk()).ok()) << assembler.OnChunk(msg.chunk());
    ++chunks;
  }
  EXPECT_EQ(chunks, chunker->n_chunks());
  EXPECT_GT(chunks, 4 * 2);  // every layer was split
  chunker->FillTrailer(msg.mutable_trailer());
  ASSERT_TRUE(assembler.OnTrailer(msg.trailer()).ok());
  EXPECT_EQ(assembler.bytes_received(), cache.bytes());
  const KvCache got = assembler.TakeCache();
  ASSERT_EQ(got.layers.size(), cache.layers.size());
  EXPECT_EQ(got.kv_dim, cache.kv_dim);
  EXPECT_EQ(got.next_position, cache.next_position);
  EXPECT_EQ(got.rope_delta, cache.rope_delta);
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    EXPECT_EQ(got.layers[l].k, cache.layers[l].k);
    EXPECT_EQ(got.layers[l].v, cache.layers[l].v);
    EXPECT_EQ(got.layers[l].positions, cache.layers[l].positions);
  }
}

// With a block pool, the rows land in blocks as they arrive: the blocks are reserved at the
// header (each layer's rows plus max_new_tokens), hold exactly the rows a host cache would, and
// go back when the assembler is dropped; a pool without room falls back to the host cache.
TEST(KvCodecTest, RowsLandInPoolBlocksAsTheyArrive) {
  const KvCache cache = MakeCache(4, 32);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    auto pool = KvBlockPool::Create(16, 32, dtype, int64_t{4} << 20);
    ASSERT_TRUE(pool.ok());
    auto chunker = KvChunker::Create(&cache, 8192);
    ASSERT_TRUE(chunker.ok());
    const hap::v1::KvHeader header = Header(*chunker);
    {
      KvAssembler assembler(Expect(cache), pool->get());
      ASSERT_TRUE(assembler.OnHeader(header).ok());
      ASSERT_TRUE(assembler.in_blocks());
      const int64_t reserved = PagedKv::BlocksFor(**pool, cache, header.max_new_tokens());
      EXPECT_EQ((*pool)->stats().blocks_in_use, reserved);
      hap::v1::KvChunk chunk;
      while (chunker->Next(&chunk)) ASSERT_TRUE(assembler.OnChunk(chunk).ok());
      hap::v1::KvTrailer trailer;
      chunker->FillTrailer(&trailer);
      ASSERT_TRUE(assembler.OnTrailer(trailer).ok());
      EXPECT_EQ(assembler.TakeCache().total_rows(), 0);  // nothing assembled on the host
      std::unique_ptr<PagedKv> landed = assembler.TakePaged();
      ASSERT_NE(landed, nullptr);
      auto copied = PagedKv::FromCache(pool->get(), cache, header.max_new_tokens());
      ASSERT_TRUE(copied.ok());
      EXPECT_EQ(landed->next_position, cache.next_position);
      EXPECT_EQ(landed->rope_delta, cache.rope_delta);
      const size_t row_bytes = 32 * DTypeSize(dtype);
      for (int l = 0; l < landed->n_layers(); ++l) {
        ASSERT_EQ(landed->len(l), cache.layers[l].len());
        EXPECT_EQ(landed->positions(l), cache.layers[l].positions);
        std::vector<KvSpan> a, b;
        landed->Spans(l, &a);
        (*copied)->Spans(l, &b);
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) {
          ASSERT_EQ(a[i].rows, b[i].rows);
          EXPECT_EQ(std::memcmp(a[i].k, b[i].k, a[i].rows * row_bytes), 0) << l;
          EXPECT_EQ(std::memcmp(a[i].v, b[i].v, a[i].rows * row_bytes), 0) << l;
        }
      }
    }
    EXPECT_EQ((*pool)->stats().blocks_in_use, 0);
    {
      // A transfer cut off after a few chunks gives its blocks back with the assembler.
      KvAssembler cut(Expect(cache), pool->get());
      ASSERT_TRUE(cut.OnHeader(header).ok());
      auto again = KvChunker::Create(&cache, 8192);
      hap::v1::KvChunk chunk;
      ASSERT_TRUE(again->Next(&chunk));
      ASSERT_TRUE(cut.OnChunk(chunk).ok());
      EXPECT_GT((*pool)->stats().blocks_in_use, 0);
    }
    EXPECT_EQ((*pool)->stats().blocks_in_use, 0);
  }
  // A pool too small for the sequence: the rows assemble on the host instead.
  auto small = KvBlockPool::Create(16, 32, DType::kF32, 3 * 2 * 16 * 32 * sizeof(float));
  ASSERT_TRUE(small.ok());
  auto chunker = KvChunker::Create(&cache, 8192);
  KvAssembler assembler(Expect(cache), small->get());
  ASSERT_TRUE(assembler.OnHeader(Header(*chunker)).ok());
  EXPECT_FALSE(assembler.in_blocks());
  EXPECT_EQ((*small)->stats().blocks_in_use, 0);
  hap::v1::KvChunk chunk;
  while (chunker->Next(&chunk)) ASSERT_TRUE(assembler.OnChunk(chunk).ok());
  hap::v1::KvTrailer trailer;
  chunker->FillTrailer(&trailer);
  ASSERT_TRUE(assembler.OnTrailer(trailer).ok());
  EXPECT_EQ(assembler.TakePaged(), nullptr);
  EXPECT_EQ(assembler.TakeCache().total_rows(), cache.total_rows());
}

// A BF16 cache goes as DTYPE_BF16 rows, half the bytes of the F32 one, and reassembles into the
// identical BF16 cache; the checksum covers the BF16 bytes as sent.
TEST(KvCodecTest, Bf16CacheTravelsAsBf16RowsInHalfTheBytes) {
  const KvCache f32 = MakeCache(4, 32);
  const KvCache cache = ToBf16(f32);
  ASSERT_EQ(cache.dtype(), DType::kBF16);
  EXPECT_EQ(cache.bytes() * 2, f32.bytes());
  auto chunker = KvChunker::Create(&cache, 8192);
  ASSERT_TRUE(chunker.ok()) << chunker.status();
  auto f32_chunker = KvChunker::Create(&f32, 8192);
  ASSERT_TRUE(f32_chunker.ok());
  // Rows of half the size: about twice as many per message.
  EXPECT_GE(chunker->rows_per_chunk(), 2 * f32_chunker->rows_per_chunk() - 1);
  KvAssembler assembler(Expect(cache));
  hap::v1::DecodeRequest msg;
  *msg.mutable_header() = Header(*chunker);
  EXPECT_EQ(msg.header().dtype(), hap::v1::DTYPE_BF16);
  ASSERT_TRUE(assembler.OnHeader(msg.header()).ok());
  EXPECT_EQ(assembler.expected_bytes(), cache.bytes());
  int64_t sent = 0;
  while (chunker->Next(msg.mutable_chunk())) {
    const hap::v1::KvChunk& c = msg.chunk();
    EXPECT_LE(msg.ByteSizeLong(), 8192u);
    EXPECT_EQ(c.dtype(), hap::v1::DTYPE_BF16);
    EXPECT_EQ(c.k().size(), static_cast<size_t>(c.n_rows()) * 32 * sizeof(uint16_t));
    std::string positions(reinterpret_cast<const char*>(c.positions().data()),
                          c.positions_size() * sizeof(int32_t));
    EXPECT_EQ(c.crc32c(), Crc32c(Crc32c(Crc32c(0, c.k()), c.v()), positions));
    sent += static_cast<int64_t>(c.k().size() + c.v().size());
    ASSERT_TRUE(assembler.OnChunk(c).ok()) << assembler.OnChunk(c);
  }
  chunker->FillTrailer(msg.mutable_trailer());
  EXPECT_EQ(msg.trailer().kv_bytes(), cache.bytes());
  ASSERT_TRUE(assembler.OnTrailer(msg.trailer()).ok());
  EXPECT_EQ(sent, cache.bytes());
  EXPECT_EQ(assembler.bytes_received(), f32.bytes() / 2);
  const KvCache got = assembler.TakeCache();
  ASSERT_EQ(got.dtype(), DType::kBF16);
  ASSERT_EQ(got.layers.size(), cache.layers.size());
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    EXPECT_EQ(got.layers[l].k_bf16, cache.layers[l].k_bf16);
    EXPECT_EQ(got.layers[l].v_bf16, cache.layers[l].v_bf16);
    EXPECT_TRUE(got.layers[l].k.empty());
    EXPECT_EQ(got.layers[l].positions, cache.layers[l].positions);
  }
}

// Into hap-decode's pool: BF16 rows land in a BF16 pool as they are (the bits an F32 transfer
// rounded into it would have) and widen exactly into an F32 pool.
TEST(KvCodecTest, Bf16RowsLandInBf16AndF32Pools) {
  const KvCache f32 = MakeCache(4, 32);
  const KvCache cache = ToBf16(f32);
  for (DType pool_dtype : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(std::string(DTypeName(pool_dtype)));
    auto pool = KvBlockPool::Create(16, 32, pool_dtype, int64_t{4} << 20);
    ASSERT_TRUE(pool.ok());
    auto chunker = KvChunker::Create(&cache, 4096);
    ASSERT_TRUE(chunker.ok());
    const hap::v1::KvHeader header = Header(*chunker);
    KvAssembler assembler(Expect(cache), pool->get());
    ASSERT_TRUE(assembler.OnHeader(header).ok());
    ASSERT_TRUE(assembler.in_blocks());
    hap::v1::KvChunk chunk;
    while (chunker->Next(&chunk)) ASSERT_TRUE(assembler.OnChunk(chunk).ok());
    hap::v1::KvTrailer trailer;
    chunker->FillTrailer(&trailer);
    ASSERT_TRUE(assembler.OnTrailer(trailer).ok());
    std::unique_ptr<PagedKv> landed = assembler.TakePaged();
    ASSERT_NE(landed, nullptr);
    EXPECT_EQ(landed->dtype(), pool_dtype);
    // The F32 cache's rows rounded into the same pool, for the BF16 case.
    auto rounded = PagedKv::FromCache(pool->get(), f32, 0);
    ASSERT_TRUE(rounded.ok());
    for (int l = 0; l < landed->n_layers(); ++l) {
      const LayerKv& src = cache.layers[l];
      std::vector<float> wide_k(src.k_bf16.size()), wide_v(src.v_bf16.size());
      ConvertToF32(DType::kBF16, src.k_bf16.data(), wide_k.data(), wide_k.size());
      ConvertToF32(DType::kBF16, src.v_bf16.data(), wide_v.data(), wide_v.size());
      const auto* want_k = pool_dtype == DType::kBF16
                               ? reinterpret_cast<const uint8_t*>(src.k_bf16.data())
                               : reinterpret_cast<const uint8_t*>(wide_k.data());
      const auto* want_v = pool_dtype == DType::kBF16
                               ? reinterpret_cast<const uint8_t*>(src.v_bf16.data())
                               : reinterpret_cast<const uint8_t*>(wide_v.data());
      const size_t row_bytes = 32 * DTypeSize(pool_dtype);
      std::vector<KvSpan> spans, from_f32;
      landed->Spans(l, &spans);
      (*rounded)->Spans(l, &from_f32);
      ASSERT_EQ(spans.size(), from_f32.size());
      size_t row = 0;
      for (size_t i = 0; i < spans.size(); ++i) {
        EXPECT_EQ(std::memcmp(spans[i].k, want_k + row * row_bytes, spans[i].rows * row_bytes), 0)
            << "layer " << l << " span " << i;
        EXPECT_EQ(std::memcmp(spans[i].v, want_v + row * row_bytes, spans[i].rows * row_bytes), 0)
            << "layer " << l << " span " << i;
        if (pool_dtype == DType::kBF16) {
          EXPECT_EQ(std::memcmp(spans[i].k, from_f32[i].k, spans[i].rows * row_bytes), 0);
          EXPECT_EQ(std::memcmp(spans[i].v, from_f32[i].v, spans[i].rows * row_bytes), 0);
        }
        row += spans[i].rows;
      }
      EXPECT_EQ(row, static_cast<size_t>(src.len()));
    }
  }
}

// A chunk's dtype must be the header's, its k/v sizes must fit the dtype, and only F32 and BF16
// are accepted.
TEST(KvCodecTest, RejectsChunksThatDoNotMatchTheHeadersDtype) {
  const KvCache f32 = MakeCache(2, 16);
  const KvCache cache = ToBf16(f32);
  auto chunker = KvChunker::Create(&cache, 4096);
  ASSERT_TRUE(chunker.ok());
  hap::v1::KvChunk good;
  ASSERT_TRUE(chunker->Next(&good));
  auto expect_bad = [&](const hap::v1::KvChunk& c, const std::string& words) {
    KvAssembler a(Expect(cache));
    ASSERT_TRUE(a.OnHeader(Header(*chunker)).ok());
    const absl::Status s = a.OnChunk(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(words), std::string::npos) << s;
  };
  {
    KvAssembler a(Expect(cache));
    ASSERT_TRUE(a.OnHeader(Header(*chunker)).ok());
    EXPECT_TRUE(a.OnChunk(good).ok());
  }
  hap::v1::KvChunk c = good;
  c.set_dtype(hap::v1::DTYPE_F32);  // the rows are BF16, the header says so
  expect_bad(c, "differs from the header");
  // An F32 chunk of the same rows (twice the bytes) in a BF16 stream.
  auto f32_chunker = KvChunker::Create(&f32, 4096);
  ASSERT_TRUE(f32_chunker.ok());
  hap::v1::KvChunk f32_chunk;
  ASSERT_TRUE(f32_chunker->Next(&f32_chunk));
  expect_bad(f32_chunk, "differs from the header");
  // The header's dtype with the F32 chunk's byte counts: the sizes do not fit BF16.
  f32_chunk.set_dtype(hap::v1::DTYPE_BF16);
  f32_chunk.set_crc32c(KvChunkChecksum(f32_chunk));
  expect_bad(f32_chunk, "BF16 rows");
  // An odd byte count: half a BF16 value.
  c = good;
  c.mutable_k()->push_back('\0');
  c.mutable_v()->push_back('\0');
  c.set_crc32c(KvChunkChecksum(c));
  expect_bad(c, "BF16 rows");
  c = good;
  c.mutable_k()->pop_back();
  c.set_crc32c(KvChunkChecksum(c));
  expect_bad(c, "BF16 rows");
  // One flipped bit in the BF16 bytes: the checksum no longer matches.
  c = good;
  (*c.mutable_v())[3] ^= 0x10;
  expect_bad(c, "checksum mismatch");
  // F16 is reserved, not accepted.
  hap::v1::KvHeader h = Header(*chunker);
  h.set_dtype(hap::v1::DTYPE_F16);
  const absl::Status s = KvAssembler(Expect(cache)).OnHeader(h);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("DTYPE_F16"), std::string::npos) << s;
}

TEST(KvCodecTest, RejectsWhatDoesNotFit) {
  const KvCache cache = MakeCache(2, 16);
  EXPECT_FALSE(KvChunker::Create(&cache, 600).ok());  // not one row fits
  auto chunker = KvChunker::Create(&cache, 4096);
  ASSERT_TRUE(chunker.ok());
  KvExpectation wrong = Expect(cache);
  wrong.kv_dim = 8;
  EXPECT_EQ(KvAssembler(wrong).OnHeader(Header(*chunker)).code(),
            absl::StatusCode::kInvalidArgument);
  for (int delta : {1, -200}) {  // a rotary position ahead of the count, or before the first
    hap::v1::KvHeader h = Header(*chunker);
    h.set_rope_delta(delta);
    EXPECT_EQ(KvAssembler(Expect(cache)).OnHeader(h).code(), absl::StatusCode::kInvalidArgument);
  }
  KvAssembler a(Expect(cache));
  ASSERT_TRUE(a.OnHeader(Header(*chunker)).ok());
  EXPECT_FALSE(a.OnHeader(Header(*chunker)).ok());  // a second header
  hap::v1::KvChunk c;
  ASSERT_TRUE(chunker->Next(&c));
  c.set_n_rows(c.n_rows() + 1000);
  EXPECT_FALSE(a.OnChunk(c).ok());
  hap::v1::KvTrailer t;
  chunker->FillTrailer(&t);
  EXPECT_FALSE(a.OnTrailer(t).ok());  // chunks missing
}

// `cache` as a device handover would describe it (handles that name nothing here).
ExportedKv FakeExport(const KvCache& cache) {
  ExportedKv e;
  e.device = "GPU-0123";
  e.dtype = cache.dtype();
  e.kv_dim = cache.kv_dim;
  for (const LayerKv& layer : cache.layers) {
    ExportedKv::Layer l;
    l.k = std::string(64, 'k');
    l.v = std::string(64, 'v');
    l.capacity = layer.len() + 4;
    l.positions = layer.positions;
    e.layers.push_back(std::move(l));
  }
  return e;
}

TEST(KvCodecTest, ADeviceHandoverThatDoesNotHoldTogetherIsInvalid) {
  const KvCache cache = MakeCache(3, 16);
  auto chunker = KvChunker::Create(&cache, 4096);
  ASSERT_TRUE(chunker.ok());
  chunker->HandOver(FakeExport(cache));
  auto header = [&](const std::function<void(hap::v1::KvHeader&)>& change) {
    hap::v1::KvHeader h = Header(*chunker);
    change(h);
    return h;
  };
  const std::vector<std::pair<const char*, std::function<void(hap::v1::KvHeader&)>>> broken = {
      {"n_chunks", [](hap::v1::KvHeader& h) { h.set_n_chunks(3); }},
      {"layers",
       [](hap::v1::KvHeader& h) { h.mutable_device_handover()->mutable_layers()->RemoveLast(); }},
      {"positions",
       [](hap::v1::KvHeader& h) {
         h.mutable_device_handover()->mutable_layers(1)->add_positions(199);
       }},
      {"blocks of",
       [](hap::v1::KvHeader& h) {
         h.mutable_device_handover()->mutable_layers(2)->set_capacity(5);
       }},
      {"not increasing",
       [](hap::v1::KvHeader& h) {
         h.mutable_device_handover()->mutable_layers(0)->set_positions(3, 0);
       }},
      {"no handle",
       [](hap::v1::KvHeader& h) { h.mutable_device_handover()->mutable_layers(0)->clear_v(); }},
  };
  for (const auto& [what, change] : broken) {
    const absl::Status s = KvAssembler(Expect(cache)).OnHeader(header(change));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
    EXPECT_NE(s.message().find(what), std::string::npos) << s;
  }
}

// A decode that cannot map a handover refuses it in a way the sender recognises (and then sends
// the rows): one without a device pool, one whose backend shares no memory.
TEST(KvCodecTest, ADecodeThatCannotMapRefusesTheHandover) {
  const KvCache cache = MakeCache(3, 16);
  auto chunker = KvChunker::Create(&cache, 4096);
  ASSERT_TRUE(chunker.ok());
  chunker->HandOver(FakeExport(cache));
  hap::v1::KvHeader h = Header(*chunker);
  EXPECT_EQ(h.n_chunks(), 0);
  hap::v1::KvChunk chunk;
  EXPECT_FALSE(chunker->Next(&chunk));  // no rows travel
  const absl::Status no_pool = KvAssembler(Expect(cache)).OnHeader(h);
  EXPECT_TRUE(IsKvHandoverRefusal(no_pool)) << no_pool;
  auto pool = KvBlockPool::Create(16, 16, DType::kF32, int64_t{4} << 20);
  ASSERT_TRUE(pool.ok());
  const absl::Status on_cpu = KvAssembler(Expect(cache), pool->get()).OnHeader(h);
  EXPECT_TRUE(IsKvHandoverRefusal(on_cpu)) << on_cpu;
  EXPECT_EQ((*pool)->stats().blocks_in_use, 0);
  EXPECT_FALSE(IsKvHandoverRefusal(absl::FailedPreconditionError("draining")));
  EXPECT_FALSE(IsKvHandoverRefusal(absl::InvalidArgumentError(kKvHandoverRefused)));
}

TEST(EmbedCodecTest, RoundTrip) {
  std::vector<float> embeds(37 * 48);
  for (size_t i = 0; i < embeds.size(); ++i) embeds[i] = 0.5f * i;
  auto chunks = ChunkEmbeddings(embeds, 48, 2048);
  ASSERT_TRUE(chunks.ok());
  EXPECT_GT(chunks->size(), 3u);
  hap::v1::EmbeddingHeader h;
  h.set_n_tokens(37);
  h.set_hidden(48);
  h.set_dtype(hap::v1::DTYPE_F32);
  h.set_n_chunks(static_cast<int>(chunks->size()));
  EmbeddingAssembler a(48, 64);
  ASSERT_TRUE(a.OnHeader(h).ok());
  for (const auto& c : *chunks) {
    EXPECT_LE(c.ByteSizeLong(), 2048u);
    ASSERT_TRUE(a.OnChunk(c).ok());
  }
  auto got = a.Finish();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, embeds);
}

}  // namespace
}  // namespace hap::svc
