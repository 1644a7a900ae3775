// Compaction after pruning on the GPU (kernels/cpu/prune/gather_rows.h): gather the kept rows of a
// buffer (hidden states, position ids, a layer's K or V) so the next layer sees only them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// dst[r, :] = src[idx[r], :] for r < n_idx; rows of row_bytes bytes, copied in 16-, 4- or 1-byte
// units (the widest that row_bytes and both pointers' alignment allow), one unit per thread.
//   src: [n_rows, row_bytes]   dst: [n_idx, row_bytes]   idx: I32 [n_idx]   all device pointers
// idx must lie in [0, n_rows): it is on the device, so the backend checks its host copy before
// it uploads it.
//
// Out of place only: src == dst, or src inside dst, is an error. The CPU reference compacts in
// place by copying rows in order, which is safe there because row r is written only after every
// earlier row was read; here all rows are copied at once, so a thread may overwrite a source row
// (dst row r is src row r) before the thread that copies src row r to an earlier place has read
// it. In-place compaction gathers into a scratch buffer and copies that back.
// Other overlaps race the same way and are the caller's to avoid (src's extent is not known
// here). Errors: null pointers, n_idx < 0, overlap as above. n_idx = 0 launches nothing.
KernelStatus GatherRows(const void* src, size_t row_bytes, const int* idx, int64_t n_idx, void* dst,
                        Stream stream);

// The compaction after a pruning stage whose kept indices were chosen on the device
// (kernels::GatherKeptRows): dst = src rows [0, vis_begin), then vis_begin + kept[r] for
// r < n_kept, then [vis_begin + n_vis, n_tokens), with no host copy of kept. Each thread finds its
// row's source from kept itself. An entry of kept outside [0, n_vis) — a selection that found a
// NaN score writes −1 throughout — copies row vis_begin instead, so nothing reads out of bounds;
// the caller, which copies kept back once the prefill ends, reports it then.
//   src: [n_tokens, row_bytes]   dst: [n_tokens − n_vis + n_kept, row_bytes]   kept: I32 [n_kept]
// Errors: null pointers, a layout outside [0, n_tokens), n_kept outside [0, n_vis] (n_vis ≥ 1
// when n_kept > 0), dst overlapping src.
KernelStatus GatherKeptRows(const void* src, int n_tokens, size_t row_bytes, int vis_begin,
                            int n_vis, const int* kept, int n_kept, void* dst, Stream stream);

// GatherKeptRows of two arrays with the same rows (a prefill's hidden states and position ids,
// each row of its own width) in one launch, each in its own widest unit: the same bytes as the
// two calls. Errors as GatherKeptRows' for either array, and rows of 0 bytes.
KernelStatus GatherKeptRowsPair(const void* a_src, size_t a_row_bytes, void* a_dst,
                                const void* b_src, size_t b_row_bytes, void* b_dst, int n_tokens,
                                int vis_begin, int n_vis, const int* kept, int n_kept,
                                Stream stream);

}  // namespace hap::cuda
