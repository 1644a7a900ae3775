// The importing side of tests/model/kv_handover_test.cc, a process of its own (a mapping of
// another process's device memory is what is tested): reads an ExportedKv as JSON, takes it into
// a paged pool of `pool_dtype` on the emulated CUDA backend (PagedKv::FromExported) and writes
// every layer's rows as it reads them back (testing::LayerRowsBytes). On an error: the status on
// stderr, exit 1.
//
//   kv_handover_child IN.json OUT.bin f32|bf16
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

#include "base/status_macros.h"
#include "kernels/cuda/cuda_backend.h"
#include "runtime/engine/kv_block_pool.h"
#include "runtime/engine/paged_kv.h"
#include "tests/common/kv_handover.h"

namespace hap {
namespace {

absl::Status Run(const std::string& in, const std::string& out, DType pool_dtype) {
  std::ifstream f(in);
  const ExportedKv exported = testing::ExportedKvFromJson(nlohmann::json::parse(f));
  HAP_ASSIGN_OR_RETURN(const Backend* backend, GetCudaBackend());
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<KvBlockPool> pool,
                       KvBlockPool::Create(4, exported.kv_dim, pool_dtype, 1 << 20, backend));
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<PagedKv> kv,
                       PagedKv::FromExported(pool.get(), exported, /*reserve_rows=*/2));
  HAP_ASSIGN_OR_RETURN(const std::string rows, testing::LayerRowsBytes(*kv));
  std::ofstream(out, std::ios::binary) << rows;
  return absl::OkStatus();
}

}  // namespace
}  // namespace hap

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: kv_handover_child IN.json OUT.bin f32|bf16\n";
    return 2;
  }
  const hap::DType dtype = std::string(argv[3]) == "bf16" ? hap::DType::kBF16 : hap::DType::kF32;
  const absl::Status s = hap::Run(argv[1], argv[2], dtype);
  if (!s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}
