#include "services/wire/kv_codec.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "base/status_macros.h"
#include "services/server/status.h"
#include "services/wire/proto_convert.h"

namespace hap::svc {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; add byte swapping for this host");

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("KV transfer: ", what));
}

// Position ids that increase from after `prev` and stay below next_position.
absl::Status CheckPositions(const std::string& where,
                            const google::protobuf::RepeatedField<int32_t>& positions, int32_t prev,
                            int32_t next_position) {
  for (int32_t p : positions) {
    if (p <= prev || p >= next_position) {
      return Bad(absl::StrCat(where, ": position ", p, " is not increasing within [0, ",
                              next_position, ")"));
    }
    prev = p;
  }
  return absl::OkStatus();
}

hap::v1::DType WireDType(DType dtype) {
  return dtype == DType::kBF16 ? hap::v1::DTYPE_BF16 : hap::v1::DTYPE_F32;
}

// Page-locked buffers for the chunks' rows, kept from one transfer for the next: allocating
// page-locked memory is slow, and a transfer runs per request.
class StagingPool {
 public:
  static StagingPool& Get() {
    static auto* pool = new StagingPool();
    return *pool;
  }
  absl::StatusOr<BackendBuffer> Take(const Backend& backend, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->first == &backend && it->second.bytes() >= bytes) {
          BackendBuffer b = std::move(it->second);
          free_.erase(it);
          return b;
        }
      }
    }
    return BackendBuffer::AllocateHost(backend, bytes);
  }
  void Give(const Backend& backend, BackendBuffer buffer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < kKept) free_.emplace_back(&backend, std::move(buffer));
  }

 private:
  static constexpr size_t kKept = 16;
  std::mutex mu_;
  std::vector<std::pair<const Backend*, BackendBuffer>> free_;
};

}  // namespace

absl::StatusOr<KvChunker> KvChunker::Create(const KvStore* cache, int max_message_bytes) {
  // K and V rows (in the cache's dtype) plus up to 5 bytes of varint position per row.
  const int64_t row_bytes = 2 * cache->row_bytes() + 5;
  const int64_t room = static_cast<int64_t>(max_message_bytes) - kChunkOverheadBytes;
  if (cache->row_bytes() <= 0 || room < row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("max message size ", max_message_bytes,
                                                   " is too small for one KV row of ", row_bytes,
                                                   " bytes"));
  }
  return KvChunker(cache, static_cast<int>(std::min<int64_t>(room / row_bytes, 1 << 30)));
}

absl::Status KvChunker::TakeStaging() {
  const Backend& b = *cache_->StagingBackend();
  int most = 0;  // rows of the largest chunk
  for (int l = 0; l < cache_->n_layers(); ++l) {
    most = std::max(most, std::min(rows_per_chunk_, cache_->len(l)));
  }
  const size_t bytes = static_cast<size_t>(std::max(most, 1)) * cache_->row_bytes();
  staging_.resize(2);
  for (Slot& slot : staging_) {
    HAP_ASSIGN_OR_RETURN(slot.k, StagingPool::Get().Take(b, bytes));
    HAP_ASSIGN_OR_RETURN(slot.v, StagingPool::Get().Take(b, bytes));
  }
  return absl::OkStatus();
}

void KvChunker::HandOver(ExportedKv exported) {
  handover_ = std::move(exported);
  n_chunks_ = 0;
}

KvChunker::KvChunker(const KvStore* cache, int rows_per_chunk)
    : cache_(cache), rows_per_chunk_(rows_per_chunk) {
  for (int l = 0; l < cache->n_layers(); ++l) {
    n_chunks_ += std::max(1, (cache->len(l) + rows_per_chunk - 1) / rows_per_chunk);
  }
}

KvChunker::~KvChunker() {
  if (staging_.empty()) return;
  // No copy may still be writing into a buffer that goes back to the pool.
  (void)cache_->WaitForReads();
  const Backend& b = *cache_->StagingBackend();
  for (Slot& slot : staging_) {
    if (slot.k.data() != nullptr) StagingPool::Get().Give(b, std::move(slot.k));
    if (slot.v.data() != nullptr) StagingPool::Get().Give(b, std::move(slot.v));
  }
}

