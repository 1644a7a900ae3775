#include "kernels/cuda/visionzip_merge.h"

#include <cmath>

#include "kernels/cuda/device.cuh"

namespace hap::cuda {
namespace {

constexpr int kKeyThreads = 64;      // per key (block of kernel 1)
constexpr int kAssignThreads = 128;  // sources per block (kernel 2)
constexpr int kColumnThreads = 128;  // output columns per block (kernel 3)

// grid n_targets + n_sources, block 64. Key row r belongs to targets[r] (r < n_targets) or to
// sources[r − n_targets]; keys F64 [n_targets + n_sources, head_dim].
__global__ void VisionZipKeysKernel(const float* k, int n_tokens, int n_heads, int head_dim,
                                    const int* targets, int n_targets, const int* sources,
                                    double* keys) {
  HAP_SHARED(double, norm, 1);
  const int r = blockIdx.x;
  const int t = r < n_targets ? targets[r] : sources[r - n_targets];
  const bool ok = t >= 0 && t < n_tokens;  // uniform over the block
  double* key = keys + static_cast<int64_t>(r) * head_dim;
  const float* kt = k + static_cast<int64_t>(ok ? t : 0) * n_heads * head_dim;
  for (int c = threadIdx.x; c < head_dim; c += blockDim.x) {
    double sum = 0.0;
    for (int h = 0; h < n_heads; ++h) sum += kt[static_cast<int64_t>(h) * head_dim + c];
    key[c] = ok ? sum / n_heads : NAN;
  }
  __syncthreads();  // the block's writes to `key` are visible to the block
  if (threadIdx.x == 0) {
    double sq = 0.0;
    for (int c = 0; c < head_dim; ++c) sq += key[c] * key[c];
    // A zero key would be 0/0 in VisionZip; it is similar to nothing (similarity 0). The
    // reference's std::max(‖key‖, 1e-12), NaN kept.
    const double len = sqrt(sq);
    norm[0] = len < 1e-12 ? 1e-12 : len;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < head_dim; c += blockDim.x) key[c] /= norm[0];
}

// One thread per source: assign[s] = the first target with the largest similarity.
__global__ void VisionZipAssignKernel(const double* keys, int head_dim, int n_targets,
                                      int n_sources, int* assign) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n_sources) return;
  const double* a = keys + static_cast<int64_t>(n_targets + s) * head_dim;
  int best = 0;
  double best_sim = -1e300;
  for (int c = 0; c < n_targets; ++c) {
    const double* b = keys + static_cast<int64_t>(c) * head_dim;  // every thread: a broadcast
    double sim = 0.0;
    for (int e = 0; e < head_dim; ++e) sim += a[e] * b[e];
    if (sim > best_sim) {
      best_sim = sim;
      best = c;
    }
  }
  assign[s] = best;
}

// grid (n_targets, ceil(d_model / 128)), block 128: one output column per thread.
__global__ void VisionZipMergeKernel(const float* hidden, int n_tokens, int d_model,
                                     const int* targets, const int* sources, int n_sources,
                                     const int* assign, float* out, int* merged_count) {
  const int c = blockIdx.x;
  const int e = blockIdx.y * blockDim.x + threadIdx.x;
  double acc = 0.0;
  int m = 0;
  for (int s = 0; s < n_sources; ++s) {
    if (assign[s] != c) continue;  // the same branch for the whole warp
    ++m;
    const int t = sources[s];
    if (e < d_model) {
      acc += t >= 0 && t < n_tokens ? hidden[static_cast<int64_t>(t) * d_model + e] : NAN;
    }
  }
  if (merged_count != nullptr && blockIdx.y == 0 && threadIdx.x == 0) merged_count[c] = m;
  if (e >= d_model) return;
  const int t = targets[c];
  const double h = t >= 0 && t < n_tokens ? hidden[static_cast<int64_t>(t) * d_model + e] : NAN;
  out[static_cast<int64_t>(c) * d_model + e] = static_cast<float>(h + (m > 0 ? acc / m : 0.0));
}

}  // namespace

size_t VisionZipMergeWorkspaceBytes(int n_targets, int n_sources, int head_dim) {
  const size_t keys = sizeof(double) * (static_cast<size_t>(n_targets) + n_sources) * head_dim;
  return (keys + 255) / 256 * 256 + sizeof(int) * static_cast<size_t>(n_sources);
}

KernelStatus VisionZipMerge(const VisionZipMergeArgs& a, void* workspace, Stream stream) {
  if (a.k == nullptr || a.hidden == nullptr || a.targets == nullptr || a.out == nullptr ||
      (a.n_sources > 0 && (a.sources == nullptr || workspace == nullptr))) {
    return KernelStatus::Error("VisionZipMerge: null pointer argument");
  }
  if (a.n_tokens <= 0 || a.n_heads <= 0 || a.head_dim <= 0 || a.d_model <= 0 || a.n_targets <= 0 ||
      a.n_sources < 0) {
    return KernelStatus::Error("VisionZipMerge: sizes must be positive");
  }
  double* keys = static_cast<double*>(workspace);
  int* assign = nullptr;
  if (a.n_sources > 0) {
    const size_t key_bytes =
        sizeof(double) * (static_cast<size_t>(a.n_targets) + a.n_sources) * a.head_dim;
    assign = reinterpret_cast<int*>(static_cast<char*>(workspace) + (key_bytes + 255) / 256 * 256);
    const KernelStatus s1 =
        Launch("VisionZipKeysKernel", VisionZipKeysKernel, dim3(a.n_targets + a.n_sources),
               dim3(kKeyThreads), 0, stream, a.k, a.n_tokens, a.n_heads, a.head_dim, a.targets,
               a.n_targets, a.sources, keys);
    if (!s1.ok) return s1;
    const KernelStatus s2 =
        Launch("VisionZipAssignKernel", VisionZipAssignKernel,
               dim3(CeilDiv(a.n_sources, kAssignThreads)), dim3(kAssignThreads), 0, stream,
               static_cast<const double*>(keys), a.head_dim, a.n_targets, a.n_sources, assign);
    if (!s2.ok) return s2;
  }
  return Launch("VisionZipMergeKernel", VisionZipMergeKernel,
                dim3(a.n_targets, CeilDiv(a.d_model, kColumnThreads)), dim3(kColumnThreads), 0,
                stream, a.hidden, a.n_tokens, a.d_model, a.targets, a.sources, a.n_sources,
                static_cast<const int*>(assign), a.out, a.merged_count);
}

}  // namespace hap::cuda
