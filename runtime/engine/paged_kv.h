// A sequence's KV cache in blocks of a KvBlockPool. Each layer has its own block list; the
// layers of one HAP group have one length, so they hold the same number of blocks, and a pruned
// group holds fewer blocks than an unpruned one (an engine that sizes every layer like layer 0
// would hold the unpruned count everywhere). Every block the sequence can need — its rows now
// plus `reserve_rows` more per layer — is taken when it is created, so a running sequence never
// finds the pool empty; the blocks go back when it is destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/engine/kv_block_pool.h"
#include "runtime/model/kv_cache.h"

namespace hap {

class PagedKv final : public KvStore {
 public:
  // Blocks for ceil((len_l + reserve_rows) / block_rows) per layer l, then the cache's rows
  // (host memory, F32 or BF16) copied in as AppendHostRows converts them. ResourceExhausted
  // (nothing held) when the pool lacks the blocks; InvalidArgument when the cache's kv_dim is
  // not the pool's.
  static absl::StatusOr<std::unique_ptr<PagedKv>> FromCache(KvBlockPool* pool,
                                                           const KvCache& cache,
                                                           int reserve_rows);
  // The cache another process on the same device exported (DeviceKv::Export) copied into blocks
  // for its rows plus `reserve_rows` per layer: each layer's K and V mapped from that process's
  // memory, copied block by block within the device, then unmapped; no byte goes through the
  // host. FailedPrecondition when it was exported on another device (or the backend shares no
  // memory: the bytes must then travel); InvalidArgument for another dtype or kv_dim than the
  // pool's (the byte stream converts dtypes) or a layer with more rows than its blocks;
  // ResourceExhausted as FromCache; the backend's error when a handle cannot be mapped (the
  // exporter freed it). Nothing is held on an error.
  static absl::StatusOr<std::unique_ptr<PagedKv>> FromExported(KvBlockPool* pool,
                                                               const ExportedKv& exported,
                                                               int reserve_rows);
  // The blocks FromCache would take for `cache`.
  static int64_t BlocksFor(const KvBlockPool& pool, const KvCache& cache, int reserve_rows);
  // An empty cache holding blocks for layer_rows[l] + reserve_rows rows of each layer l, to be
  // filled with AppendHost as rows arrive (the KV transfer). ResourceExhausted, nothing held,
  // when the pool lacks them.
  static absl::StatusOr<std::unique_ptr<PagedKv>> Reserve(KvBlockPool* pool,
                                                         const std::vector<int>& layer_rows,
                                                         int reserve_rows);
  static int64_t BlocksFor(const KvBlockPool& pool, const std::vector<int>& layer_rows,
                           int reserve_rows);
  ~PagedKv() override;
  PagedKv(const PagedKv&) = delete;
  PagedKv& operator=(const PagedKv&) = delete;

  int n_layers() const override { return static_cast<int>(layers_.size()); }
  int len(int layer) const override { return layers_[layer].len; }
  // k and v in the memory of the pool's backend (the only backend accepted). FailedPrecondition
  // past the reserved rows.
  absl::Status Append(const Backend& backend, int layer, const float* k, const float* v,
                      const int32_t* positions, int n) override;
  // Append from host memory (rows that arrived over the network, a host cache): through a
  // staging copy when the pool is a device's.
  absl::Status AppendHost(int layer, const float* k, const float* v, const int32_t* positions,
                          int n);
  // AppendHost of rows of `dtype` (F32 or BF16, any alignment): F32 rows are rounded into a
  // BF16 pool, BF16 rows go into a BF16 pool as they are and are widened exactly into an F32
  // one. InvalidArgument for another dtype.
  absl::Status AppendHostRows(int layer, DType dtype, const void* k, const void* v,
                              const int32_t* positions, int n);
  // Rows of the pool's dtype in the pool backend's memory, copied into the blocks within it.
  absl::Status AppendBackendRows(int layer, const void* k, const void* v, const int32_t* positions,
                                 int n);
  // FailedPrecondition past the reserved rows.
  absl::StatusOr<KvRowSlot> AppendRowSlot(int layer, int32_t position) override;
  void Spans(int layer, std::vector<KvSpan>* spans) const override;
  int max_span_rows() const override { return pool_->block_rows(); }
  absl::Status RewritePositions(int layer, int row, const int32_t* positions, int n) override;
  DType dtype() const override { return pool_->dtype(); }
  Device device() const override { return pool_->backend().device(); }
  int64_t row_bytes() const override {
    return pool_->kv_dim() * static_cast<int64_t>(DTypeSize(pool_->dtype()));
  }
  // One copy for K and one for V per block the rows touch.
  absl::Status ReadRows(int layer, int row, int n, void* k, void* v,
                        int32_t* positions) const override;
  // FailedPrecondition unless the blocks taken at creation already hold the rows.
  absl::Status ReserveRows(int rows) override;

  int64_t blocks_held() const;
  int blocks(int layer) const { return static_cast<int>(layers_[layer].blocks.size()); }
  const std::vector<int32_t>& positions(int layer) const { return layers_[layer].positions; }

 private:
  struct Layer {
    std::vector<int32_t> blocks;
    std::vector<void*> k, v;  // each block's K and V rows
    std::vector<int32_t> positions;
    int len = 0;
  };
  explicit PagedKv(KvBlockPool* pool) : pool_(pool) {}
  // FailedPrecondition unless `layer`'s blocks have room for n more rows.
  absl::Status CheckRoom(int layer, int n) const;
  // n rows of the pool's dtype appended block by block, from host memory or the backend's.
  absl::Status CopyRowsIn(int layer, const void* k, const void* v, const int32_t* positions, int n,
                          bool from_host);

  KvBlockPool* pool_;
  std::vector<Layer> layers_;
  BackendArray<float> k_stage_, v_stage_;  // AppendHost's staging copies on a device pool
  std::vector<float> k_wide_, v_wide_;     // BF16 rows widened for an F32 pool
};

}  // namespace hap