void KvChunker::FillHeader(hap::v1::KvHeader* header) const {
  header->set_n_layers(cache_->n_layers());
  header->set_kv_dim(static_cast<int>(cache_->row_bytes() / DTypeSize(cache_->dtype())));
  header->set_dtype(WireDType(cache_->dtype()));
  header->clear_layer_rows();
  for (int l = 0; l < cache_->n_layers(); ++l) header->add_layer_rows(cache_->len(l));
  header->set_next_position(cache_->next_position);
  header->set_rope_delta(cache_->rope_delta);
  header->set_n_chunks(n_chunks_);
  if (!handover_) return;
  hap::v1::KvDeviceHandover* d = header->mutable_device_handover();
  d->set_device(handover_->device);
  for (const ExportedKv::Layer& layer : handover_->layers) {
    hap::v1::KvLayerHandles* l = d->add_layers();
    l->set_k(layer.k);
    l->set_v(layer.v);
    l->set_capacity(layer.capacity);
    l->mutable_positions()->Add(layer.positions.begin(), layer.positions.end());
  }
}

bool KvChunker::TakeNext(Slot* slot) {
  while (layer_ < cache_->n_layers() && row_ >= cache_->len(layer_)) {
    ++layer_;
    row_ = 0;
  }
  slot->issued = true;
  if (layer_ >= cache_->n_layers()) {
    slot->n = 0;
    return false;
  }
  slot->index = taken_++;
  slot->layer = layer_;
  slot->row = row_;
  slot->n = std::min(rows_per_chunk_, cache_->len(layer_) - row_);
  slot->positions.resize(slot->n);
  row_ += slot->n;
  return true;
}

void KvChunker::Describe(const Slot& slot, hap::v1::KvChunk* chunk) const {
  const size_t bytes = static_cast<size_t>(cache_->row_bytes()) * slot.n;
  chunk->Clear();
  chunk->set_chunk_index(slot.index);
  chunk->set_layer(slot.layer);
  chunk->set_row_offset(slot.row);
  chunk->set_n_rows(slot.n);
  chunk->set_dtype(WireDType(cache_->dtype()));
  chunk->mutable_k()->resize(bytes);
  chunk->mutable_v()->resize(bytes);
}

bool KvChunker::ReadFailed(int index, int layer, const absl::Status& why) {
  // Reading the sender's own cache failed: a server fault whatever the cause (a row range the
  // chunker computed, a device copy), so the caller sees INTERNAL, not the cause's code.
  status_ = absl::InternalError(
      absl::StrCat("KV transfer: reading chunk ", index, " (layer ", layer, "): ", why.message()));
  return false;
}

bool KvChunker::Issue(int s) {
  Slot& slot = staging_[s];
  if (!TakeNext(&slot)) return true;
  const absl::Status read = cache_->ReadRowsAsync(slot.layer, slot.row, slot.n, slot.k.data(),
                                                  slot.v.data(), slot.positions.data());
  return read.ok() || ReadFailed(slot.index, slot.layer, read);
}

bool KvChunker::Next(hap::v1::KvChunk* chunk) {
  if (!status_.ok() || handover_) return false;
  if (staging_.empty() && cache_->StagingBackend() != nullptr) {
    status_ = TakeStaging();
    if (!status_.ok()) return false;
  }
  if (staging_.empty()) {
    Slot slot;
    if (!TakeNext(&slot)) return false;
    Describe(slot, chunk);
    chunk->mutable_positions()->Resize(slot.n, 0);
    const absl::Status read =
        cache_->ReadRows(slot.layer, slot.row, slot.n, chunk->mutable_k()->data(),
                         chunk->mutable_v()->data(), chunk->mutable_positions()->mutable_data());
    if (!read.ok()) return ReadFailed(slot.index, slot.layer, read);
  } else {
    if (!staging_[current_].issued && !Issue(current_)) return false;
    Slot& slot = staging_[current_];
    if (slot.n == 0) return false;
    if (const absl::Status done = cache_->WaitForReads(); !done.ok()) {
      return ReadFailed(slot.index, slot.layer, done);
    }
    // The next chunk's rows are copied while this one is sent.
    if (!Issue(1 - current_)) return false;
    Describe(slot, chunk);
    const size_t bytes = chunk->k().size();
    std::memcpy(chunk->mutable_k()->data(), slot.k.data(), bytes);
    std::memcpy(chunk->mutable_v()->data(), slot.v.data(), bytes);
    chunk->mutable_positions()->Add(slot.positions.begin(), slot.positions.end());
    current_ = 1 - current_;
  }
  chunk->set_crc32c(KvChunkChecksum(*chunk));
  return true;
}

