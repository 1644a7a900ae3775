#include "runtime/engine/kv_block_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/model/kv_cache.h"

namespace hap {
namespace {

// K then V, each [block_rows, kv_dim] of dtype.
int64_t BlockBytes(int block_rows, int kv_dim, DType dtype) {
  return int64_t{2} * block_rows * kv_dim * static_cast<int64_t>(DTypeSize(dtype));
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvBlockPool>> KvBlockPool::Create(int block_rows, int kv_dim,
                                                                 DType dtype,
                                                                 int64_t capacity_bytes,
                                                                 const Backend* backend) {
  HAP_RETURN_IF_ERROR(CheckKvDType(dtype));
  if (block_rows <= 0 || kv_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV blocks of ", block_rows, " rows of ", kv_dim, " values"));
  }
  const int64_t block_bytes = BlockBytes(block_rows, kv_dim, dtype);
  const int64_t blocks = capacity_bytes / block_bytes;
  if (blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a KV pool of ", capacity_bytes,
                                                   " bytes holds no block of ", block_bytes,
                                                   " bytes (", block_rows, " rows)"));
  }
  return std::unique_ptr<KvBlockPool>(new KvBlockPool(
      block_rows, kv_dim, dtype, blocks, backend != nullptr ? *backend : CpuBackend()));
}

KvBlockPool::KvBlockPool(int block_rows, int kv_dim, DType dtype, int64_t blocks,
                         const Backend& backend)
    : block_rows_(block_rows),
      kv_dim_(kv_dim),
      dtype_(dtype),
      backend_(backend),
      block_bytes_(BlockBytes(block_rows, kv_dim, dtype)),
      total_blocks_(blocks) {
  stats_.blocks_total = blocks;
  stats_.bytes_per_block = block_bytes_;
}

absl::StatusOr<std::vector<int32_t>> KvBlockPool::Allocate(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t available = total_blocks_ - stats_.blocks_in_use;
  if (n > available) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the KV pool has ", available, " free blocks of ", total_blocks_,
                     "; this sequence needs ", n, " (", block_rows_, " rows each)"));
  }
  // New slabs first, so that a backend out of memory leaves nothing taken.
  const int64_t from_free = std::min<int64_t>(n, static_cast<int64_t>(free_.size()));
  const int64_t fresh_end = next_unused_ + (n - from_free);
  while (static_cast<int64_t>(slabs_.size()) * kSlabBlocks < fresh_end) {
    const int64_t first = static_cast<int64_t>(slabs_.size()) * kSlabBlocks;
    const int64_t in_slab = std::min(kSlabBlocks, total_blocks_ - first);
    absl::StatusOr<BackendBuffer> slab =
        BackendBuffer::Allocate(backend_, static_cast<size_t>(in_slab * block_bytes_));
    if (!slab.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the KV pool cannot grow by ", in_slab, " blocks: ", slab.status().message()));
    }
    slabs_.push_back(std::move(*slab));
  }
  std::vector<int32_t> out;
  out.reserve(n);
  for (int64_t i = 0; i < from_free; ++i) {
    out.push_back(free_.back());
    free_.pop_back();
  }
  while (static_cast<int>(out.size()) < n) out.push_back(static_cast<int32_t>(next_unused_++));
  stats_.blocks_in_use += n;
  stats_.blocks_peak = std::max(stats_.blocks_peak, stats_.blocks_in_use);
  return out;
}

void KvBlockPool::Free(const std::vector<int32_t>& blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.insert(free_.end(), blocks.begin(), blocks.end());
  stats_.blocks_in_use -= static_cast<int64_t>(blocks.size());
}

uint8_t* KvBlockPool::Block(int32_t block) {
  // Slabs are only appended, under mu_, before the block is handed out; the pointer stays valid.
  std::lock_guard<std::mutex> lock(mu_);
  return slabs_[block / kSlabBlocks].as<uint8_t>() + (block % kSlabBlocks) * block_bytes_;
}

void* KvBlockPool::k(int32_t block) { return Block(block); }
void* KvBlockPool::v(int32_t block) { return Block(block) + block_bytes_ / 2; }

KvPoolStats KvBlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvPoolStats s = stats_;
  s.rows_in_use = rows_in_use_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace hap
