#include "runtime/model/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace hap {

int64_t KvCache::total_rows() const {
  int64_t rows = 0;
  for (const LayerKv& l : layers) rows += l.len();
  return rows;
}

int64_t KvCache::bytes() const {
  return total_rows() * kv_dim * 2 * static_cast<int64_t>(sizeof(float));
}

void KvCache::Clear() {
  layers.clear();
  next_position = 0;
}

absl::Status KvCache::Append(const Backend& backend, int layer, const float* k, const float* v,
                             const int32_t* positions, int n) {
  LayerKv& l = layers[layer];
  const size_t old = l.k.size();
  const size_t values = static_cast<size_t>(n) * kv_dim;
  l.k.resize(old + values);
  l.v.resize(old + values);
  HAP_RETURN_IF_ERROR(backend.CopyToHost(l.k.data() + old, k, values * sizeof(float)));
  HAP_RETURN_IF_ERROR(backend.CopyToHost(l.v.data() + old, v, values * sizeof(float)));
  l.positions.insert(l.positions.end(), positions, positions + n);
  return absl::OkStatus();
}

void KvCache::Spans(int layer, std::vector<KvSpan>* spans) const {
  const LayerKv& l = layers[layer];
  spans->assign(1, KvSpan{l.k.data(), l.v.data(), l.len()});
}


absl::StatusOr<std::unique_ptr<DeviceKv>> DeviceKv::FromCache(const Backend& backend,
                                                            const KvCache& cache,
                                                            int reserve_rows) {
  std::unique_ptr<DeviceKv> kv(new DeviceKv());
  kv->kv_dim_ = cache.kv_dim;
  kv->device_ = backend.device();
  kv->next_position = cache.next_position;
  kv->layers_.resize(cache.layers.size());
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    const LayerKv& src = cache.layers[l];
    Layer& dst = kv->layers_[l];
    dst.capacity = src.len() + std::max(reserve_rows, 0);
    const size_t bytes = sizeof(float) * static_cast<size_t>(dst.capacity) * cache.kv_dim;
    HAP_ASSIGN_OR_RETURN(dst.k, BackendBuffer::Allocate(backend, bytes));
    HAP_ASSIGN_OR_RETURN(dst.v, BackendBuffer::Allocate(backend, bytes));
    const size_t used = sizeof(float) * src.k.size();
    HAP_RETURN_IF_ERROR(backend.CopyToBackend(dst.k.data(), src.k.data(), used));
    HAP_RETURN_IF_ERROR(backend.CopyToBackend(dst.v.data(), src.v.data(), used));
    dst.len = src.len();
  }
  return kv;
}

absl::Status DeviceKv::Append(const Backend& backend, int layer, const float* k, const float* v,
                              const int32_t* positions, int n) {
  Layer& l = layers_[layer];
  if (l.len + n > l.capacity) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "layer %d: %d + %d rows exceed the %d reserved", layer, l.len, n, l.capacity));
  }
  const size_t offset = sizeof(float) * static_cast<size_t>(l.len) * kv_dim_;
  const size_t bytes = sizeof(float) * static_cast<size_t>(n) * kv_dim_;
  HAP_RETURN_IF_ERROR(backend.Copy(static_cast<char*>(l.k.data()) + offset, k, bytes));
  HAP_RETURN_IF_ERROR(backend.Copy(static_cast<char*>(l.v.data()) + offset, v, bytes));
  l.len += n;
  return absl::OkStatus();
}

void DeviceKv::Spans(int layer, std::vector<KvSpan>* spans) const {
  const Layer& l = layers_[layer];
  spans->assign(1, KvSpan{l.k.data(), l.v.data(), l.len});
}

}  // namespace hap