void KvChunker::FillTrailer(hap::v1::KvTrailer* trailer) const {
  trailer->set_n_chunks(n_chunks_);
  trailer->set_kv_bytes(cache_->bytes());
  trailer->set_total_rows(cache_->total_rows());
}

uint32_t KvChunkChecksum(const hap::v1::KvChunk& chunk) {
  uint32_t crc = Crc32c(0, chunk.k());
  crc = Crc32c(crc, chunk.v());
  return Crc32c(crc, chunk.positions().data(), chunk.positions().size() * sizeof(int32_t));
}

absl::Status KvAssembler::OnHeader(const hap::v1::KvHeader& h) {
  if (has_header_) return Bad("a second header arrived");
  if (h.request_id().size() > 256) return Bad("request_id is longer than 256 bytes");
  auto must_equal = [](const char* field, int64_t got, int64_t want) -> absl::Status {
    if (got == want) return absl::OkStatus();
    return Bad(absl::StrCat("header ", field, " is ", got, " but this decode model has ", want));
  };
  HAP_RETURN_IF_ERROR(must_equal("n_layers", h.n_layers(), expect_.n_layers));
  HAP_RETURN_IF_ERROR(must_equal("kv_dim", h.kv_dim(), expect_.kv_dim));
  HAP_RETURN_IF_ERROR(must_equal("d_model", h.d_model(), expect_.d_model));
  HAP_RETURN_IF_ERROR(must_equal("vocab_size", h.vocab_size(), expect_.vocab_size));
  if (h.dtype() != hap::v1::DTYPE_F32 && h.dtype() != hap::v1::DTYPE_BF16) {
    return Bad(absl::StrCat("header dtype ", hap::v1::DType_Name(h.dtype()),
                            " is not supported (decode accepts DTYPE_F32 and DTYPE_BF16)"));
  }
  const DType dtype = h.dtype() == hap::v1::DTYPE_BF16 ? DType::kBF16 : DType::kF32;
  if (h.layer_rows_size() != expect_.n_layers) {
    return Bad(absl::StrCat("header has ", h.layer_rows_size(), " layer_rows for ",
                            expect_.n_layers, " layers"));
  }
  if (h.next_position() < 1 || h.next_position() >= expect_.max_positions) {
    return Bad(absl::StrCat("header next_position ", h.next_position(), " is outside [1, ",
                            expect_.max_positions, ")"));
  }
  // An image's tokens advance the rotary position by at most their count.
  if (h.rope_delta() > 0 || h.rope_delta() <= -h.next_position()) {
    return Bad(absl::StrCat("header rope_delta ", h.rope_delta(), " is outside [",
                            1 - h.next_position(), ", 0]"));
  }
  total_rows_ = 0;
  for (int l = 0; l < h.layer_rows_size(); ++l) {
    const int rows = h.layer_rows(l);
    if (rows < 1 || rows > h.next_position()) {
      return Bad(absl::StrCat("header layer_rows[", l, "] = ", rows, " is outside [1, ",
                              h.next_position(), "] (next_position)"));
    }
    total_rows_ += rows;
  }
  if (h.first_token() < 0 || h.first_token() >= expect_.vocab_size) {
    return Bad(absl::StrCat("header first_token ", h.first_token(),
                            " is outside the vocabulary [0, ", expect_.vocab_size, ")"));
  }
  HAP_RETURN_IF_ERROR(Annotate(SamplingFromProto(h.sampling()).status(), "KV transfer header"));
  if (h.samples_drawn() < 0 || h.samples_drawn() > 1024) {
    return Bad(absl::StrCat("header samples_drawn ", h.samples_drawn(), " is outside [0, 1024]"));
  }
  HAP_RETURN_IF_ERROR(
      Annotate(StopFromProto(h.max_new_tokens(), h.stop()).status(), "KV transfer header"));
  if (h.max_new_tokens() < 1) return Bad("header max_new_tokens must be >= 1");
  if (h.has_device_handover()) {
    HAP_RETURN_IF_ERROR(CheckDeviceHandover(h));
  } else if (h.n_chunks() < h.n_layers() || h.n_chunks() > total_rows_) {
    return Bad(absl::StrCat("header n_chunks ", h.n_chunks(), " is outside [n_layers = ",
                            h.n_layers(), ", total rows = ", total_rows_, "]"));
  }
  header_ = h;
  has_header_ = true;
  HAP_RETURN_IF_ERROR(cache_.SetDType(dtype));
  cache_.kv_dim = h.kv_dim();
  expected_bytes_ = total_rows_ * 2 * cache_.row_bytes();
  cache_.next_position = h.next_position();
  cache_.rope_delta = h.rope_delta();
  cache_.layers.resize(h.n_layers());  // rows are allocated as they arrive
  rows_received_.assign(h.n_layers(), 0);
  if (h.has_device_handover()) return TakeHandover();
  if (pool_ != nullptr) {
    const std::vector<int> layer_rows(h.layer_rows().begin(), h.layer_rows().end());
    absl::StatusOr<std::unique_ptr<PagedKv>> paged =
        PagedKv::Reserve(pool_, layer_rows, h.max_new_tokens());
    if (paged.ok()) {
      paged_ = std::move(*paged);
      paged_->next_position = h.next_position();
      paged_->rope_delta = h.rope_delta();
    } else if (!absl::IsResourceExhausted(paged.status())) {
      return paged.status();
    }
  }
  return absl::OkStatus();
}

