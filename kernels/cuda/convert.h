// F32 activations rounded to BF16 or F16 (nearest even), bit for bit base/dtype.h's
// ConvertFromF32: the input of a cuBLAS product whose weights are stored narrow (cuBLAS
// multiplies operands of one type), as the CPU's BF16 products round x to BF16.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

// out[i] = round(x[i]) in `type` (kBF16 or kF16; uint16 bit patterns). Device pointers.
KernelStatus RoundF32To(ElemType type, const float* x, void* out, int64_t n, Stream stream);
// RoundF32To of a into a_out and of b into b_out (n values each) in one launch: a prefill
// layer's K and V rows into a BF16 cache. The same bits as the two calls.
KernelStatus RoundF32PairTo(ElemType type, const float* a, void* a_out, const float* b, void* b_out,
                            int64_t n, Stream stream);

// A decode step's new KV rows into their caches: row i of k and of v (F32 [n, d]) as `type`
// (kF32 copied, kBF16 rounded to nearest even) at k_dst[i] and v_dst[i]; the address tables and
// the rows are device memory. One launch for the batch.
KernelStatus StoreRowsAs(ElemType type, const float* k, const float* v, void* const* k_dst,
                         void* const* v_dst, int n, int d, Stream stream);

}  // namespace hap::cuda
