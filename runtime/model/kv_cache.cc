#include "runtime/model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace hap {

int64_t KvCache::total_rows() const {
  int64_t rows = 0;
  for (const LayerKv& l : layers) rows += l.len();
  return rows;
}

absl::Status KvCache::SetDType(DType dtype) {
  const std::string name(DTypeName(dtype));
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV cache of ", name, " rows: the KV dtype must be F32 or BF16"));
  }
  if (dtype != dtype_ && total_rows() > 0) {
    return absl::FailedPreconditionError(absl::StrCat("a KV cache holding ", total_rows(), " ",
                                                      std::string(DTypeName(dtype_)),
                                                      " rows cannot become ", name));
  }
  dtype_ = dtype;
  return absl::OkStatus();
}

int64_t KvCache::bytes() const { return total_rows() * 2 * row_bytes(); }

void KvCache::Clear() {
  layers.clear();
  next_position = 0;
}

const uint8_t* KvCache::k_bytes(int layer) const {
  const LayerKv& l = layers[layer];
  return dtype_ == DType::kBF16 ? reinterpret_cast<const uint8_t*>(l.k_bf16.data())
                                : reinterpret_cast<const uint8_t*>(l.k.data());
}

const uint8_t* KvCache::v_bytes(int layer) const {
  const LayerKv& l = layers[layer];
  return dtype_ == DType::kBF16 ? reinterpret_cast<const uint8_t*>(l.v_bf16.data())
                                : reinterpret_cast<const uint8_t*>(l.v.data());
}

namespace {

// Grows k and v by `values` elements (room for `reserve` in all first) and returns where the
// new ones start.
template <typename T>
std::pair<T*, T*> Grow(std::vector<T>* k, std::vector<T>* v, size_t values, size_t reserve) {
  const size_t old = k->size();
  if (reserve > k->capacity()) {
    k->reserve(reserve);
    v->reserve(reserve);
  }
  k->resize(old + values);
  v->resize(old + values);
  return {k->data() + old, v->data() + old};
}

}  // namespace

void KvCache::ReserveRows(int rows) {
  for (LayerKv& l : layers) {
    const size_t want = static_cast<size_t>(l.len() + std::max(rows, 0));
    if (dtype_ == DType::kBF16) {
      l.k_bf16.reserve(want * kv_dim);
      l.v_bf16.reserve(want * kv_dim);
    } else {
      l.k.reserve(want * kv_dim);
      l.v.reserve(want * kv_dim);
    }
    l.positions.reserve(want);
  }
}

void KvCache::AppendHostRows(int layer, const void* k, const void* v, const int32_t* positions,
                             int n, int reserve_rows) {
  LayerKv& l = layers[layer];
  const size_t values = static_cast<size_t>(n) * kv_dim;
  const size_t reserve = static_cast<size_t>(std::max(reserve_rows, 0)) * kv_dim;
  if (dtype_ == DType::kBF16) {
    auto [dk, dv] = Grow(&l.k_bf16, &l.v_bf16, values, reserve);
    std::memcpy(dk, k, values * sizeof(uint16_t));
    std::memcpy(dv, v, values * sizeof(uint16_t));
  } else {
    auto [dk, dv] = Grow(&l.k, &l.v, values, reserve);
    std::memcpy(dk, k, values * sizeof(float));
    std::memcpy(dv, v, values * sizeof(float));
  }
  if (l.positions.capacity() < static_cast<size_t>(reserve_rows)) {
    l.positions.reserve(reserve_rows);
  }
  l.positions.insert(l.positions.end(), positions, positions + n);
}

