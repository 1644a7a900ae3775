#include "runtime/model/kv_cache.h"

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

absl::Status KvCache::Append(int layer, const float* k, const float* v, const int32_t* positions,
                             int n) {
  LayerKv& l = layers[layer];
  const int64_t values = static_cast<int64_t>(n) * kv_dim;
  l.k.insert(l.k.end(), k, k + values);
  l.v.insert(l.v.end(), v, v + values);
  l.positions.insert(l.positions.end(), positions, positions + n);
  return absl::OkStatus();
}

void KvCache::Spans(int layer, std::vector<KvSpan>* spans) const {
  const LayerKv& l = layers[layer];
  spans->assign(1, KvSpan{l.k.data(), l.v.data(), l.len()});
}

}  // namespace hap
