// The KV cache handed from prefill to decode on the device, through the wire format: the prefill
// side builds what hap-prefill sends for a DeviceKv it exports (KvChunker::HandOver: the KvHeader
// with its handles, n_chunks 0, and the trailer), and the decode side, a process of its own on the
// emulated CUDA backend (kv_handover_wire_child), receives them with a KvAssembler over its pool as
// hap-decode does. The rows in its blocks are the prefill's, bit for bit, with their positions.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "services/wire/kv_codec.h"
#include "tests/common/kv_handover.h"

namespace hap::svc {
namespace {

const std::string kDir = std::string(HAP_BINARY_DIR) + "/tests/e2e";

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(KvHandoverWire, DecodeTakesTheRowsFromThePrefillsDeviceMemory) {
  const Backend& b = **GetCudaBackend();
  constexpr int kLayers = 3, kDim = 16;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    // A prefill's cache: layers of different lengths, positions with a gap (pruned tokens).
    absl::StatusOr<std::unique_ptr<DeviceKv>> kv =
        DeviceKv::Create(b, kLayers, kDim, dtype, /*reserve_rows=*/4, /*shareable=*/true);
    ASSERT_TRUE(kv.ok()) << kv.status();
    (*kv)->next_position = 40;
    (*kv)->rope_delta = -7;
    for (int l = 0; l < kLayers; ++l) {
      const int n = 20 - 5 * l;
      std::vector<float> k(n * kDim), v(n * kDim);
      std::vector<int32_t> positions(n);
      for (int i = 0; i < n * kDim; ++i) {
        k[i] = 0.25f * i - l;
        v[i] = 1.5f - 0.125f * i * (l + 1);
      }
      for (int r = 0; r < n; ++r) positions[r] = r < 5 ? r : r + 15;
      BackendArray<float> dk(b), dv(b);
      ASSERT_TRUE(dk.Assign(k.data(), k.size()).ok());
      ASSERT_TRUE(dv.Assign(v.data(), v.size()).ok());
      ASSERT_TRUE((*kv)->Append(b, l, dk.data(), dv.data(), positions.data(), n).ok());
    }
    absl::StatusOr<std::string> want = testing::LayerRowsBytes(**kv);
    ASSERT_TRUE(want.ok()) << want.status();
    // What hap-prefill sends: the header as for chunks, then the handles and a trailer.
    absl::StatusOr<KvChunker> chunker = KvChunker::Create(kv->get(), 1 << 20);
    ASSERT_TRUE(chunker.ok()) << chunker.status();
    absl::StatusOr<ExportedKv> exported = (*kv)->Export();
    ASSERT_TRUE(exported.ok()) << exported.status();
    chunker->HandOver(std::move(*exported));
    hap::v1::DecodeRequest header, trailer;
    hap::v1::KvHeader* h = header.mutable_header();
    chunker->FillHeader(h);
    h->set_d_model(32);
    h->set_vocab_size(50);
    h->set_first_token(3);
    h->set_samples_drawn(1);
    h->set_max_new_tokens(6);
    chunker->FillTrailer(trailer.mutable_trailer());
    EXPECT_EQ(trailer.trailer().n_chunks(), 0);
    EXPECT_EQ(trailer.trailer().kv_bytes(), (*kv)->bytes());
    const std::string header_path = kDir + "/kv_handover_wire.header";
    const std::string trailer_path = kDir + "/kv_handover_wire.trailer";
    const std::string out = kDir + "/kv_handover_wire.out";
    const std::string err = kDir + "/kv_handover_wire.err";
    std::ofstream(header_path, std::ios::binary) << header.SerializeAsString();
    std::ofstream(trailer_path, std::ios::binary) << trailer.SerializeAsString();
    std::remove(out.c_str());
    const int status = std::system((kDir + "/kv_handover_wire_child " + header_path + " " +
                                    trailer_path + " " + out + " 2> " + err)
                                       .c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Slurp(err);
    EXPECT_EQ(Slurp(out), *want);
  }
}

}  // namespace
}  // namespace hap::svc
