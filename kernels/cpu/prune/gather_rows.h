// Compaction after pruning: gather the kept rows of [n_batch, n_rows, width] buffers (hidden
// states, position ids, per-layer K/V) so the next layer sees only the kept tokens.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace hap::kernels {

// dst[b, r, :] = src[b, idx[r], :] for b < n_batch, r < n_idx; rows are row_bytes wide, so one
// op serves F32/F16/BF16 activations and I32 positions alike.
//   src: [n_batch, n_rows, row_bytes]   dst: [n_batch, n_idx, row_bytes]
// dst may equal src (in-place compaction) when idx is strictly ascending: row r then never
// reads a row that an earlier copy overwrote. InvalidArgument on an index outside [0, n_rows),
// on in-place use with non-ascending idx, or on null pointers / negative sizes.
absl::Status GatherRows(const void* src, int64_t n_batch, int64_t n_rows, size_t row_bytes,
                        const int* idx, int64_t n_idx, void* dst);

// Row indices of a sequence after dropping visual tokens: the rows before the visual block,
// the kept visual rows (vis_begin + kept_vis[r]), then the rows after it, all in order.
//   kept_vis: [n_kept], indices into [0, n_vis), strictly ascending
//   rows:     [n_tokens − n_vis + n_kept]
absl::Status SequenceKeepRows(int n_tokens, int vis_begin, int n_vis, const int* kept_vis,
                              int n_kept, int* rows);

// GatherRows of SequenceKeepRows' rows, out of place: dst = the rows [0, vis_begin), the kept
// visual rows vis_begin + kept_vis[r], then the rows [vis_begin + n_vis, n_tokens), each row_bytes
// wide. The compaction after a pruning stage whose kept indices stay in the backend's memory
// (Backend::GatherKeptRows).
//   src: [n_tokens, row_bytes]   dst: [n_tokens − n_vis + n_kept, row_bytes], not overlapping src
// InvalidArgument as SequenceKeepRows, or on overlapping buffers.
absl::Status GatherKeptRows(const void* src, int n_tokens, size_t row_bytes, int vis_begin,
                            int n_vis, const int* kept_vis, int n_kept, void* dst);

}  // namespace hap::kernels
