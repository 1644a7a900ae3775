#include "runtime/engine/paged_kv.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace hap {
namespace {

int BlocksForRows(int rows, int block_rows) { return (rows + block_rows - 1) / block_rows; }

std::vector<int> LayerRows(const KvCache& cache) {
  std::vector<int> rows;
  for (const LayerKv& l : cache.layers) rows.push_back(l.len());
  return rows;
}

}  // namespace

int64_t PagedKv::BlocksFor(const KvBlockPool& pool, const std::vector<int>& layer_rows,
                           int reserve_rows) {
  int64_t n = 0;
  for (int rows : layer_rows) n += BlocksForRows(rows + reserve_rows, pool.block_rows());
  return n;
}

int64_t PagedKv::BlocksFor(const KvBlockPool& pool, const KvCache& cache, int reserve_rows) {
  return BlocksFor(pool, LayerRows(cache), reserve_rows);
}

absl::StatusOr<std::unique_ptr<PagedKv>> PagedKv::Reserve(KvBlockPool* pool,
                                                         const std::vector<int>& layer_rows,
                                                         int reserve_rows) {
  std::unique_ptr<PagedKv> paged(new PagedKv(pool));
  HAP_ASSIGN_OR_RETURN(std::vector<int32_t> blocks,
                       pool->Allocate(static_cast<int>(BlocksFor(*pool, layer_rows, reserve_rows))));
  paged->layers_.resize(layer_rows.size());
  size_t next = 0;
  for (size_t l = 0; l < layer_rows.size(); ++l) {
    Layer& layer = paged->layers_[l];
    const int n = BlocksForRows(layer_rows[l] + reserve_rows, pool->block_rows());
    for (int b = 0; b < n; ++b) {
      const int32_t id = blocks[next++];
      layer.blocks.push_back(id);
      layer.k.push_back(pool->k(id));
      layer.v.push_back(pool->v(id));
    }
  }
  return paged;
}

absl::StatusOr<std::unique_ptr<PagedKv>> PagedKv::FromCache(KvBlockPool* pool,
                                                           const KvCache& cache,
                                                           int reserve_rows) {
  if (cache.kv_dim != pool->kv_dim()) {
    return absl::InvalidArgumentError(absl::StrCat("a cache of kv_dim ", cache.kv_dim,
                                                   " for a pool of kv_dim ", pool->kv_dim()));
  }
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<PagedKv> paged,
                       Reserve(pool, LayerRows(cache), reserve_rows));
  paged->next_position = cache.next_position;
  paged->rope_delta = cache.rope_delta;
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    const int layer = static_cast<int>(l);
    HAP_RETURN_IF_ERROR(
        paged->AppendHostRows(layer, cache.dtype(), cache.k_bytes(layer), cache.v_bytes(layer),
                              cache.layers[l].positions.data(), cache.layers[l].len()));
  }
  return paged;
}

absl::Status PagedKv::AppendHostRows(int layer, DType dtype, const void* k, const void* v,
                                     const int32_t* positions, int n) {
  if (dtype == DType::kF32) {
    if (reinterpret_cast<uintptr_t>(k) % alignof(float) == 0 &&
        reinterpret_cast<uintptr_t>(v) % alignof(float) == 0) {
      return AppendHost(layer, static_cast<const float*>(k), static_cast<const float*>(v),
                        positions, n);
    }
  } else if (dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV rows of ", std::string(DTypeName(dtype)), " (F32 or BF16 are accepted)"));
  }
  const size_t values = static_cast<size_t>(n) * pool_->kv_dim();
  if (dtype != pool_->dtype()) {
    // BF16 rows widened exactly for an F32 pool (or unaligned F32 rows for a BF16 pool).
    k_wide_.resize(values);
    v_wide_.resize(values);
    ConvertToF32(dtype, k, k_wide_.data(), values);
    ConvertToF32(dtype, v, v_wide_.data(), values);
    return AppendHost(layer, k_wide_.data(), v_wide_.data(), positions, n);
  }
  // Rows of the pool's dtype: copied into the blocks as they are.
  return CopyRowsIn(layer, k, v, positions, n, /*from_host=*/true);
}

absl::Status PagedKv::AppendBackendRows(int layer, const void* k, const void* v,
                                        const int32_t* positions, int n) {
  return CopyRowsIn(layer, k, v, positions, n, /*from_host=*/false);
}