absl::Status KvCache::Append(const Backend& backend, int layer, const float* k, const float* v,
                             const int32_t* positions, int n) {
  LayerKv& l = layers[layer];
  const size_t values = static_cast<size_t>(n) * kv_dim;
  if (dtype_ == DType::kBF16) {
    auto [dk, dv] = Grow(&l.k_bf16, &l.v_bf16, values, 0);
    if (backend.device() == Device::kCpu) {
      HAP_RETURN_IF_ERROR(backend.StoreF32As(DType::kBF16, k, dk, static_cast<int64_t>(values)));
      HAP_RETURN_IF_ERROR(backend.StoreF32As(DType::kBF16, v, dv, static_cast<int64_t>(values)));
    } else {
      // Out of a device: the F32 rows come to the host and are rounded here (the same rounding,
      // tests/kernels/backend_test.cc), so the copies stay one per K and V.
      std::vector<float> host(values);
      HAP_RETURN_IF_ERROR(backend.CopyToHost(host.data(), k, values * sizeof(float)));
      ConvertFromF32(DType::kBF16, host.data(), dk, values);
      HAP_RETURN_IF_ERROR(backend.CopyToHost(host.data(), v, values * sizeof(float)));
      ConvertFromF32(DType::kBF16, host.data(), dv, values);
    }
  } else {
    auto [dk, dv] = Grow(&l.k, &l.v, values, 0);
    HAP_RETURN_IF_ERROR(backend.CopyToHost(dk, k, values * sizeof(float)));
    HAP_RETURN_IF_ERROR(backend.CopyToHost(dv, v, values * sizeof(float)));
  }
  l.positions.insert(l.positions.end(), positions, positions + n);
  return absl::OkStatus();
}

void KvCache::Spans(int layer, std::vector<KvSpan>* spans) const {
  spans->assign(1, KvSpan{k_bytes(layer), v_bytes(layer), layers[layer].len()});
}

absl::StatusOr<std::unique_ptr<DeviceKv>> DeviceKv::FromCache(const Backend& backend,
                                                            const KvCache& cache,
                                                            int reserve_rows) {
  std::unique_ptr<DeviceKv> kv(new DeviceKv());
  kv->kv_dim_ = cache.kv_dim;
  kv->dtype_ = cache.dtype();
  kv->device_ = backend.device();
  kv->next_position = cache.next_position;
  kv->layers_.resize(cache.layers.size());
  const size_t row_bytes = static_cast<size_t>(cache.row_bytes());
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    const LayerKv& src = cache.layers[l];
    Layer& dst = kv->layers_[l];
    dst.capacity = src.len() + std::max(reserve_rows, 0);
    const size_t bytes = row_bytes * static_cast<size_t>(dst.capacity);
    HAP_ASSIGN_OR_RETURN(dst.k, BackendBuffer::Allocate(backend, bytes));
    HAP_ASSIGN_OR_RETURN(dst.v, BackendBuffer::Allocate(backend, bytes));
    const size_t used = row_bytes * static_cast<size_t>(src.len());
    HAP_RETURN_IF_ERROR(backend.CopyToBackend(dst.k.data(), cache.k_bytes(l), used));
    HAP_RETURN_IF_ERROR(backend.CopyToBackend(dst.v.data(), cache.v_bytes(l), used));
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
  const size_t elem = DTypeSize(dtype_);
  const size_t offset = elem * static_cast<size_t>(l.len) * kv_dim_;
  const int64_t values = static_cast<int64_t>(n) * kv_dim_;
  char* dk = static_cast<char*>(l.k.data()) + offset;
  char* dv = static_cast<char*>(l.v.data()) + offset;
  if (dtype_ == DType::kF32) {
    HAP_RETURN_IF_ERROR(backend.Copy(dk, k, sizeof(float) * values));
    HAP_RETURN_IF_ERROR(backend.Copy(dv, v, sizeof(float) * values));
  } else {
    HAP_RETURN_IF_ERROR(backend.StoreF32As(dtype_, k, dk, values));
    HAP_RETURN_IF_ERROR(backend.StoreF32As(dtype_, v, dv, values));
  }
  l.len += n;
  return absl::OkStatus();
}

void DeviceKv::Spans(int layer, std::vector<KvSpan>* spans) const {
  const Layer& l = layers_[layer];
  spans->assign(1, KvSpan{l.k.data(), l.v.data(), l.len});
}

}  // namespace hap
