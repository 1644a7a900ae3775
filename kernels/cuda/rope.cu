#include "kernels/cuda/device.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/rope.h"

namespace hap::cuda {
namespace {

constexpr int kThreads = 128;

// Widest head RopeKernel takes (its per-row table holds head_dim / 2 angles).
constexpr int kMaxHeadDim = 1024;

// Entry i of the row's tables: cos and sin of `angle`, computed in F64 as the CPU's reference.
__device__ __forceinline__ void StoreAngle(double angle, int i, float* cos_table,
                                           float* sin_table) {
  double s, c;
  sincos(angle, &s, &c);
  cos_table[i] = static_cast<float>(c);
  sin_table[i] = static_cast<float>(s);
}

// Rotates pair (i, i + half) of the head at v by the tables' entry i.
__device__ __forceinline__ void RotatePair(float* v, int i, int half, const float* cos_table,
                                           const float* sin_table) {
  const float cs = cos_table[i], sn = sin_table[i];
  const float a = v[i], b = v[i + half];
  v[i] = RotatedFirst(a, b, cs, sn);
  v[i + half] = RotatedSecond(a, b, cs, sn);
}

// Block per row. The row's angles are the same for every head: the first half of the threads
// compute cos and sin of position · θ^(−2i/head_dim) (in F64, as the CPU's reference) once into
// shared memory, then thread t rotates pair i = t % half of head t / half, striding over heads.
// x2 (n_heads2 heads a row; null with 0) is rotated by the same row's angles: a layer's q and k
// in one launch.
__global__ void RopeKernel(float* x, int n_heads, float* x2, int n_heads2, const int32_t* positions,
                           int head_dim, float theta) {
  HAP_SHARED(float, cos_table, kMaxHeadDim / 2);
  HAP_SHARED(float, sin_table, kMaxHeadDim / 2);
  const int half = head_dim / 2;
  const double position = positions[blockIdx.x];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    RopeCosSin(position, i, head_dim, theta, &cos_table[i], &sin_table[i]);
  }
  __syncthreads();
  float* row = x + static_cast<int64_t>(blockIdx.x) * n_heads * head_dim;
  float* row2 =
      x2 == nullptr ? nullptr : x2 + static_cast<int64_t>(blockIdx.x) * n_heads2 * head_dim;
  for (int t = threadIdx.x; t < (n_heads + n_heads2) * half; t += blockDim.x) {
    const int h = t / half;
    float* v = h < n_heads ? row + h * head_dim : row2 + (h - n_heads) * head_dim;
    RotatePair(v, t % half, half, cos_table, sin_table);
  }
}

// RopeKernel with each pair's position taken from its section's axis and, with
// per_section_frequencies, its frequency from its place in that section.
__global__ void RopeAxesKernel(float* x, const int32_t* positions, int axes, int n_heads,
                               int head_dim, float theta, int s0, int s1,
                               bool per_section_frequencies) {
  HAP_SHARED(float, cos_table, kMaxHeadDim / 2);
  HAP_SHARED(float, sin_table, kMaxHeadDim / 2);
  const int half = head_dim / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const int axis = i < s0 ? 0 : i < s0 + s1 ? 1 : 2;
    const int j = axis == 0 ? i : axis == 1 ? i - s0 : i - s0 - s1;
    const int section = axis == 0 ? s0 : axis == 1 ? s1 : half - s0 - s1;
    const double exponent =
        per_section_frequencies ? static_cast<double>(j) / section : (2.0 * i) / head_dim;
    const double inv_freq = 1.0 / pow(static_cast<double>(theta), exponent);
    const double position = positions[static_cast<int64_t>(blockIdx.x) * axes + axis];
    StoreAngle(position * inv_freq, i, cos_table, sin_table);
  }
  __syncthreads();
  float* row = x + static_cast<int64_t>(blockIdx.x) * n_heads * head_dim;
  for (int t = threadIdx.x; t < n_heads * half; t += blockDim.x) {
    RotatePair(row + (t / half) * head_dim, t % half, half, cos_table, sin_table);
  }
}

// Thread per entry [p, i] of the tables (rows of head_dim / 2): cos and sin of pair i at p.
__global__ void RopeTableKernel(float* cos_table, float* sin_table, int64_t entries, int head_dim,
                                float theta) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= entries) return;
  const int half = head_dim / 2;
  RopeCosSin(static_cast<double>(e / half), static_cast<int>(e % half), head_dim, theta,
             &cos_table[e], &sin_table[e]);
}

}  // namespace

KernelStatus RopeTable(float* cos_table, float* sin_table, int positions, int head_dim, float theta,
                       Stream stream) {
  if (head_dim <= 0 || head_dim % 2 != 0 || positions < 0 || cos_table == nullptr ||
      sin_table == nullptr) {
    return KernelStatus::Error("RopeTable: positions=" + std::to_string(positions) +
                               " head_dim=" + std::to_string(head_dim) +
                               " (head_dim must be even), or a null table");
  }
  if (positions == 0) return KernelStatus::Ok();
  const int64_t entries = int64_t{positions} * (head_dim / 2);
  return Launch("RopeTableKernel", RopeTableKernel, dim3(CeilDiv(entries, kThreads)),
                dim3(kThreads), 0, stream, cos_table, sin_table, entries, head_dim, theta);
}

KernelStatus RopeAxes(const RopeAxesArgs& a, Stream stream) {
  if (const char* error = a.Error(); *error != 0) return KernelStatus::Error(error);
  if (a.head_dim > kMaxHeadDim) {
    return KernelStatus::Error("RopeAxes: head_dim " + std::to_string(a.head_dim) + " is over " +
                               std::to_string(kMaxHeadDim));
  }
  if (a.rows == 0) return KernelStatus::Ok();
  return Launch("RopeAxesKernel", RopeAxesKernel, dim3(a.rows), dim3(kThreads), 0, stream, a.x,
                a.positions, a.axes(), a.n_heads, a.head_dim, a.theta, a.sections[0], a.sections[1],
                a.per_section_frequencies);
}

KernelStatus Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
                  float theta, Stream stream) {
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > kMaxHeadDim || rows < 0 || n_heads <= 0) {
    return KernelStatus::Error(
        "Rope: rows=" + std::to_string(rows) + " heads=" + std::to_string(n_heads) +
        " head_dim=" + std::to_string(head_dim) + " (head_dim must be even, at most " +
        std::to_string(kMaxHeadDim) + ")");
  }
  if (rows == 0) return KernelStatus::Ok();
  return Launch("RopeKernel", RopeKernel, dim3(rows), dim3(kThreads), 0, stream, x, n_heads,
                static_cast<float*>(nullptr), 0, positions, head_dim, theta);
}

KernelStatus RopePair(float* x, int n_heads, float* x2, int n_heads2, const int32_t* positions,
                      int rows, int head_dim, float theta, Stream stream) {
  if (x2 == nullptr || n_heads2 <= 0 || x2 == x) {
    return KernelStatus::Error("RopePair: no second array, or the first one again");
  }
  KernelStatus st = Rope(x, positions, 0, n_heads, head_dim, theta, stream);  // checks the shape
  if (!st.ok || rows == 0) return st;
  return Launch("RopeKernel", RopeKernel, dim3(rows), dim3(kThreads), 0, stream, x, n_heads, x2,
                n_heads2, positions, head_dim, theta);
}

}  // namespace hap::cuda
