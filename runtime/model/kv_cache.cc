#include "runtime/model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/string_view_compat.h"
#include "base/tensor.h"

namespace hap {

int64_t KvStore::total_rows() const {
  int64_t rows = 0;
  for (int l = 0; l < n_layers(); ++l) rows += len(l);
  return rows;
}

absl::Status KvStore::CheckRows(int layer, int row, int n) const {
  if (layer < 0 || layer >= n_layers()) {
    return absl::OutOfRangeError(absl::StrFormat("layer %d of %d", layer, n_layers()));
  }
  const int64_t end = int64_t{row} + n;
  if (row < 0 || n < 0 || end > len(layer)) {
    return absl::OutOfRangeError(
        absl::StrFormat("layer %d: rows [%d, %d) of %d", layer, row, end, len(layer)));
  }
  return absl::OkStatus();
}

absl::Status KvCache::RewritePositions(int layer, int row, const int32_t* positions, int n) {
  HAP_RETURN_IF_ERROR(CheckRows(layer, row, n));
  std::copy(positions, positions + n, layers[layer].positions.begin() + row);
  return absl::OkStatus();
}

absl::Status DeviceKv::RewritePositions(int layer, int row, const int32_t* positions, int n) {
  HAP_RETURN_IF_ERROR(CheckRows(layer, row, n));
  std::copy(positions, positions + n, layers_[layer].positions.begin() + row);
  return absl::OkStatus();
}

absl::Status CheckKvDType(DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache dtype ", std::string(DTypeName(dtype)),
                                                   " is not supported (F32 or BF16)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DType> ParseKvDTypeFlagValue(std::string_view flag, std::string_view value) {
  if (value == "f32") return DType::kF32;
  if (value == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat(AsAbsl(flag), " '", AsAbsl(value), "' is not f32 or bf16"));
}

absl::Status KvCache::SetDType(DType dtype) {
  const std::string name(DTypeName(dtype));
  HAP_RETURN_IF_ERROR(CheckKvDType(dtype));
  if (dtype != dtype_ && total_rows() > 0) {
    return absl::FailedPreconditionError(absl::StrCat("a KV cache holding ", total_rows(), " ",
                                                      std::string(DTypeName(dtype_)),
                                                      " rows cannot become ", name));
  }
  dtype_ = dtype;
  return absl::OkStatus();
}

void KvCache::Clear() {
  layers.clear();
  next_position = 0;
  rope_delta = 0;
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

absl::Status KvCache::ReserveRows(int rows) {
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
  return absl::OkStatus();
}

absl::Status KvCache::ReadRows(int layer, int row, int n, void* k, void* v,
                               int32_t* positions) const {
  HAP_RETURN_IF_ERROR(CheckRows(layer, row, n));
  const LayerKv& l = layers[layer];
  const size_t bytes = static_cast<size_t>(row_bytes());
  std::memcpy(k, k_bytes(layer) + bytes * row, bytes * n);
  std::memcpy(v, v_bytes(layer) + bytes * row, bytes * n);
  std::memcpy(positions, l.positions.data() + row, sizeof(int32_t) * n);
  return absl::OkStatus();
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
    if (backend.caps().host_memory) {
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

absl::StatusOr<KvRowSlot> KvCache::AppendRowSlot(int layer, int32_t position) {
  LayerKv& l = layers[layer];
  const size_t values = static_cast<size_t>(kv_dim);
  KvRowSlot slot;
  if (dtype_ == DType::kBF16) {
    auto [dk, dv] = Grow(&l.k_bf16, &l.v_bf16, values, 0);
    slot = {dk, dv};
  } else {
    auto [dk, dv] = Grow(&l.k, &l.v, values, 0);
    slot = {dk, dv};
  }
  l.positions.push_back(position);
  return slot;
}

void KvCache::Spans(int layer, std::vector<KvSpan>* spans) const {
  spans->assign(1, KvSpan{k_bytes(layer), v_bytes(layer), layers[layer].len()});
}

absl::StatusOr<std::unique_ptr<DeviceKv>> DeviceKv::Create(const Backend& backend, int n_layers,
                                                           int kv_dim, DType dtype,
                                                           int reserve_rows, bool shareable) {
  HAP_RETURN_IF_ERROR(CheckKvDType(dtype));
  std::unique_ptr<DeviceKv> kv(new DeviceKv(backend));
  kv->kv_dim_ = kv_dim;
  kv->dtype_ = dtype;
  kv->reserve_rows_ = std::max(reserve_rows, 0);
  kv->layers_.resize(std::max(n_layers, 0));
  if (shareable) HAP_RETURN_IF_ERROR(backend.DeviceIdentity().status());
  kv->shareable_ = shareable;
  return kv;
}

absl::StatusOr<std::unique_ptr<DeviceKv>> DeviceKv::FromCache(const Backend& backend,
                                                            const KvStore& cache,
                                                            int reserve_rows) {
  const int64_t row_bytes = cache.row_bytes();
  HAP_ASSIGN_OR_RETURN(
      std::unique_ptr<DeviceKv> kv,
      Create(backend, cache.n_layers(), static_cast<int>(row_bytes / DTypeSize(cache.dtype())),
             cache.dtype(), reserve_rows));
  kv->next_position = cache.next_position;
  kv->rope_delta = cache.rope_delta;
  std::vector<uint8_t> k, v;  // a layer's rows on their way up, in the cache's dtype
  for (int l = 0; l < cache.n_layers(); ++l) {
    const int n = cache.len(l);
    Layer& dst = kv->layers_[l];
    HAP_RETURN_IF_ERROR(kv->Resize(l, n + kv->reserve_rows_));
    dst.positions.resize(n);
    const size_t used = static_cast<size_t>(row_bytes) * n;
    k.resize(used);
    v.resize(used);
    HAP_RETURN_IF_ERROR(cache.ReadRows(l, 0, n, k.data(), v.data(), dst.positions.data()));
    HAP_RETURN_IF_ERROR(backend.CopyToBackend(dst.k.data(), k.data(), used));
    HAP_RETURN_IF_ERROR(backend.CopyToBackend(dst.v.data(), v.data(), used));
  }
  return kv;
}

absl::Status DeviceKv::Resize(int layer, int capacity) {
  Layer& l = layers_[layer];
  const size_t bytes = static_cast<size_t>(row_bytes()) * std::max(capacity, 1);
  auto allocate = [&] {
    return shareable_ ? BackendBuffer::AllocateShareable(*backend_, bytes)
                      : BackendBuffer::Allocate(*backend_, bytes);
  };
  HAP_ASSIGN_OR_RETURN(BackendBuffer k, allocate());
  HAP_ASSIGN_OR_RETURN(BackendBuffer v, allocate());
  if (l.len() > 0) {
    const size_t used = static_cast<size_t>(row_bytes()) * l.len();
    HAP_RETURN_IF_ERROR(backend_->Copy(k.data(), l.k.data(), used));
    HAP_RETURN_IF_ERROR(backend_->Copy(v.data(), l.v.data(), used));
  }
  l.k = std::move(k);
  l.v = std::move(v);
  l.capacity = capacity;
  return absl::OkStatus();
}

absl::Status DeviceKv::Append(const Backend& backend, int layer, const float* k, const float* v,
                              const int32_t* positions, int n) {
  if (backend.device() != device()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %d: rows in %s memory appended to a KV cache in %s memory", layer,
        std::string(DeviceName(backend.device())), std::string(DeviceName(device()))));
  }
  HAP_ASSIGN_OR_RETURN(const KvRowSlot slot, MakeRoom(layer, n));
  const int64_t values = static_cast<int64_t>(n) * kv_dim_;
  char* dk = static_cast<char*>(slot.k);
  char* dv = static_cast<char*>(slot.v);
  if (dtype_ == DType::kF32) {
    HAP_RETURN_IF_ERROR(backend.Copy(dk, k, sizeof(float) * values));
    HAP_RETURN_IF_ERROR(backend.Copy(dv, v, sizeof(float) * values));
  } else {
    HAP_RETURN_IF_ERROR(backend.StoreF32PairAs(dtype_, k, dk, v, dv, values));
  }
  std::vector<int32_t>& layer_positions = layers_[layer].positions;
  layer_positions.insert(layer_positions.end(), positions, positions + n);
  return absl::OkStatus();
}

absl::StatusOr<KvRowSlot> DeviceKv::MakeRoom(int layer, int n) {
  Layer& l = layers_[layer];
  if (l.capacity == 0) HAP_RETURN_IF_ERROR(Resize(layer, n + reserve_rows_));
  if (l.len() + n > l.capacity) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "layer %d: %d + %d rows exceed the %d reserved", layer, l.len(), n, l.capacity));
  }
  const size_t offset = static_cast<size_t>(row_bytes()) * l.len();
  return KvRowSlot{static_cast<char*>(l.k.data()) + offset,
                   static_cast<char*>(l.v.data()) + offset};
}