absl::Status KvAssembler::CheckDeviceHandover(const hap::v1::KvHeader& h) const {
  const hap::v1::KvDeviceHandover& d = h.device_handover();
  if (h.n_chunks() != 0) {
    return Bad(absl::StrCat("header n_chunks ", h.n_chunks(), " with a device handover (0)"));
  }
  if (d.layers_size() != h.n_layers()) {
    return Bad(absl::StrCat("device handover of ", d.layers_size(), " layers for ", h.n_layers()));
  }
  for (int l = 0; l < d.layers_size(); ++l) {
    const hap::v1::KvLayerHandles& layer = d.layers(l);
    const std::string where = absl::StrCat("device handover layer ", l);
    if (layer.k().empty() || layer.v().empty()) return Bad(where + ": no handle");
    if (layer.positions_size() != h.layer_rows(l)) {
      return Bad(absl::StrCat(where, ": ", layer.positions_size(), " positions for ",
                              h.layer_rows(l), " rows"));
    }
    if (layer.capacity() < h.layer_rows(l)) {
      return Bad(absl::StrCat(where, ": blocks of ", layer.capacity(), " rows hold fewer than its ",
                              h.layer_rows(l)));
    }
    HAP_RETURN_IF_ERROR(CheckPositions(where, layer.positions(), -1, h.next_position()));
  }
  return absl::OkStatus();
}

absl::Status KvAssembler::TakeHandover() {
  auto refused = [](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(kKvHandoverRefused, ": ", why));
  };
  if (pool_ == nullptr) return refused("this decode service keeps its KV cache in host memory");
  const hap::v1::KvHeader& h = header_;
  ExportedKv exported;
  exported.device = h.device_handover().device();
  exported.dtype = cache_.dtype();
  exported.kv_dim = h.kv_dim();
  for (const hap::v1::KvLayerHandles& layer : h.device_handover().layers()) {
    ExportedKv::Layer e;
    e.k = layer.k();
    e.v = layer.v();
    e.capacity = layer.capacity();
    e.positions.assign(layer.positions().begin(), layer.positions().end());
    exported.layers.push_back(std::move(e));
  }
  absl::StatusOr<std::unique_ptr<PagedKv>> paged =
      PagedKv::FromExported(pool_, exported, h.max_new_tokens());
  if (!paged.ok()) return refused(std::string(paged.status().message()));
  paged_ = std::move(*paged);
  paged_->next_position = h.next_position();
  paged_->rope_delta = h.rope_delta();
  for (int l = 0; l < h.n_layers(); ++l) rows_received_[l] = h.layer_rows(l);
  bytes_received_ = expected_bytes_;
  return absl::OkStatus();
}

bool IsKvHandoverRefusal(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) &&
         absl::StartsWith(status.message(), kKvHandoverRefused);
}

