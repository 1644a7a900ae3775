// The KV transfer codec on its own: CRC-32C, chunks under the message limit that reassemble
// into the identical cache, and the receiver's checks on headers and chunks.
#include "services/common/kv_codec.h"

#include <cstring>

#include "gtest/gtest.h"
#include "runtime/engine/kv_block_pool.h"
#include "runtime/engine/paged_kv.h"
#include "services/common/crc32c.h"
#include "services/common/embed_codec.h"

namespace hap::svc {
namespace {

KvCache MakeCache(int layers, int kv_dim) {
  KvCache c;
  c.kv_dim = kv_dim;
  c.next_position = 200;
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

TEST(KvCodecTest, RejectsWhatDoesNotFit) {
  const KvCache cache = MakeCache(2, 16);
  EXPECT_FALSE(KvChunker::Create(&cache, 600).ok());  // not one row fits
  auto chunker = KvChunker::Create(&cache, 4096);
  ASSERT_TRUE(chunker.ok());
  KvExpectation wrong = Expect(cache);
  wrong.kv_dim = 8;
  EXPECT_EQ(KvAssembler(wrong).OnHeader(Header(*chunker)).code(),
            absl::StatusCode::kInvalidArgument);
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
