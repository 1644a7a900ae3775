// A sequence's KV cache. After pruning, layers hold different numbers of tokens: each layer keeps
// exactly the rows it processed, with their original position ids. KvStore is what the decoder
// and the KV transfer need of a cache; KvCache keeps each layer contiguous in host memory (the
// CPU backend's prefill, what hap-decode receives), DeviceKv in a backend's memory (a device
// backend's prefill, hapctl's decode), the engine's PagedKv in fixed-size blocks of a shared pool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "kernels/backend.h"
#include "kernels/op_args.h"

namespace hap {

// OK for the dtypes a KV cache holds its rows in (F32, BF16); InvalidArgument naming `dtype`
// otherwise. The one check behind KvCache::SetDType, DeviceKv::Create, KvBlockPool::Create and
// LlavaModel::Load (ModelOptions::kv_dtype).
absl::Status CheckKvDType(DType dtype);

// The KV dtype a command-line flag names, spelled as every --kv-dtype flag takes it: "f32" or
// "bf16". InvalidArgument naming `flag` (e.g. "--kv-dtype"), the value and the accepted names
// otherwise.
absl::StatusOr<DType> ParseKvDTypeFlagValue(std::string_view flag, std::string_view value);

// Where KvStore::AppendRowSlot's row goes: its K and V bytes in the cache's memory.
struct KvRowSlot {
  void* k = nullptr;
  void* v = nullptr;
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual int n_layers() const = 0;
  virtual int len(int layer) const = 0;
  // Appends n rows to `layer`: k, v F32 [n, kv_dim] (RoPE applied to k) in `backend`'s memory,
  // their original positions in host memory.
  virtual absl::Status Append(const Backend& backend, int layer, const float* k, const float* v,
                              const int32_t* positions, int n) = 0;
  // Appends one row to `layer` at `position` whose K and V bytes (kv_dim values of dtype()
  // each) the caller writes at the returned addresses before anything reads the row: a decode
  // step takes every layer's slots before its first layer, then writes a batch's rows of a layer
  // in one op (Backend::StoreKvRows). The addresses and the spans hold until the next append or
  // ReserveRows. Errors as Append.
  virtual absl::StatusOr<KvRowSlot> AppendRowSlot(int layer, int32_t position) = 0;
  // The layer's rows in order, as spans of `dtype()` for Backend::DecodeAttention.
  virtual void Spans(int layer, std::vector<KvSpan>* spans) const = 0;
  // The most rows one of those spans holds (a paged cache's block rows), so that a layer of n
  // rows has at most ceil(n / max_span_rows()) spans; 0 where a layer is one span.
  virtual int max_span_rows() const { return 0; }
  virtual DType dtype() const = 0;
  // Where the rows are: a backend decodes only from a cache in its own memory.
  virtual Device device() const = 0;
  // Bytes of one row of K (or of V) in dtype().
  virtual int64_t row_bytes() const = 0;
  // Copies rows [row, row + n) of `layer` into host memory: k and v [n, kv_dim] in dtype() (any
  // alignment), positions [n]. From a device: one copy for K and one for V, each a wait for the
  // calling thread's stream (the KV transfer reads a chunk's rows so, just before sending it).
  virtual absl::Status ReadRows(int layer, int row, int n, void* k, void* v,
                                int32_t* positions) const = 0;
  // ReadRows without waiting for K and V where the cache is in a device's memory: k and v must
  // then be AllocateHost memory of StagingBackend(), and hold the rows once WaitForReads returns
  // (positions are filled at once). Elsewhere ReadRows.
  virtual absl::Status ReadRowsAsync(int layer, int row, int n, void* k, void* v,
                                     int32_t* positions) const {
    return ReadRows(layer, row, n, k, v, positions);
  }
  virtual absl::Status WaitForReads() const { return absl::OkStatus(); }
  // The backend whose AllocateHost memory ReadRowsAsync copies into without a wait; null where
  // it reads at once (a cache in host memory).
  virtual const Backend* StagingBackend() const { return nullptr; }
  // Room for `rows` more rows in every layer, so that appending them (decode steps, one row per
  // layer each) neither moves a layer's rows through the host nor fails. FailedPrecondition
  // where the cache cannot make it (a PagedKv holds the blocks it was created with).
  virtual absl::Status ReserveRows(int rows) = 0;
  // Sets the position ids of rows [row, row + n) of `layer` (host): a device prefill whose
  // pruning stages were decided in the backend's memory learns its visual rows' positions only
  // once the prefill ends. OutOfRange unless those rows lie in the layer.
  virtual absl::Status RewritePositions(int layer, int row, const int32_t* positions, int n) = 0;