absl::Status PagedKv::CopyRowsIn(int layer, const void* k, const void* v, const int32_t* positions,
                                 int n, bool from_host) {
  Layer& l = layers_[layer];
  const int block_rows = pool_->block_rows();
  HAP_RETURN_IF_ERROR(CheckRoom(layer, n));
  const Backend& backend = pool_->backend();
  const size_t bytes_per_row = static_cast<size_t>(row_bytes());
  const auto* src_k = static_cast<const uint8_t*>(k);
  const auto* src_v = static_cast<const uint8_t*>(v);
  auto copy = [&](void* dst, const uint8_t* src, size_t bytes) {
    return from_host ? backend.CopyToBackend(dst, src, bytes) : backend.Copy(dst, src, bytes);
  };
  for (int r = 0; r < n;) {
    const int b = l.len / block_rows, row = l.len % block_rows;
    const int rows = std::min(n - r, block_rows - row);
    const size_t off = static_cast<size_t>(row) * bytes_per_row, first = r * bytes_per_row;
    HAP_RETURN_IF_ERROR(
        copy(static_cast<uint8_t*>(l.k[b]) + off, src_k + first, rows * bytes_per_row));
    HAP_RETURN_IF_ERROR(
        copy(static_cast<uint8_t*>(l.v[b]) + off, src_v + first, rows * bytes_per_row));
    r += rows;
    l.len += rows;
    pool_->CountRows(rows);
  }
  l.positions.insert(l.positions.end(), positions, positions + n);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PagedKv>> PagedKv::FromExported(KvBlockPool* pool,
                                                               const ExportedKv& exported,
                                                               int reserve_rows) {
  const Backend& backend = pool->backend();
  HAP_ASSIGN_OR_RETURN(const std::string device, backend.DeviceIdentity());
  if (exported.device != device) {
    return absl::FailedPreconditionError(absl::StrCat("a KV cache exported on another device (",
                                                      exported.device,
                                                      "; this process computes on ", device, ")"));
  }
  if (exported.dtype != pool->dtype() || exported.kv_dim != pool->kv_dim()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("an exported KV cache of %s rows of %d values for a pool of %s rows of %d",
                        std::string(DTypeName(exported.dtype)), exported.kv_dim,
                        std::string(DTypeName(pool->dtype())), pool->kv_dim()));
  }
  std::vector<int> layer_rows;
  for (size_t l = 0; l < exported.layers.size(); ++l) {
    const ExportedKv::Layer& layer = exported.layers[l];
    const int rows = static_cast<int>(layer.positions.size());
    if (rows > layer.capacity) {
      return absl::InvalidArgumentError(
          absl::StrFormat("exported layer %d: %d rows in blocks of %d", l, rows, layer.capacity));
    }
    layer_rows.push_back(rows);
  }
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<PagedKv> paged, Reserve(pool, layer_rows, reserve_rows));
  const size_t bytes_per_row = static_cast<size_t>(paged->row_bytes());
  for (size_t l = 0; l < exported.layers.size(); ++l) {
    const ExportedKv::Layer& layer = exported.layers[l];
    const size_t bytes = bytes_per_row * layer.capacity;
    // Each mapping ends once the copies that read it are done, on an error too.
    std::vector<void*> mapped;
    absl::Status s = [&]() -> absl::Status {
      HAP_ASSIGN_OR_RETURN(void* k, backend.ImportMemory(layer.k, bytes));
      mapped.push_back(k);
      HAP_ASSIGN_OR_RETURN(void* v, backend.ImportMemory(layer.v, bytes));
      mapped.push_back(v);
      return paged->AppendBackendRows(static_cast<int>(l), k, v, layer.positions.data(),
                                      layer_rows[l]);
    }();
    const absl::Status done = backend.Synchronize();
    for (void* p : mapped) {
      const absl::Status closed = backend.CloseImported(p);
      if (s.ok()) s = closed;
    }
    if (s.ok()) s = done;
    if (!s.ok())
      return absl::Status(s.code(), absl::StrFormat("exported layer %d: %s", l, s.message()));
  }
  return paged;
}

absl::Status PagedKv::AppendHost(int layer, const float* k, const float* v,
                                 const int32_t* positions, int n) {
  const Backend& backend = pool_->backend();
  if (backend.caps().host_memory) return Append(backend, layer, k, v, positions, n);
  const size_t values = static_cast<size_t>(n) * pool_->kv_dim();
  k_stage_.Rebind(backend);
  v_stage_.Rebind(backend);
  HAP_RETURN_IF_ERROR(k_stage_.Assign(k, values));
  HAP_RETURN_IF_ERROR(v_stage_.Assign(v, values));
  return Append(backend, layer, k_stage_.data(), v_stage_.data(), positions, n);
}

absl::Status PagedKv::CheckRoom(int layer, int n) const {
  const Layer& l = layers_[layer];
  const int64_t room = static_cast<int64_t>(l.blocks.size()) * pool_->block_rows();
  if (l.len + int64_t{n} <= room) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("layer ", layer, ": ", l.len, " + ", n, " rows exceed the ", room, " reserved"));
}

