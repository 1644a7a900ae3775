// The decode side of tests/e2e/kv_handover_wire_test.cc, a process of its own: reads a KvHeader
// and a KvTrailer (serialised DecodeRequest messages), receives them with a KvAssembler over a
// pool of the header's dtype on the emulated CUDA backend, as hap-decode does, and writes what
// the pool's blocks then hold (testing::LayerRowsBytes). On an error: the status on stderr, exit 1.
//
//   kv_handover_wire_child HEADER.pb TRAILER.pb OUT.bin
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "base/status_macros.h"
#include "kernels/cuda/cuda_backend.h"
#include "runtime/engine/kv_block_pool.h"
#include "services/wire/kv_codec.h"
#include "tests/common/kv_handover.h"

namespace hap::svc {
namespace {

absl::StatusOr<hap::v1::DecodeRequest> Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  hap::v1::DecodeRequest r;
  if (!r.ParseFromString(s.str())) return absl::InvalidArgumentError("cannot parse " + path);
  return r;
}

absl::Status Run(const std::string& header_path, const std::string& trailer_path,
                 const std::string& out) {
  HAP_ASSIGN_OR_RETURN(const hap::v1::DecodeRequest header, Read(header_path));
  HAP_ASSIGN_OR_RETURN(const hap::v1::DecodeRequest trailer, Read(trailer_path));
  const hap::v1::KvHeader& h = header.header();
  HAP_ASSIGN_OR_RETURN(const Backend* backend, GetCudaBackend());
  const DType dtype = h.dtype() == hap::v1::DTYPE_BF16 ? DType::kBF16 : DType::kF32;
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<KvBlockPool> pool,
                       KvBlockPool::Create(4, h.kv_dim(), dtype, 1 << 20, backend));
  KvExpectation expect;
  expect.n_layers = h.n_layers();
  expect.kv_dim = h.kv_dim();
  expect.d_model = h.d_model();
  expect.vocab_size = h.vocab_size();
  expect.max_positions = 4096;
  KvAssembler assembler(expect, pool.get());
  HAP_RETURN_IF_ERROR(assembler.OnHeader(h));
  HAP_RETURN_IF_ERROR(assembler.OnTrailer(trailer.trailer()));
  if (!assembler.in_blocks()) return absl::InternalError("the rows are not in the pool's blocks");
  std::unique_ptr<PagedKv> kv = assembler.TakePaged();
  HAP_ASSIGN_OR_RETURN(const std::string rows, testing::LayerRowsBytes(*kv));
  std::ofstream(out, std::ios::binary) << rows;
  if (kv->next_position != h.next_position() || kv->rope_delta != h.rope_delta()) {
    return absl::InternalError("next_position or rope_delta lost");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace hap::svc

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: kv_handover_wire_child HEADER.pb TRAILER.pb OUT.bin\n";
    return 2;
  }
  const absl::Status s = hap::svc::Run(argv[1], argv[2], argv[3]);
  if (!s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}