  // Σ_l len(l).
  int64_t total_rows() const;
  // OutOfRange unless rows [row, row + n) lie in `layer` (what ReadRows checks first).
  absl::Status CheckRows(int layer, int row, int n) const;
  // Bytes of K and V (in dtype()) over all layers; position ids are not counted.
  int64_t bytes() const { return total_rows() * 2 * row_bytes(); }

  // Position id of the next token to decode: the unpruned prompt length, then +1 per token.
  int32_t next_position = 0;
  // Rotary position minus position id for the tokens decoded after the prompt: 0 for LLaMA;
  // with M-RoPE (Qwen2.5-VL), an image's tokens advance the rotary position by fewer than their
  // count (transformers' rope_deltas), so the next token rotates at next_position + rope_delta.
  int32_t rope_delta = 0;
};

// One layer's rows in the cache's dtype: an F32 cache fills k and v, a BF16 cache k_bf16 and
// v_bf16 (the other pair stays empty).
struct LayerKv {
  std::vector<float> k;            // F32 [len, kv_dim], RoPE applied
  std::vector<float> v;            // F32 [len, kv_dim]
  std::vector<uint16_t> k_bf16;    // BF16 [len, kv_dim], RoPE applied
  std::vector<uint16_t> v_bf16;    // BF16 [len, kv_dim]
  std::vector<int32_t> positions;  // [len] original position ids
  int len() const { return static_cast<int>(positions.size()); }
};

// Host memory: the prefill's output, what the KV transfer sends, what hapctl decodes on the CPU.
// Rows appended from a device backend are copied out (one copy per layer of a prefill). The rows
// are F32 (the default) or BF16: appended F32 rows are then rounded to nearest even as
// Backend::StoreF32As rounds them into a BF16 KvBlockPool, so both hold the same bits.
class KvCache : public KvStore {
 public:
  int kv_dim = 0;  // n_kv_heads * head_dim
  std::vector<LayerKv> layers;

  // The dtype of the rows: InvalidArgument for one other than F32 or BF16, FailedPrecondition
  // once the cache holds rows. Clear keeps it.
  absl::Status SetDType(DType dtype);
  void Clear();
  // The layer's K and V rows as raw bytes of dtype(), [len, kv_dim] each.
  const uint8_t* k_bytes(int layer) const;
  const uint8_t* v_bytes(int layer) const;
  // Appends n rows already in host memory and in dtype(): K and V [n, kv_dim] each (any
  // alignment). Room for `reserve_rows` rows in all is made first when that is more.
  void AppendHostRows(int layer, const void* k, const void* v, const int32_t* positions, int n,
                      int reserve_rows = 0);

  int n_layers() const override { return static_cast<int>(layers.size()); }
  int len(int layer) const override { return layers[layer].len(); }
  absl::Status Append(const Backend& backend, int layer, const float* k, const float* v,
                      const int32_t* positions, int n) override;
  absl::StatusOr<KvRowSlot> AppendRowSlot(int layer, int32_t position) override;
  void Spans(int layer, std::vector<KvSpan>* spans) const override;
  DType dtype() const override { return dtype_; }
  Device device() const override { return Device::kCpu; }
  int64_t row_bytes() const override { return kv_dim * static_cast<int64_t>(DTypeSize(dtype_)); }
  absl::Status ReadRows(int layer, int row, int n, void* k, void* v,
                        int32_t* positions) const override;
  // Reserves the vectors (a vector growing by doubling would copy the layer and hold up to twice
  // its memory). Never fails.
  absl::Status ReserveRows(int rows) override;
  absl::Status RewritePositions(int layer, int row, const int32_t* positions, int n) override;

