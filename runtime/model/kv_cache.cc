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

}  // namespace hap