PagedKv::~PagedKv() {
  std::vector<int32_t> all;
  int64_t rows = 0;
  for (const Layer& l : layers_) {
    all.insert(all.end(), l.blocks.begin(), l.blocks.end());
    rows += l.len;
  }
  pool_->CountRows(-rows);
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
  HAP_RETURN_IF_ERROR(CheckRoom(layer, n));
  const DType dtype = pool_->dtype();
  const size_t elem = DTypeSize(dtype);
  // One conversion per run of rows that land in the same block.
  for (int r = 0; r < n;) {
    const int b = l.len / block_rows, row = l.len % block_rows;
    const int rows = std::min(n - r, block_rows - row);
    const int64_t off = static_cast<int64_t>(row) * kv_dim * static_cast<int64_t>(elem);
    const int64_t values = static_cast<int64_t>(rows) * kv_dim;
    const int64_t first = static_cast<int64_t>(r) * kv_dim;
    HAP_RETURN_IF_ERROR(backend.StoreF32PairAs(dtype, k + first,
                                               static_cast<uint8_t*>(l.k[b]) + off, v + first,
                                               static_cast<uint8_t*>(l.v[b]) + off, values));
    r += rows;
    l.len += rows;
    pool_->CountRows(rows);
  }
  l.positions.insert(l.positions.end(), positions, positions + n);
  return absl::OkStatus();
}

absl::StatusOr<KvRowSlot> PagedKv::AppendRowSlot(int layer, int32_t position) {
  Layer& l = layers_[layer];
  const int block_rows = pool_->block_rows();
  HAP_RETURN_IF_ERROR(CheckRoom(layer, 1));
  const int b = l.len / block_rows;
  const size_t offset = static_cast<size_t>(l.len % block_rows) * row_bytes();
  ++l.len;
  pool_->CountRows(1);
  l.positions.push_back(position);
  return KvRowSlot{static_cast<uint8_t*>(l.k[b]) + offset, static_cast<uint8_t*>(l.v[b]) + offset};
}

void PagedKv::Spans(int layer, std::vector<KvSpan>* spans) const {
  const Layer& l = layers_[layer];
  const int block_rows = pool_->block_rows();
  spans->clear();
  for (int b = 0, left = l.len; left > 0; ++b, left -= block_rows) {
    spans->push_back(KvSpan{l.k[b], l.v[b], std::min(left, block_rows)});
  }
}

absl::Status PagedKv::ReadRows(int layer, int row, int n, void* k, void* v,
                               int32_t* positions) const {
  HAP_RETURN_IF_ERROR(CheckRows(layer, row, n));
  const Layer& l = layers_[layer];
  const Backend& backend = pool_->backend();
  const int block_rows = pool_->block_rows();
  const size_t bytes = static_cast<size_t>(row_bytes());
  for (int r = row; r < row + n;) {
    const int b = r / block_rows, in_block = r % block_rows;
    const int take = std::min(row + n - r, block_rows - in_block);
    const size_t out = bytes * (r - row), from = bytes * in_block;
    HAP_RETURN_IF_ERROR(backend.CopyToHost(static_cast<char*>(k) + out,
                                           static_cast<const char*>(l.k[b]) + from, bytes * take));
    HAP_RETURN_IF_ERROR(backend.CopyToHost(static_cast<char*>(v) + out,
                                           static_cast<const char*>(l.v[b]) + from, bytes * take));
    r += take;
  }
  std::memcpy(positions, l.positions.data() + row, sizeof(int32_t) * n);
  return absl::OkStatus();
}

absl::Status PagedKv::RewritePositions(int layer, int row, const int32_t* positions, int n) {
  HAP_RETURN_IF_ERROR(CheckRows(layer, row, n));
  std::copy(positions, positions + n, layers_[layer].positions.begin() + row);
  return absl::OkStatus();
}

absl::Status PagedKv::ReserveRows(int rows) {
  for (int l = 0; l < n_layers(); ++l) {
    const int64_t room = int64_t{blocks(l)} * pool_->block_rows();
    if (len(l) + int64_t{std::max(rows, 0)} > room) {
      return absl::FailedPreconditionError(
          absl::StrCat("layer ", l, ": ", len(l), " + ", rows, " rows exceed the ", room,
                       " its blocks hold"));
    }
  }
  return absl::OkStatus();
}

int64_t PagedKv::blocks_held() const {
  int64_t n = 0;
  for (const Layer& l : layers_) n += static_cast<int64_t>(l.blocks.size());
  return n;
}

}  // namespace hap