 private:
  DType dtype_ = DType::kF32;
};

// A DeviceKv as another process on the same device maps it (DeviceKv::Export, PagedKv::
// FromExported): each layer's K and V blocks by handle (Backend::ExportMemory), their rows and
// the rows' position ids. The exporting process keeps the cache until the importing one is done.
struct ExportedKv {
  std::string device;  // Backend::DeviceIdentity of the exporting process
  DType dtype = DType::kF32;
  int kv_dim = 0;
  struct Layer {
    std::string k, v;                // handles of blocks of [capacity, kv_dim] in dtype
    int capacity = 0;                // rows the blocks hold
    std::vector<int32_t> positions;  // [rows] position ids; the rows are the blocks' first ones
  };
  std::vector<Layer> layers;
};

// A cache in a backend's memory, each layer contiguous in F32 or BF16, its rows' position ids on
// the host. A device backend's prefill appends into one (LlavaModel::Prefill): each layer is
// allocated when its rows arrive, sized to them plus `reserve_rows` (room for the answer where a
// decode follows in the same process: hapctl run, the in-process pipeline, which then decode
// from it), and BF16 rows are rounded on the device by Backend::StoreF32As, bit for bit as the
// host conversion rounds them. The KV transfer reads it chunk by chunk (ReadRows); ToHost copies
// it whole for what reads LayerKv vectors (tests).
class DeviceKv final : public KvStore {
 public:
  // An empty cache of n_layers layers on `backend` (which must outlive it); InvalidArgument for
  // a dtype other than F32 or BF16. `shareable`: its layers in memory another process on the
  // device can map (Backend::AllocateShareable), for Export; the backend's error where it cannot.
  static absl::StatusOr<std::unique_ptr<DeviceKv>> Create(const Backend& backend, int n_layers,
                                                          int kv_dim, DType dtype, int reserve_rows,
                                                          bool shareable = false);
  // `cache`'s rows copied into `backend`'s memory, with room for reserve_rows more per layer.
  static absl::StatusOr<std::unique_ptr<DeviceKv>> FromCache(const Backend& backend,
                                                            const KvStore& cache,
                                                            int reserve_rows);

  int n_layers() const override { return static_cast<int>(layers_.size()); }
  int len(int layer) const override { return layers_[layer].len(); }
  // k and v in the memory of the cache's backend (the only one accepted). Allocates an empty
  // layer for n + reserve_rows rows; FailedPrecondition past a filled layer's capacity.
  absl::Status Append(const Backend& backend, int layer, const float* k, const float* v,
                      const int32_t* positions, int n) override;
  absl::StatusOr<KvRowSlot> AppendRowSlot(int layer, int32_t position) override;
  void Spans(int layer, std::vector<KvSpan>* spans) const override;
  DType dtype() const override { return dtype_; }
  Device device() const override { return backend_->device(); }
  int64_t row_bytes() const override { return kv_dim_ * static_cast<int64_t>(DTypeSize(dtype_)); }
  absl::Status ReadRows(int layer, int row, int n, void* k, void* v,
                        int32_t* positions) const override;
  absl::Status ReadRowsAsync(int layer, int row, int n, void* k, void* v,
                             int32_t* positions) const override;
  absl::Status WaitForReads() const override { return backend_->Synchronize(); }
  const Backend* StagingBackend() const override {
    return backend_->caps().host_memory ? nullptr : backend_;
  }
  // A layer short of room moves into a larger allocation by a copy within the backend's memory.
  absl::Status ReserveRows(int rows) override;
  absl::Status RewritePositions(int layer, int row, const int32_t* positions, int n) override;
  // A host copy: 2 device→host copies per layer.
  absl::StatusOr<KvCache> ToHost() const;
  // Every layer's blocks as handles another process on the device maps (PagedKv::FromExported),
  // once the backend has finished writing them (a synchronisation). FailedPrecondition for a
  // cache not created shareable, or with an empty layer.
  absl::StatusOr<ExportedKv> Export() const;
  int capacity(int layer) const { return layers_[layer].capacity; }
  bool shareable() const { return shareable_; }

 private:
  struct Layer {
    BackendBuffer k, v;  // dtype_ [capacity, kv_dim]
    std::vector<int32_t> positions;  // [len] original position ids
    int capacity = 0;
    int len() const { return static_cast<int>(positions.size()); }
  };
  explicit DeviceKv(const Backend& backend) : backend_(&backend) {}
  // ReadRows (wait) or ReadRowsAsync.
  absl::Status CopyRowsOut(int layer, int row, int n, void* k, void* v, int32_t* positions,
                           bool wait) const;
  // Allocates `layer` for `capacity` rows, copying its rows over.
  absl::Status Resize(int layer, int capacity);
  // Where n rows appended to `layer` go (an empty layer is allocated for n + reserve_rows);
  // FailedPrecondition past a filled layer's capacity. Appends nothing.
  absl::StatusOr<KvRowSlot> MakeRoom(int layer, int n);

  const Backend* backend_;
  int kv_dim_ = 0;
  DType dtype_ = DType::kF32;
  int reserve_rows_ = 0;
  bool shareable_ = false;
  std::vector<Layer> layers_;
};

}  // namespace hap
