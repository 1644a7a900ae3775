// Matrix products of the CUDA backend: y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]) with w as
// stored (F32, BF16 or F16) and F32 accumulation. On a GPU the product is cuBLAS
// (cublasGemmEx, gemm_cuda.cc); on the emulation it is the CPU's Linear (gemm_emulated.cc),
// the one place the emulation does not run kernel source of this directory.
//
// cuBLAS multiplies operands of one type, so for BF16/F16 weights x is first rounded to the
// weight's type on the device (convert.h); the CPU's BF16 products round x to BF16 as well.
// For F16 weights the rounding saturates activations beyond ±65504 to ±Inf, as serving an F16
// checkpoint in F16 does. F32 weights multiply in full F32 (no TF32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

class Gemm {
 public:
  // A product context on `stream` (a cuBLAS handle on a GPU).
  static KernelStatus Create(Stream stream, std::unique_ptr<Gemm>* out);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // x F32 [m, k], w [n, k] of w_type, bias F32 [n] or null, y F32 [m, n] (not aliasing x).
  // Device pointers. Ordered on the context's stream.
  KernelStatus Linear(const float* x, const void* w, ElemType w_type, const float* bias, float* y,
                      int m, int n, int k);
  // Linear with x already rounded to the weights' narrow type (x_narrow [m, k] of w_type, kBF16
  // or kF16: RoundF32To's or RmsNormRounded's output): the same product without rounding again.
  KernelStatus LinearRounded(const void* x_narrow, const void* w, ElemType w_type,
                             const float* bias, float* y, int m, int n, int k);
  // y += x_narrow · wᵀ (no bias), the product added to y as it is written: a residual add
  // without a launch of its own (the same F32 sum as the product then Add).
  KernelStatus LinearRoundedAccumulate(const void* x_narrow, const void* w, ElemType w_type,
                                       float* y, int m, int n, int k);
  // `batch` products c_i = alpha · a_i · op(b_i) (F32 accumulation, F32 out), row-major: a_i
  // [m, k] with rows lda elements apart, c_i [m, n] with rows ldc apart; b_i [n, k] with
  // b_transposed (c = a·bᵀ) or [k, n] (c = a·b), rows ldb apart. Operand i starts stride_* elements
  // after operand i − 1. a and b of `type`. Attention's q·kᵀ and p·v over heads.
  KernelStatus BatchedProduct(ElemType type, bool b_transposed, int m, int n, int k, float alpha,
                              const void* a, int64_t lda, int64_t stride_a, const void* b,
                              int64_t ldb, int64_t stride_b, float* c, int64_t ldc,
                              int64_t stride_c, int batch);
  Stream stream() const { return stream_; }
  // How many times the rounding scratch was (re)allocated: a graph whose products round x there
  // is stale once it changes (Backend::Capture). It grows while nothing is captured only.
  uint64_t scratch_generation() const { return scratch_generation_; }

 private:
  Gemm() = default;
  KernelStatus EnsureScratch(size_t bytes);
  // y = x · wᵀ (+ bias) with x already in the weights' type.
  KernelStatus Product(const void* x, const void* w, ElemType type, const float* bias, float* y,
                       int m, int n, int k);

  Stream stream_ = nullptr;
  void* blas_ = nullptr;     // cublasHandle_t on a GPU
  void* scratch_ = nullptr;  // x rounded to the weights' type
  size_t scratch_bytes_ = 0;
  uint64_t scratch_generation_ = 0;
};

namespace internal {

// The product itself, implemented once per build: y[m, n] = x[m, k] · w[n, k]ᵀ with x and w
// both of `type`.
KernelStatus CreateBlas(Stream stream, void** blas);
void DestroyBlas(void* blas);
// beta 1 adds the product to y (0: y is overwritten).
KernelStatus BlasGemm(void* blas, const void* x, const void* w, ElemType type, float* y, int m,
                      int n, int k, Stream stream, float beta = 0.f);
// Gemm::BatchedProduct's product, its arguments checked.
KernelStatus BlasGemmBatched(void* blas, ElemType type, bool b_transposed, int m, int n, int k,
                             float alpha, const void* a, int64_t lda, int64_t stride_a,
                             const void* b, int64_t ldb, int64_t stride_b, float* c, int64_t ldc,
                             int64_t stride_c, int batch, Stream stream);

}  // namespace internal
}  // namespace hap::cuda