absl::StatusOr<KvRowSlot> DeviceKv::AppendRowSlot(int layer, int32_t position) {
  HAP_ASSIGN_OR_RETURN(const KvRowSlot slot, MakeRoom(layer, 1));
  layers_[layer].positions.push_back(position);
  return slot;
}

void DeviceKv::Spans(int layer, std::vector<KvSpan>* spans) const {
  const Layer& l = layers_[layer];
  spans->assign(1, KvSpan{l.k.data(), l.v.data(), l.len()});
}

absl::Status DeviceKv::ReadRows(int layer, int row, int n, void* k, void* v,
                                int32_t* positions) const {
  return CopyRowsOut(layer, row, n, k, v, positions, /*wait=*/true);
}

absl::Status DeviceKv::ReadRowsAsync(int layer, int row, int n, void* k, void* v,
                                     int32_t* positions) const {
  return CopyRowsOut(layer, row, n, k, v, positions, /*wait=*/false);
}

absl::Status DeviceKv::CopyRowsOut(int layer, int row, int n, void* k, void* v, int32_t* positions,
                                   bool wait) const {
  HAP_RETURN_IF_ERROR(CheckRows(layer, row, n));
  const Layer& l = layers_[layer];
  if (n == 0) return absl::OkStatus();
  const size_t bytes = static_cast<size_t>(row_bytes());
  for (auto [dst, src] : {std::pair<void*, const void*>{k, l.k.data()}, {v, l.v.data()}}) {
    const char* from = static_cast<const char*>(src) + bytes * row;
    HAP_RETURN_IF_ERROR(wait ? backend_->CopyToHost(dst, from, bytes * n)
                             : backend_->CopyToHostAsync(dst, from, bytes * n));
  }
  std::memcpy(positions, l.positions.data() + row, sizeof(int32_t) * n);
  return absl::OkStatus();
}

