// The GPU's product: cublasGemmEx with F32 accumulation (kernels/cuda/gemm.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/gemm.h"

namespace hap::cuda::internal {
namespace {

KernelStatus FromCublas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return KernelStatus::Ok();
  std::string message = std::string(what) + ": " + cublasGetStatusString(s);
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return KernelStatus::OutOfMemory(std::move(message));
  return KernelStatus::Error(std::move(message));
}

}  // namespace

KernelStatus CreateBlas(Stream stream, void** blas) {
  cublasHandle_t handle = nullptr;
  KernelStatus s = FromCublas(cublasCreate(&handle), "cublasCreate");
  if (!s.ok) return s;
  s = FromCublas(cublasSetStream(handle, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  if (!s.ok) {
    cublasDestroy(handle);
    return s;
  }
  *blas = handle;
  return s;
}

void DestroyBlas(void* blas) { cublasDestroy(static_cast<cublasHandle_t>(blas)); }

KernelStatus BlasGemm(void* blas, const void* x, const void* w, ElemType type, float* y, int m,
                      int n, int k, Stream) {
  const cudaDataType_t t = type == ElemType::kBF16  ? CUDA_R_16BF
                           : type == ElemType::kF16 ? CUDA_R_16F
                                                    : CUDA_R_32F;
  const float alpha = 1.f, beta = 0.f;
  // Column-major view: yᵀ [n, m] = w [n, k] · xᵀ [k, m]; w row-major [n, k] is column-major
  // [k, n] with leading dimension k, hence the transpose.
  return FromCublas(cublasGemmEx(static_cast<cublasHandle_t>(blas), CUBLAS_OP_T, CUBLAS_OP_N, n,
                                 m, k, &alpha, w, t, k, x, t, k, &beta, y, CUDA_R_32F, n,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx");
}

}  // namespace hap::cuda::internal
