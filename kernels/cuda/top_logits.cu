#include "kernels/cuda/top_logits.h"

#include <string>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/select.cuh"

namespace hap::cuda {
namespace {

constexpr int kMaxThreads = 1024;

// One block per row (blockIdx.x); blockDim.x a multiple of 32; 1 ≤ k ≤ min(n, kTopLogitsMaxK).
__global__ void TopLogitsKernel(const float* logits, int n, int k, const float* temperature,
                                float* values, int* ids, double* row_sum) {
  HAP_SHARED(unsigned, hist, kSelectBuckets);
  HAP_SHARED(unsigned, chosen, 2);  // BlockRadixSelect's state
  HAP_SHARED(int, has_nan, 1);
  HAP_SHARED(unsigned long long, scan_scratch, 32);
  HAP_SHARED(float, cand_value, kTopLogitsMaxK);  // the candidates in id order
  HAP_SHARED(int, cand_id, kTopLogitsMaxK);
  HAP_SHARED(float, row_max, 1);
  HAP_SHARED(double, sum_scratch, 32);
  const int64_t r = blockIdx.x;
  const float* x = logits + r * n;  // F32 [n]
  float* out_value = values + r * k;  // F32 [k]
  int* out_id = ids + r * k;          // I32 [k]

  if (threadIdx.x == 0) has_nan[0] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    if (x[i] != x[i]) has_nan[0] = 1;  // every writer stores the same value
  }
  __syncthreads();
  if (has_nan[0] != 0) {  // uniform: every thread leaves here
    for (int c = threadIdx.x; c < k; c += blockDim.x) {
      out_value[c] = NAN;
      out_id[c] = -1;
    }
    if (threadIdx.x == 0 && row_sum != nullptr) row_sum[r] = NAN;
    return;
  }

  // Radix select of the k-th largest key (the threshold) and of how many values with that key
  // are kept (those with the lowest ids); the histograms take strided loads.
  const SelectedKey kth =
      BlockRadixSelect(x, threadIdx.x, n, blockDim.x, static_cast<unsigned>(k), hist, chosen);
  const unsigned threshold = kth.key;
  const unsigned keep_equal = kth.keep_equal;

  // Which values with the threshold key are kept depends on id order: contiguous slices, each
  // with its output offset from the counts of the slices before it.
  const int slice = (n + blockDim.x - 1) / blockDim.x;
  const int begin = min(n, static_cast<int>(threadIdx.x) * slice);
  const int end = min(n, begin + slice);
  const SliceOffset at = SliceOutputOffset(x, begin, end, kth, scan_scratch);
  unsigned equal_seen = at.equal_seen;
  int out = at.out;
  for (int i = begin; i < end; ++i) {
    const unsigned key = OrderedKey(x[i]);
    const bool keep = key > threshold || (key == threshold && equal_seen < keep_equal);
    if (key == threshold) ++equal_seen;
    if (keep) {
      cand_value[out] = x[i];
      cand_id[out] = i;
      ++out;
    }
  }
  __syncthreads();

  // Candidates are in id order, so "equal with a lower id" is "equal at a lower slot".
  for (int c = threadIdx.x; c < k; c += blockDim.x) {
    const float v = cand_value[c];
    int rank = 0;
    for (int j = 0; j < k; ++j) {
      const float w = cand_value[j];
      rank += (w > v || (w == v && j < c)) ? 1 : 0;
    }
    out_value[rank] = v;
    out_id[rank] = cand_id[c];
    if (rank == 0) row_max[0] = v;
  }
  if (temperature == nullptr) return;  // uniform
  __syncthreads();
  const float t = temperature[r];
  double sum = 0.0;
  if (t > 0.f) {  // uniform within the block
    const double mx = row_max[0];
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      sum += exp((static_cast<double>(x[i]) - mx) / static_cast<double>(t));
    }
  }
  sum = BlockSumF64(sum, sum_scratch);
  if (threadIdx.x == 0) row_sum[r] = sum;
}

}  // namespace

KernelStatus TopLogits(const float* logits, int rows, int n, int k, const float* temperature,
                       float* values, int* ids, double* row_sum, Stream stream) {
  if (logits == nullptr || values == nullptr || ids == nullptr || rows < 0 || n <= 0 || k < 1 ||
      k > n || k > kTopLogitsMaxK || (temperature != nullptr && row_sum == nullptr)) {
    return KernelStatus::Error("TopLogits: null pointer or bad shape (rows=" +
                               std::to_string(rows) + " n=" + std::to_string(n) +
                               " k=" + std::to_string(k) + ")");
  }
  if (rows == 0) return KernelStatus::Ok();
  const int threads = n < kMaxThreads ? static_cast<int>(CeilDiv(n, 32)) * 32 : kMaxThreads;
  return Launch("TopLogitsKernel", TopLogitsKernel, dim3(rows), dim3(threads), 0, stream, logits,
                n, k, temperature, values, ids, row_sum);
}

}  // namespace hap::cuda
