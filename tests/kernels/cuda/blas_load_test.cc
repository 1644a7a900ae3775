// The nvcc-built backend opens cuBLAS only when a product context is created
// (kernels/cuda/gemm_cuda.cc): a process that never asks for one does not map its libraries, and
// the library's name and every symbol the backend calls resolve. Runs without a GPU: cuBLAS then
// loads and refuses to initialise, which is a failure of cublasCreate, not of the loading.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cuda/gemm.h"

namespace hap::cuda {
namespace {

bool Mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(library) != std::string::npos;
}

TEST(CublasLoadTest, OpenedOnFirstUseAndEverySymbolResolves) {
  EXPECT_FALSE(Mapped("libcublas")) << "cuBLAS is mapped before any product context exists";
  void* blas = nullptr;
  const KernelStatus s = internal::CreateBlas(nullptr, &blas);
  EXPECT_TRUE(Mapped("libcublas.so")) << s.message;
  std::printf("CreateBlas: %s\n", s.ok ? "ok" : s.message.c_str());
  if (s.ok) {  // a GPU is present
    internal::DestroyBlas(blas);
    return;
  }
  EXPECT_EQ(s.message.rfind("cublasCreate: ", 0), 0u) << s.message;
  EXPECT_EQ(s.message.find("cannot load"), std::string::npos) << s.message;
  EXPECT_EQ(s.message.find("has no symbol"), std::string::npos) << s.message;
}

}  // namespace
}  // namespace hap::cuda