absl::Status DeviceKv::ReserveRows(int rows) {
  for (int l = 0; l < n_layers(); ++l) {
    const int want = len(l) + std::max(rows, 0);
    if (want > layers_[l].capacity) HAP_RETURN_IF_ERROR(Resize(l, want));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExportedKv> DeviceKv::Export() const {
  if (!shareable_) {
    return absl::FailedPreconditionError(
        "a KV cache in memory other processes cannot map (DeviceKv::Create without shareable)");
  }
  ExportedKv out;
  HAP_ASSIGN_OR_RETURN(out.device, backend_->DeviceIdentity());
  out.dtype = dtype_;
  out.kv_dim = kv_dim_;
  // The other process reads what this one's stream has written by now.
  HAP_RETURN_IF_ERROR(backend_->Synchronize());
  for (int l = 0; l < n_layers(); ++l) {
    const Layer& layer = layers_[l];
    if (layer.capacity == 0) {
      return absl::FailedPreconditionError(absl::StrFormat("layer %d of the cache is empty", l));
    }
    ExportedKv::Layer e;
    HAP_ASSIGN_OR_RETURN(e.k, backend_->ExportMemory(layer.k.data()));
    HAP_ASSIGN_OR_RETURN(e.v, backend_->ExportMemory(layer.v.data()));
    e.capacity = layer.capacity;
    e.positions = layer.positions;
    out.layers.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<KvCache> DeviceKv::ToHost() const {
  KvCache cache;
  HAP_RETURN_IF_ERROR(cache.SetDType(dtype_));
  cache.kv_dim = kv_dim_;
  cache.next_position = next_position;
  cache.rope_delta = rope_delta;
  cache.layers.resize(layers_.size());
  std::vector<uint8_t> k, v;
  std::vector<int32_t> positions;
  for (int l = 0; l < n_layers(); ++l) {
    const size_t bytes = static_cast<size_t>(row_bytes()) * len(l);
    k.resize(bytes);
    v.resize(bytes);
    positions.resize(len(l));
    HAP_RETURN_IF_ERROR(ReadRows(l, 0, len(l), k.data(), v.data(), positions.data()));
    cache.AppendHostRows(l, k.data(), v.data(), positions.data(), len(l));
  }
  return cache;
}

}  // namespace hap
