// Fixed-size KV blocks for every sequence a process decodes. A block holds `block_rows` rows of
// one layer's keys and values (K then V, each [block_rows, kv_dim] of the pool's dtype, F32 or
// BF16). The capacity is a byte budget; memory is taken from the system in slabs as blocks are
// first used, so a large budget costs nothing until it fills. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"

namespace hap {

struct KvPoolStats {
  int64_t blocks_total = 0;   // the capacity in blocks
  int64_t blocks_in_use = 0;  // handed out and not yet freed
  int64_t blocks_peak = 0;    // highest blocks_in_use so far
  int64_t bytes_per_block = 0;
};

class KvBlockPool {
 public:
  // InvalidArgument for a zero-block budget or a dtype other than F32/BF16.
  static absl::StatusOr<std::unique_ptr<KvBlockPool>> Create(int block_rows, int kv_dim,
                                                             DType dtype, int64_t capacity_bytes);

  // n blocks at once, or ResourceExhausted (nothing taken) when fewer are free.
  absl::StatusOr<std::vector<int32_t>> Allocate(int n);
  void Free(const std::vector<int32_t>& blocks);

  // The block's K rows and V rows (valid until the block is freed).
  void* k(int32_t block);
  void* v(int32_t block);

  int block_rows() const { return block_rows_; }
  int kv_dim() const { return kv_dim_; }
  DType dtype() const { return dtype_; }
  KvPoolStats stats() const;

 private:
  KvBlockPool(int block_rows, int kv_dim, DType dtype, int64_t blocks);
  uint8_t* Block(int32_t block);

  const int block_rows_, kv_dim_;
  const DType dtype_;
  const int64_t block_bytes_, total_blocks_;
  static constexpr int64_t kSlabBlocks = 64;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<uint8_t[]>> slabs_;  // slab s holds blocks [s·64, s·64 + 64)
  std::vector<int32_t> free_;                      // freed blocks, reused first
  int64_t next_unused_ = 0;                        // blocks never handed out start here
  KvPoolStats stats_;
};

}  // namespace hap