absl::Status KvAssembler::OnChunk(const hap::v1::KvChunk& c) {
  if (!has_header_) return Bad("a chunk arrived before the header");
  if (complete_) return Bad("a chunk arrived after the trailer");
  const std::string where = absl::StrCat("chunk ", chunks_received_, " (layer ", c.layer(), ")");
  if (c.chunk_index() != chunks_received_) {
    return Bad(absl::StrCat("chunk_index ", c.chunk_index(), " arrived where ", chunks_received_,
                            " was expected (out of order or missing)"));
  }
  if (chunks_received_ >= header_.n_chunks()) {
    return Bad(absl::StrCat("more chunks than the header's n_chunks = ", header_.n_chunks()));
  }
  if (c.dtype() != header_.dtype()) {
    return Bad(absl::StrCat(where, ": dtype ", hap::v1::DType_Name(c.dtype()),
                            " differs from the header's ", hap::v1::DType_Name(header_.dtype())));
  }
  if (c.layer() < 0 || c.layer() >= header_.n_layers()) {
    return Bad(absl::StrCat(where, ": layer index is outside [0, ", header_.n_layers(), ")"));
  }
  if (c.layer() < layer_) {
    return Bad(
        absl::StrCat(where, ": layer ", layer_, " was already being sent (layers go in order)"));
  }
  for (int l = layer_; l < c.layer(); ++l) {
    if (rows_received_[l] != header_.layer_rows(l)) {
      return Bad(absl::StrCat(where, ": layer ", l, " is incomplete (", rows_received_[l], " of ",
                              header_.layer_rows(l), " rows)"));
    }
  }
  layer_ = c.layer();
  const int have = rows_received_[layer_], want = header_.layer_rows(layer_);
  if (c.row_offset() != have) {
    return Bad(absl::StrCat(where, ": row_offset ", c.row_offset(), " but ", have,
                            " rows of the layer arrived so far"));
  }
  if (c.n_rows() < 1 || c.n_rows() > want - have) {
    return Bad(absl::StrCat(where, ": n_rows ", c.n_rows(), " is outside [1, ", want - have,
                            "] (the layer's remaining rows)"));
  }
  const size_t row_bytes = static_cast<size_t>(cache_.row_bytes());
  const size_t bytes = c.n_rows() * row_bytes;
  if (c.positions_size() != c.n_rows()) {
    return Bad(
        absl::StrCat(where, ": ", c.positions_size(), " positions for ", c.n_rows(), " rows"));
  }
  if (c.k().size() != bytes || c.v().size() != bytes) {
    return Bad(absl::StrCat(where, ": k/v are ", c.k().size(), "/", c.v().size(), " bytes; ",
                            c.n_rows(), " ", std::string(DTypeName(cache_.dtype())), " rows of ",
                            header_.kv_dim(), " need ", bytes));
  }
  const std::vector<int32_t>& landed =
      paged_ != nullptr ? paged_->positions(layer_) : cache_.layers[layer_].positions;
  HAP_RETURN_IF_ERROR(CheckPositions(where, c.positions(), landed.empty() ? -1 : landed.back(),
                                     header_.next_position()));
  const uint32_t crc = KvChunkChecksum(c);
  if (crc != c.crc32c()) {
    return Bad(absl::StrCat(where, ": checksum mismatch (crc32c ", c.crc32c(), " sent, ", crc,
                            " computed): the payload was corrupted"));
  }
  // The rows as sent, in the header's dtype; the pool converts them to its own.
  if (paged_ != nullptr) {
    HAP_RETURN_IF_ERROR(paged_->AppendHostRows(layer_, cache_.dtype(), c.k().data(), c.v().data(),
                                               c.positions().data(), static_cast<int>(c.n_rows())));
  } else {
    cache_.AppendHostRows(layer_, c.k().data(), c.v().data(), c.positions().data(),
                          static_cast<int>(c.n_rows()), want);
  }
  rows_received_[layer_] += c.n_rows();
  bytes_received_ += 2 * static_cast<int64_t>(bytes);
  ++chunks_received_;
  return absl::OkStatus();
}

absl::Status KvAssembler::OnTrailer(const hap::v1::KvTrailer& t) {
  if (!has_header_) return Bad("the trailer arrived before the header");
  if (complete_) return Bad("a second trailer arrived");
  if (chunks_received_ != header_.n_chunks() || t.n_chunks() != header_.n_chunks()) {
    return Bad(absl::StrCat("trailer after ", chunks_received_, " chunks; the header announced ",
                            header_.n_chunks(), " and the trailer ", t.n_chunks()));
  }
  for (int l = 0; l < header_.n_layers(); ++l) {
    if (rows_received_[l] != header_.layer_rows(l)) {
      return Bad(absl::StrCat("layer ", l, " is incomplete at the trailer (", rows_received_[l],
                              " of ", header_.layer_rows(l), " rows)"));
    }
  }
  if (t.kv_bytes() != bytes_received_ || t.total_rows() != total_rows_) {
    return Bad(absl::StrCat("trailer totals (", t.kv_bytes(), " bytes, ", t.total_rows(),
                            " rows) differ from what arrived (", bytes_received_, " bytes, ",
                            total_rows_, " rows)"));
  }
  complete_ = true;
  return absl::OkStatus();
}

}  // namespace hap::svc
