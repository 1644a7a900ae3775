// The emulation's product: the CPU's Linear on the same operands (x already in the weights'
// type, so each product of two narrow values is exact in F32, as on the GPU), in chunks of rows
// its narrow kernel takes, which computes each output the same way whatever the rows beside it.
// So a row's product does not depend on the others in the call, and the tests can compare a
// batched pass (a batched prefill, a decode batch) with each sequence's own bit for bit; cuBLAS
// picks its tiles by shape and promises no such thing.
#include <algorithm>
#include <atomic>
#include <functional>
#include <vector>

#include "base/dtype.h"
#include "base/tensor.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/emulation_counts.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/simt/simt.h"

namespace hap::cuda {
namespace {

std::atomic<int64_t> g_products{0};

}  // namespace

int64_t emulation::Products() { return g_products.load(); }
int64_t emulation::KernelLaunches() { return static_cast<int64_t>(simt::LaunchCount()); }
int64_t emulation::KernelLaunches(const char* kernel) {
  return static_cast<int64_t>(simt::LaunchCount(kernel));
}

namespace internal {

KernelStatus CreateBlas(Stream, void** blas) {
  *blas = nullptr;
  return KernelStatus::Ok();
}

void DestroyBlas(void*) {}

// The product now (BlasGemm, or a graph's replay of it).
KernelStatus BlasGemmNow(const void* x, const void* w, ElemType type, float* y, int m, int n, int k,
                         float beta) {
  g_products.fetch_add(1);
  const DType dtype = type == ElemType::kBF16  ? DType::kBF16
                      : type == ElemType::kF16 ? DType::kF16
                                               : DType::kF32;
  const size_t esize = DTypeSize(dtype);
  if (!IsDeviceRange(x, esize * m * k) || !IsDeviceRange(w, esize * n * k) ||
      !IsDeviceRange(y, sizeof(float) * m * n)) {
    return KernelStatus::Error("Linear: an operand is not device memory");
  }
  std::vector<float> xf(static_cast<size_t>(m) * k);
  ConvertToF32(dtype, x, xf.data(), xf.size());
  const TensorView wv{w, dtype, Device::kCpu, {n, k}};
  // y += product where beta is 1: the product in F32, then one F32 addition per element, as a
  // separate Add.
  std::vector<float> product(beta == 0.f ? 0 : static_cast<size_t>(m) * n);
  float* out = beta == 0.f ? y : product.data();
  const int chunk = dtype == DType::kF32 ? cpu::kGemvRowsF32 : cpu::kGemvRowsNarrow;
  for (int r = 0; r < m; r += chunk) {
    const int64_t rows = std::min(chunk, m - r);
    absl::Status s = cpu::Linear(xf.data() + int64_t{r} * k, wv, nullptr, out + int64_t{r} * n,
                                 static_cast<int>(rows), LinearRows::kIndependent);
    if (!s.ok()) return KernelStatus::Error("Linear: " + std::string(s.message()));
  }
  for (size_t i = 0; i < product.size(); ++i) y[i] = beta * y[i] + product[i];
  return KernelStatus::Ok();
}

// The batched product now (BlasGemmBatched, or a graph's replay of it).
KernelStatus BlasGemmBatchedNow(ElemType type, bool b_transposed, int m, int n, int k, float alpha,
                                const void* a, int64_t lda, int64_t stride_a, const void* b,
                                int64_t ldb, int64_t stride_b, float* c, int64_t ldc,
                                int64_t stride_c, int batch) {
  g_products.fetch_add(1);
  const DType dtype = type == ElemType::kBF16  ? DType::kBF16
                      : type == ElemType::kF16 ? DType::kF16
                                               : DType::kF32;
  const size_t esize = DTypeSize(dtype);
  const int64_t last = batch - 1;
  const int64_t b_rows = b_transposed ? n : k, b_cols = b_transposed ? k : n;
  if (!IsDeviceRange(a, esize * (last * stride_a + (m - 1) * lda + k)) ||
      !IsDeviceRange(b, esize * (last * stride_b + (b_rows - 1) * ldb + b_cols)) ||
      !IsDeviceRange(c, sizeof(float) * (last * stride_c + (m - 1) * ldc + n))) {
    return KernelStatus::Error("BatchedProduct: an operand is not device memory");
  }
  // Each product of two narrow values is exact in F32; F32 sums in k order.
  auto load = [&](const void* base, int64_t i) {
    float v;
    ConvertToF32(dtype, static_cast<const char*>(base) + i * esize, &v, 1);
    return v;
  };
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        float acc = 0.f;
        for (int t = 0; t < k; ++t) {
          const int64_t bj = b_transposed ? int64_t{j} * ldb + t : int64_t{t} * ldb + j;
          acc += load(a, bi * stride_a + i * lda + t) * load(b, bi * stride_b + bj);
        }
        c[bi * stride_c + i * ldc + j] = alpha * acc;
      }
    }
  }
  return KernelStatus::Ok();
}

KernelStatus BlasGemm(void*, const void* x, const void* w, ElemType type, float* y, int m, int n,
                      int k, Stream, float beta) {
  const std::function<KernelStatus()> run = [=] {
    return BlasGemmNow(x, w, type, y, m, n, k, beta);
  };
  return emulation::Record(run) ? KernelStatus::Ok() : run();
}

KernelStatus BlasGemmBatched(void*, ElemType type, bool b_transposed, int m, int n, int k,
                             float alpha, const void* a, int64_t lda, int64_t stride_a,
                             const void* b, int64_t ldb, int64_t stride_b, float* c, int64_t ldc,
                             int64_t stride_c, int batch, Stream) {
  const std::function<KernelStatus()> run = [=] {
    return BlasGemmBatchedNow(type, b_transposed, m, n, k, alpha, a, lda, stride_a, b, ldb,
                              stride_b, c, ldc, stride_c, batch);
  };
  return emulation::Record(run) ? KernelStatus::Ok() : run();
}

}  // namespace internal
}  // namespace hap::cuda
