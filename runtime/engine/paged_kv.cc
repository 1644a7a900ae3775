#include "runtime/engine/paged_kv.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace hap {
namespace {

int BlocksForRows(int rows, int block_rows) { return (rows + block_rows - 1) / block_rows; }

}  // namespace

int64_t PagedKv::BlocksFor(const KvBlockPool& pool, const KvCache& cache, int reserve_rows) {
  int64_t n = 0;
  for (const LayerKv& l : cache.layers) n += BlocksForRows(l.len() + reserve_rows, pool.block_rows());
  return n;
}

absl::StatusOr<std::unique_ptr<PagedKv>> PagedKv::FromCache(KvBlockPool* pool,
                                                           const KvCache& cache,
                                                           int reserve_rows) {
  if (cache.kv_dim != pool->kv_dim()) {
    return absl::InvalidArgumentError(absl::StrCat("a cache of kv_dim ", cache.kv_dim,
                                                   " for a pool of kv_dim ", pool->kv_dim()));
  }
  std::unique_ptr<PagedKv> paged(new PagedKv(pool));
  HAP_ASSIGN_OR_RETURN(std::vector<int32_t> blocks,
                       pool->Allocate(static_cast<int>(BlocksFor(*pool, cache, reserve_rows))));
  paged->layers_.resize(cache.layers.size());
  size_t next = 0;
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    Layer& layer = paged->layers_[l];
    const int n = BlocksForRows(cache.layers[l].len() + reserve_rows, pool->block_rows());
    for (int b = 0; b < n; ++b) {
      const int32_t id = blocks[next++];
      layer.blocks.push_back(id);
      layer.k.push_back(pool->k(id));
      layer.v.push_back(pool->v(id));
    }
  }
  paged->next_position = cache.next_position;
  // The host cache's rows go to the pool's memory: in place on the CPU backend, through a
  // staging copy in a device's memory.
  const Backend& backend = pool->backend();
  const bool host_pool = backend.device() == Device::kCpu;
  BackendArray<float> k_stage(backend), v_stage(backend);
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    const LayerKv& src = cache.layers[l];
    const float* k = src.k.data();
    const float* v = src.v.data();
    if (!host_pool) {
      HAP_RETURN_IF_ERROR(k_stage.Assign(src.k.data(), src.k.size()));
      HAP_RETURN_IF_ERROR(v_stage.Assign(src.v.data(), src.v.size()));
      k = k_stage.data();
      v = v_stage.data();
    }
    HAP_RETURN_IF_ERROR(
        paged->Append(backend, static_cast<int>(l), k, v, src.positions.data(), src.len()));
  }
  return paged;
}

PagedKv::~PagedKv() {
  std::vector<int32_t> all;
  for (const Layer& l : layers_) all.insert(all.end(), l.blocks.begin(), l.blocks.end());
  pool_->Free(all);
}

absl::Status PagedKv::Append(const Backend& backend, int layer, const float* k, const float* v,
                             const int32_t* positions, int n) {
  if (&backend != &pool_->backend()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rows from the ", std::string(backend.name()), " backend cannot enter a KV pool held by ",
        "the ", std::string(pool_->backend().name()), " backend"));
  }
  Layer& l = layers_[layer];
  const int block_rows = pool_->block_rows();
  const int kv_dim = pool_->kv_dim();
  if (l.len + n > static_cast<int>(l.blocks.size()) * block_rows) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", layer, ": ", l.len, " + ", n, " rows exceed the ", l.blocks.size() * block_rows,
        " reserved"));
  }
  const DType dtype = pool_->dtype();
  const size_t elem = DTypeSize(dtype);
  // One conversion per run of rows that land in the same block.
  for (int r = 0; r < n;) {
    const int b = l.len / block_rows, row = l.len % block_rows;
    const int rows = std::min(n - r, block_rows - row);
    const int64_t off = static_cast<int64_t>(row) * kv_dim * static_cast<int64_t>(elem);
    const int64_t values = static_cast<int64_t>(rows) * kv_dim;
    const int64_t first = static_cast<int64_t>(r) * kv_dim;
    HAP_RETURN_IF_ERROR(
        backend.StoreF32As(dtype, k + first, static_cast<uint8_t*>(l.k[b]) + off, values));
    HAP_RETURN_IF_ERROR(
        backend.StoreF32As(dtype, v + first, static_cast<uint8_t*>(l.v[b]) + off, values));
    r += rows;
    l.len += rows;
  }
  l.positions.insert(l.positions.end(), positions, positions + n);
  return absl::OkStatus();
}

void PagedKv::Spans(int layer, std::vector<KvSpan>* spans) const {
  const Layer& l = layers_[layer];
  const int block_rows = pool_->block_rows();
  spans->clear();
  for (int b = 0, left = l.len; left > 0; ++b, left -= block_rows) {
    spans->push_back(KvSpan{l.k[b], l.v[b], std::min(left, block_rows)});
  }
}

int64_t PagedKv::blocks_held() const {
  int64_t n = 0;
  for (const Layer& l : layers_) n += static_cast<int64_t>(l.blocks.size());
  return n;
}

}  // namespace hap
