#include "kernels/cuda/gemm.h"

#include <cstdint>
#include <string>

#include "kernels/cuda/add.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/graph.h"

namespace hap::cuda {

KernelStatus Gemm::Create(Stream stream, std::unique_ptr<Gemm>* out) {
  std::unique_ptr<Gemm> g(new Gemm());
  g->stream_ = stream;
  KernelStatus s = internal::CreateBlas(stream, &g->blas_);
  if (!s.ok) return s;
  *out = std::move(g);
  return KernelStatus::Ok();
}

Gemm::~Gemm() {
  if (scratch_ != nullptr) DeviceFree(scratch_);
  if (blas_ != nullptr) internal::DestroyBlas(blas_);
}

KernelStatus Gemm::EnsureScratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return KernelStatus::Ok();
  if (Capturing()) {
    return KernelStatus::Error(
        "Linear: growing the product's rounding scratch while capturing a graph (an allocation)");
  }
  // The previous scratch may still be read by a product queued on the stream.
  KernelStatus s = Synchronize(stream_);
  if (!s.ok) return s;
  if (scratch_ != nullptr) DeviceFree(scratch_);
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  s = DeviceAlloc(&scratch_, bytes);
  if (s.ok) scratch_bytes_ = bytes;
  ++scratch_generation_;
  return s;
}

namespace {

KernelStatus CheckShape(const char* op, int m, int n, int k) {
  if (m >= 0 && n > 0 && k > 0) return KernelStatus::Ok();
  return KernelStatus::Error(std::string(op) + ": m=" + std::to_string(m) +
                             " n=" + std::to_string(n) + " k=" + std::to_string(k));
}

}  // namespace

KernelStatus Gemm::Linear(const float* x, const void* w, ElemType w_type, const float* bias,
                          float* y, int m, int n, int k) {
  KernelStatus s = CheckShape("Linear", m, n, k);
  if (!s.ok || m == 0) return s;
  if (w_type == ElemType::kF32) return Product(x, w, w_type, bias, y, m, n, k);
  s = EnsureScratch(static_cast<size_t>(m) * k * sizeof(uint16_t));
  if (!s.ok) return s;
  s = RoundF32To(w_type, x, scratch_, int64_t{m} * k, stream_);
  if (!s.ok) return s;
  return Product(scratch_, w, w_type, bias, y, m, n, k);
}

KernelStatus Gemm::LinearRounded(const void* x_narrow, const void* w, ElemType w_type,
                                 const float* bias, float* y, int m, int n, int k) {
  KernelStatus s = CheckShape("LinearRounded", m, n, k);
  if (!s.ok || m == 0) return s;
  if (w_type == ElemType::kF32) {
    return KernelStatus::Error("LinearRounded: the weights must be BF16 or F16");
  }
  return Product(x_narrow, w, w_type, bias, y, m, n, k);
}

KernelStatus Gemm::LinearRoundedAccumulate(const void* x_narrow, const void* w, ElemType w_type,
                                           float* y, int m, int n, int k) {
  KernelStatus s = CheckShape("LinearRoundedAccumulate", m, n, k);
  if (!s.ok || m == 0) return s;
  if (w_type == ElemType::kF32) {
    return KernelStatus::Error("LinearRoundedAccumulate: the weights must be BF16 or F16");
  }
  return internal::BlasGemm(blas_, x_narrow, w, w_type, y, m, n, k, stream_, /*beta=*/1.f);
}

KernelStatus Gemm::BatchedProduct(ElemType type, bool b_transposed, int m, int n, int k,
                                  float alpha, const void* a, int64_t lda, int64_t stride_a,
                                  const void* b, int64_t ldb, int64_t stride_b, float* c,
                                  int64_t ldc, int64_t stride_c, int batch) {
  KernelStatus s = CheckShape("BatchedProduct", m, n, k);
  if (!s.ok) return s;
  const int64_t b_cols = b_transposed ? k : n;
  if (batch < 0 || lda < k || ldb < b_cols || ldc < n || stride_a < 0 || stride_b < 0 ||
      stride_c < 0 || lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX) {
    return KernelStatus::Error("BatchedProduct: lda=" + std::to_string(lda) +
                               " ldb=" + std::to_string(ldb) + " ldc=" + std::to_string(ldc) +
                               " batch=" + std::to_string(batch) + " for m=" + std::to_string(m) +
                               " n=" + std::to_string(n) + " k=" + std::to_string(k));
  }
  if (m == 0 || batch == 0) return KernelStatus::Ok();
  return internal::BlasGemmBatched(blas_, type, b_transposed, m, n, k, alpha, a, lda, stride_a, b,
                                   ldb, stride_b, c, ldc, stride_c, batch, stream_);
}

KernelStatus Gemm::Product(const void* x, const void* w, ElemType type, const float* bias, float* y,
                           int m, int n, int k) {
  KernelStatus s = internal::BlasGemm(blas_, x, w, type, y, m, n, k, stream_);
  if (!s.ok || bias == nullptr) return s;
  return AddBias(y, bias, m, n, stream_);
}

}  // namespace hap::cuda
