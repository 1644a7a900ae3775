#include "kernels/cuda/rope.h"

#include "kernels/cuda/device.cuh"

namespace hap::cuda {
namespace {

constexpr int kThreads = 128;

// Block per row; thread t handles frequency i = t % half of head t / half, striding over heads.
__global__ void RopeKernel(float* x, const int32_t* positions, int n_heads, int head_dim,
                           float theta) {
  const int half = head_dim / 2;
  const double position = positions[blockIdx.x];
  float* row = x + static_cast<int64_t>(blockIdx.x) * n_heads * head_dim;
  for (int t = threadIdx.x; t < n_heads * half; t += blockDim.x) {
    const int h = t / half;
    const int i = t % half;
    const double inv_freq = 1.0 / pow(static_cast<double>(theta), (2.0 * i) / head_dim);
    double s, c;
    sincos(position * inv_freq, &s, &c);
    const float cs = static_cast<float>(c), sn = static_cast<float>(s);
    float* v = row + h * head_dim;
    const float a = v[i], b = v[i + half];
    v[i] = a * cs - b * sn;
    v[i + half] = b * cs + a * sn;
  }
}

}  // namespace

KernelStatus Rope(float* x, const int32_t* positions, int rows, int n_heads, int head_dim,
                  float theta, Stream stream) {
  if (head_dim <= 0 || head_dim % 2 != 0 || rows < 0 || n_heads <= 0) {
    return KernelStatus::Error("Rope: rows=" + std::to_string(rows) + " heads=" +
                               std::to_string(n_heads) + " head_dim=" + std::to_string(head_dim) +
                               " (head_dim must be even)");
  }
  if (rows == 0) return KernelStatus::Ok();
  return Launch("RopeKernel", RopeKernel, dim3(rows), dim3(kThreads), 0, stream, x, positions,
                n_heads, head_dim, theta);
}

}  // namespace hap::cuda
