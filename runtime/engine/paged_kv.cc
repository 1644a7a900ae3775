#include "runtime/engine/paged_kv.h"

#include <cstring>

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
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    const LayerKv& src = cache.layers[l];
    HAP_RETURN_IF_ERROR(paged->Append(CpuBackend(), static_cast<int>(l), src.k.data(), src.v.data(),
                                      src.positions.data(), src.len()));
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
  if (backend.device() != Device::kCpu) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the KV block pool is in host memory; the ", std::string(backend.name()),
        " backend cannot append to it"));
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
  for (int r = 0; r < n; ++r, ++l.len) {
    const int b = l.len / block_rows, row = l.len % block_rows;
    const int64_t off = static_cast<int64_t>(row) * kv_dim * static_cast<int64_t>(elem);
    const float* kr = k + static_cast<int64_t>(r) * kv_dim;
    const float* vr = v + static_cast<int64_t>(r) * kv_dim;
    ConvertFromF32(dtype, kr, static_cast<uint8_t*>(l.k[b]) + off, kv_dim);
    ConvertFromF32(dtype, vr, static_cast<uint8_t*>(l.v[b]) + off, kv_dim);
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
