// Fixed-size KV blocks for every sequence a process decodes. A block holds `block_rows` rows of
// one layer's keys and values (K then V, each [block_rows, kv_dim] of the pool's dtype, F32 or
// BF16), in the memory of the pool's backend (host memory for the CPU backend, device memory
// for a GPU). The capacity is a byte budget; memory is taken from the backend in slabs as
// blocks are first used, so a large budget costs nothing until it fills. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "kernels/backend.h"

namespace hap {

struct KvPoolStats {
  int64_t blocks_total = 0;   // the capacity in blocks
  int64_t blocks_in_use = 0;  // handed out and not yet freed
  int64_t blocks_peak = 0;    // highest blocks_in_use so far
  int64_t bytes_per_block = 0;
  // Rows the sequences hold in their blocks (PagedKv counts them): the blocks in use have
  // blocks_in_use · block_rows slots, and the ones without a row are room reserved for answers
  // still to come and the unfilled ends of last blocks.
  int64_t rows_in_use = 0;
};

class KvBlockPool {
 public:
  // InvalidArgument for a zero-block budget or a dtype other than F32/BF16. `backend` (null =
  // the CPU's) holds the blocks and must outlive the pool.
  static absl::StatusOr<std::unique_ptr<KvBlockPool>> Create(int block_rows, int kv_dim,
                                                             DType dtype, int64_t capacity_bytes,
                                                             const Backend* backend = nullptr);

  // n blocks at once, or ResourceExhausted (nothing taken) when fewer are free or the backend
  // has no memory for a new slab.
  absl::StatusOr<std::vector<int32_t>> Allocate(int n);
  void Free(const std::vector<int32_t>& blocks);
  // The rows its sequences hold grew (or, negative, shrank) by `rows` (PagedKv calls it).
  void CountRows(int64_t rows) { rows_in_use_.fetch_add(rows, std::memory_order_relaxed); }

  // The block's K rows and V rows (valid until the block is freed).
  void* k(int32_t block);
  void* v(int32_t block);

  int block_rows() const { return block_rows_; }
  int kv_dim() const { return kv_dim_; }
  DType dtype() const { return dtype_; }
  const Backend& backend() const { return backend_; }
  KvPoolStats stats() const;

 private:
  KvBlockPool(int block_rows, int kv_dim, DType dtype, int64_t blocks, const Backend& backend);
  uint8_t* Block(int32_t block);

  const int block_rows_, kv_dim_;
  const DType dtype_;
  const Backend& backend_;
  const int64_t block_bytes_, total_blocks_;
  static constexpr int64_t kSlabBlocks = 64;
  mutable std::mutex mu_;
  std::vector<BackendBuffer> slabs_;  // slab s holds blocks [s·64, s·64 + 64)
  std::vector<int32_t> free_;                      // freed blocks, reused first
  int64_t next_unused_ = 0;                        // blocks never handed out start here
  KvPoolStats stats_;
  std::atomic<int64_t> rows_in_use_{0};
};

}  // namespace hap
