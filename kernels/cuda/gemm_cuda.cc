// The GPU's product: cublasGemmEx with F32 accumulation (kernels/cuda/gemm.h).
//
// cuBLAS is opened with dlopen when the first product context is created, not linked: its
// libraries (libcublas and the libcublasLt it loads, about 600 MB) cost every process that maps
// them some 150 MiB of resident memory at start-up, and a binary built with HAP_CUDA=ON serves
// on the CPU as often as on a GPU. Only `--device cuda` pays for them.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/op_profile.h"

namespace hap::cuda::internal {
namespace {

// The cuBLAS entry points this file calls, resolved from the library.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // cublasGemmEx is overloaded in C++ (an inline wrapper takes a cudaDataType compute type): this
  // is the exported one.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                            int, int, int, const void*, const void*, cudaDataType,
                                            int, long long, const void*, cudaDataType, int,
                                            long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t,
                                            cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  std::string error;  // why loading failed; empty once loaded
};

#define HAP_STR2(x) #x
#define HAP_STR(x) HAP_STR2(x)
constexpr char kCublasSoname[] = "libcublas.so." HAP_STR(CUBLAS_VER_MAJOR);

const Cublas& LoadCublas() {
  static Cublas* cublas = [] {
    auto* c = new Cublas;
    // The loader's search path first (the runpath the build set, LD_LIBRARY_PATH, ld.so.conf),
    // then the toolkit this was built against.
    void* lib = dlopen(kCublasSoname, RTLD_NOW | RTLD_LOCAL);
    std::string first_error = lib == nullptr ? dlerror() : "";
#ifdef HAP_CUDA_LIBRARY_DIR
    if (lib == nullptr) {
      lib = dlopen((std::string(HAP_CUDA_LIBRARY_DIR) + "/" + kCublasSoname).c_str(),
                   RTLD_NOW | RTLD_LOCAL);
    }
#endif
    if (lib == nullptr) {
      c->error = std::string("cannot load cuBLAS (") + kCublasSoname + "): " + first_error;
      return c;
    }
    auto resolve = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr && c->error.empty()) {
        c->error = std::string(kCublasSoname) + " has no symbol " + name;
      }
    };
    resolve(c->create, "cublasCreate_v2");
    resolve(c->destroy, "cublasDestroy_v2");
    resolve(c->set_stream, "cublasSetStream_v2");
    resolve(c->gemm_ex, "cublasGemmEx");
    resolve(c->gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
    resolve(c->status_string, "cublasGetStatusString");
    return c;
  }();
  return *cublas;
}

KernelStatus FromCublas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return KernelStatus::Ok();
  std::string message = std::string(what) + ": " + LoadCublas().status_string(s);
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return KernelStatus::OutOfMemory(std::move(message));
  return KernelStatus::Error(std::move(message));
}

}  // namespace

KernelStatus CreateBlas(Stream stream, void** blas) {
  const Cublas& cublas = LoadCublas();
  if (!cublas.error.empty()) return KernelStatus::Error(cublas.error);
  cublasHandle_t handle = nullptr;
  KernelStatus s = FromCublas(cublas.create(&handle), "cublasCreate");
  if (!s.ok) return s;
  s = FromCublas(cublas.set_stream(handle, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  if (!s.ok) {
    cublas.destroy(handle);
    return s;
  }
  *blas = handle;
  return s;
}

// Called only for a handle CreateBlas made, so cuBLAS is loaded.
void DestroyBlas(void* blas) { LoadCublas().destroy(static_cast<cublasHandle_t>(blas)); }

namespace {

cudaDataType_t CudaType(ElemType type) {
  return type == ElemType::kBF16 ? CUDA_R_16BF : type == ElemType::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

}  // namespace

KernelStatus BlasGemmBatched(void* blas, ElemType type, bool b_transposed, int m, int n, int k,
                             float alpha, const void* a, int64_t lda, int64_t stride_a,
                             const void* b, int64_t ldb, int64_t stride_b, float* c, int64_t ldc,
                             int64_t stride_c, int batch, Stream stream) {
  const cudaDataType_t t = CudaType(type);
  const float beta = 0.f;
  profile::Begin(stream);
  struct Done {
    Stream stream;
    ~Done() { profile::End(stream, "cublas batched product"); }
  } done{stream};
  // Column-major view: cᵀ [n, m] = op(b) · aᵀ, where a row-major [m, k] is aᵀ column-major with
  // leading dimension lda, and b row-major [n, k] (transposed) is column-major [k, n].
  return FromCublas(
      LoadCublas().gemm_strided_batched_ex(
          static_cast<cublasHandle_t>(blas), b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,
          n, m, k, &alpha, b, t, static_cast<int>(ldb), stride_b, a, t, static_cast<int>(lda),
          stride_a, &beta, c, CUDA_R_32F, static_cast<int>(ldc), stride_c, batch,
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

KernelStatus BlasGemm(void* blas, const void* x, const void* w, ElemType type, float* y, int m,
                      int n, int k, Stream stream, float beta) {
  const cudaDataType_t t = CudaType(type);
  profile::Begin(stream);
  struct Done {
    Stream stream;
    ~Done() { profile::End(stream, "cublas product"); }
  } done{stream};
  const float alpha = 1.f;
  // Column-major view: yᵀ [n, m] = w [n, k] · xᵀ [k, m]; w row-major [n, k] is column-major
  // [k, n] with leading dimension k, hence the transpose.
  return FromCublas(LoadCublas().gemm_ex(static_cast<cublasHandle_t>(blas), CUBLAS_OP_T,
                                         CUBLAS_OP_N, n, m, k, &alpha, w, t, k, x, t, k, &beta, y,
                                         CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx");
}

}  // namespace hap::cuda::internal
