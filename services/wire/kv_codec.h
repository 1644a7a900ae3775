// The KV-cache transfer of the Decode stream (proto/hap/v1/decode.proto): KvChunker splits a
// compacted cache into messages under the size limit, its rows in the cache's dtype (F32 or
// BF16), reading each chunk's rows out of the cache (KvStore::ReadRows: from a device, one copy
// for K and one for V) just before it is encoded; KvAssembler checks every message on receipt
// (order, counts, sizes for the header's dtype, checksum, layer range, dtype) and rebuilds the
// cache.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "hap/v1/decode.pb.h"
#include "kernels/backend.h"
#include "runtime/engine/paged_kv.h"
#include "runtime/model/kv_cache.h"

namespace hap::svc {

// Bytes of one chunk message besides its rows, with room to spare (tags, lengths, ids).
inline constexpr int kChunkOverheadBytes = 512;

class KvChunker {
 public:
  // InvalidArgument when not even one row fits in max_message_bytes.
  // The cache (host, device or paged) must outlive the chunker and not change meanwhile. From a
  // cache in a device's memory the rows come through two page-locked staging buffers
  // (KvStore::ReadRowsAsync): when Next returns a chunk, the copy of the next one's rows is
  // already under way, so it overlaps the caller's send of this one.
  static absl::StatusOr<KvChunker> Create(const KvStore* cache, int max_message_bytes);
  ~KvChunker();
  KvChunker(KvChunker&&) = default;
  KvChunker& operator=(KvChunker&&) = default;

  // The cache goes as `exported`'s handles (KvHeader.device_handover) rather than its rows: no
  // chunk (n_chunks 0, Next returns false at once), the trailer's kv_bytes the bytes handed over.
  void HandOver(ExportedKv exported);

  int n_chunks() const { return n_chunks_; }
  int rows_per_chunk() const { return rows_per_chunk_; }
  // Sets n_layers, kv_dim, dtype, layer_rows, next_position and n_chunks (and the device
  // handover after HandOver); the caller adds the request id, model dims, first token, sampling
  // and stop parameters.
  void FillHeader(hap::v1::KvHeader* header) const;
  // The next chunk (layers in order, rows in order); false after the last one, or when its rows
  // could not be read (status() then says why, and Next stays false).
  bool Next(hap::v1::KvChunk* chunk);
  const absl::Status& status() const { return status_; }
  void FillTrailer(hap::v1::KvTrailer* trailer) const;

 private:
  // A chunk's rows: where they are in the cache, and with a device cache the staging buffers
  // its K and V are copied into.
  struct Slot {
    int index = 0, layer = 0, row = 0, n = 0;  // n = 0: past the last chunk
    std::vector<int32_t> positions;
    BackendBuffer k, v;
    bool issued = false;
  };
  KvChunker(const KvStore* cache, int rows_per_chunk);
  // The next chunk after the cursor into `slot` (false past the last one), the cursor moved on.
  bool TakeNext(Slot* slot);
  // The chunk's fields but its rows and checksum.
  void Describe(const Slot& slot, hap::v1::KvChunk* chunk) const;
  // Starts copying the next chunk's rows into staging slot `s` (nothing past the last).
  bool Issue(int s);
  // The staging buffers, taken at the first chunk from a device cache.
  absl::Status TakeStaging();
  // status_ = the failure to read chunk `index`'s rows, as INTERNAL; false.
  bool ReadFailed(int index, int layer, const absl::Status& why);

  const KvStore* cache_;
  absl::Status status_;
  int rows_per_chunk_;
  int n_chunks_ = 0;
  int layer_ = 0;  // the cursor: the next chunk starts at row_ of layer_
  int row_ = 0;
  int taken_ = 0;              // chunks the cursor has passed
  std::vector<Slot> staging_;  // two once a device cache's first chunk is read, else none
  std::optional<ExportedKv> handover_;
  int current_ = 0;
};

// How decode refuses a handover it cannot map (FAILED_PRECONDITION with this message start):
// prefill sends the rows instead.
inline constexpr char kKvHandoverRefused[] = "KV handover refused";
bool IsKvHandoverRefusal(const absl::Status& status);

// CRC-32C of a chunk's k, v and positions (little-endian int32), as KvChunk.crc32c.
uint32_t KvChunkChecksum(const hap::v1::KvChunk& chunk);

// What the receiving model requires of a cache.
struct KvExpectation {
  int n_layers = 0;
  int kv_dim = 0;
  int d_model = 0;
  int vocab_size = 0;
  int max_positions = 0;  // the model's context length
};

class KvAssembler {
 public:
  // With a pool, OnHeader reserves the sequence's blocks (its rows plus max_new_tokens per
  // layer) and the rows land in them as they arrive, converted to the pool's dtype
  // (PagedKv::AppendHostRows). When the pool lacks the blocks, the rows assemble into a host
  // cache of the header's dtype as without a pool, and the engine admits it once blocks free.
  // A header with a device handover takes its rows at once from the other process's device
  // memory into the pool's blocks (PagedKv::FromExported); where that cannot be done (no pool,
  // another device or dtype, no free blocks now, handles that do not map) the error is
  // FAILED_PRECONDITION starting kKvHandoverRefused, and the sender sends the rows instead.
  explicit KvAssembler(const KvExpectation& expect, KvBlockPool* pool = nullptr)
      : expect_(expect), pool_(pool) {}

  // Every error is InvalidArgument with what was wrong and where (a refused handover aside).
  absl::Status OnHeader(const hap::v1::KvHeader& header);
  absl::Status OnChunk(const hap::v1::KvChunk& chunk);
  absl::Status OnTrailer(const hap::v1::KvTrailer& trailer);

  bool has_header() const { return has_header_; }
  bool complete() const { return complete_; }
  const hap::v1::KvHeader& header() const { return header_; }
  int64_t expected_bytes() const { return expected_bytes_; }  // after OnHeader
  int64_t bytes_received() const { return bytes_received_; }
  int chunks_received() const { return chunks_received_; }
  // Whether the rows are landing in the pool's blocks (after OnHeader).
  bool in_blocks() const { return paged_ != nullptr; }
  // The cache, once OnTrailer succeeded: the blocks when in_blocks(), else the host cache.
  std::unique_ptr<PagedKv> TakePaged() { return std::move(paged_); }
  KvCache TakeCache() { return std::move(cache_); }

 private:
  // The header's device handover holds together (after the header's other checks).
  absl::Status CheckDeviceHandover(const hap::v1::KvHeader& header) const;
  // The handed-over rows into the pool's blocks (OnHeader, once header_ is set).
  absl::Status TakeHandover();

  KvExpectation expect_;
  hap::v1::KvHeader header_;
  bool has_header_ = false;
  bool complete_ = false;
  KvBlockPool* pool_ = nullptr;
  KvCache cache_;
  std::unique_ptr<PagedKv> paged_;
  std::vector<int> rows_received_;
  int layer_ = 0;
  int chunks_received_ = 0;
  int64_t bytes_received_ = 0;
  int64_t expected_bytes_ = 0;
  int64_t total_rows_ = 0;
};

}  // namespace hap::svc
