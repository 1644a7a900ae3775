// The KV transfer from a device backend's cache (the emulated CUDA backend): a prefill's cache
// stays in the backend's memory (DeviceKv) and the chunker reads each chunk's rows out just before
// encoding it. The messages are byte for byte those encoded from the host cache holding the same
// rows (F32 and BF16, unpruned and HAP-pruned layers of different lengths, layers spanning many
// chunks), and the reading costs exactly one device→host copy for K and one for V per chunk,
// into page-locked staging, the next chunk's copies started before a chunk is handed out (the
// emulation lands such a copy only when the stream is synchronised, so a chunk read before its
// copies are waited for would show stale bytes).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/emulation_counts.h"
#include "runtime/image/png_encode.h"
#include "runtime/model/pipeline.h"
#include "runtime/tiny/tiny_model.h"
#include "services/wire/kv_codec.h"
#include "tests/common/pattern_png.h"
#include "tests/common/tiny_checkpoint.h"

namespace hap::svc {
namespace {

std::string Png() { return hap::testing::PatternPng(); }

// The transfer's messages serialised: header, chunks, trailer.
std::vector<std::string> Encode(const KvStore& cache, int max_message_bytes, int* n_chunks) {
  std::vector<std::string> out;
  auto chunker = KvChunker::Create(&cache, max_message_bytes);
  EXPECT_TRUE(chunker.ok()) << chunker.status();
  if (!chunker.ok()) return out;
  hap::v1::KvHeader header;
  chunker->FillHeader(&header);
  out.push_back(header.SerializeAsString());
  hap::v1::KvChunk chunk;
  while (chunker->Next(&chunk)) out.push_back(chunk.SerializeAsString());
  EXPECT_TRUE(chunker->status().ok()) << chunker->status();
  hap::v1::KvTrailer trailer;
  chunker->FillTrailer(&trailer);
  out.push_back(trailer.SerializeAsString());
  *n_chunks = chunker->n_chunks();
  return out;
}

// Three rows of the cache per chunk.
int ThreeRows(const KvStore& cache) {
  return kChunkOverheadBytes + 3 * static_cast<int>(2 * cache.row_bytes() + 5);
}

void ExpectSameMessages(const std::vector<std::string>& got, const std::vector<std::string>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(got[i] == want[i]) << "message " << i << " of " << want.size();
  }
}

class KvTransferDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(HAP_BINARY_DIR) + "/tests/e2e/kv_transfer_device";
    const TinyModelOptions o = testing_support::TinyOptions(31, 4, 112);
    ASSERT_TRUE(WriteTinyModel(o, dir_).ok());
    absl::StatusOr<const Backend*> cuda = GetCudaBackend();
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    cuda_ = *cuda;
  }
  std::unique_ptr<LlavaModel> Load(const Backend* backend, DType kv_dtype) {
    ModelOptions options;
    options.backend = backend;
    options.kv_dtype = kv_dtype;
    auto model = LlavaModel::Load(dir_, options);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *std::move(model) : nullptr;
  }
  static PruneRequest Prune(const std::string& method) {
    PruneRequest prune;
    prune.method = method;
    if (method != "none") prune.retain = 24;
    return prune;
  }
  static PrefillResult Prefill(const LlavaModel& model, const PruneRequest& prune) {
    auto enc = EncodeImage(model, Png(), prune);
    EXPECT_TRUE(enc.ok()) << enc.status();
    Sampler sampler{SamplingParams{}};
    auto pre = RunPrefill(model, "What is in the picture?", *enc, prune, &sampler);
    EXPECT_TRUE(pre.ok()) << pre.status();
    return pre.ok() ? *std::move(pre) : PrefillResult();
  }

  std::string dir_;
  const Backend* cuda_ = nullptr;
};

// The CPU backend's prefill rows appended to a DeviceKv on the emulated CUDA backend as a device
// prefill appends its own (F32 rows in device memory; BF16 rounded there by StoreF32As): the
// chunks read from device memory equal the host cache's, which the CPU backend rounded on the host.
TEST_F(KvTransferDeviceTest, ChunksFromADeviceCacheAreTheHostCachesBytes) {
  auto cpu_f32 = Load(nullptr, DType::kF32);
  auto cpu_bf16 = Load(nullptr, DType::kBF16);
  ASSERT_TRUE(cpu_f32 && cpu_bf16);
  for (const std::string method : {"none", "hap"}) {
    SCOPED_TRACE(method);
    const PrefillResult f32 = Prefill(*cpu_f32, Prune(method));
    const PrefillResult bf16 = Prefill(*cpu_bf16, Prune(method));
    const int layers = f32.cache.n_layers();
    ASSERT_EQ(layers, 4);
    if (method == "hap") {
      EXPECT_LT(f32.cache.len(layers - 1), f32.cache.len(0));  // pruned: layers differ
    }
    for (const PrefillResult* host : {&f32, &bf16}) {
      const DType dtype = host->cache.dtype();
      SCOPED_TRACE(std::string(DTypeName(dtype)));
      auto device = DeviceKv::Create(*cuda_, layers, f32.cache.kv_dim, dtype, 0);
      ASSERT_TRUE(device.ok()) << device.status();
      (*device)->next_position = host->cache.next_position;
      const int64_t appending = cuda::emulation::DeviceToHostCopies();
      for (int l = 0; l < layers; ++l) {
        const LayerKv& rows = f32.cache.layers[l];  // F32 [len, kv_dim] both
        const size_t bytes = rows.k.size() * sizeof(float);
        auto k = BackendBuffer::Allocate(*cuda_, bytes);
        auto v = BackendBuffer::Allocate(*cuda_, bytes);
        ASSERT_TRUE(k.ok() && v.ok());
        ASSERT_TRUE(cuda_->CopyToBackend(k->data(), rows.k.data(), bytes).ok());
        ASSERT_TRUE(cuda_->CopyToBackend(v->data(), rows.v.data(), bytes).ok());
        ASSERT_TRUE((*device)
                        ->Append(*cuda_, l, k->as<float>(), v->as<float>(), rows.positions.data(),
                                 rows.len())
                        .ok());
        EXPECT_EQ((*device)->capacity(l), rows.len());
      }
      EXPECT_EQ(cuda::emulation::DeviceToHostCopies(), appending);  // the rows stayed on the device
      EXPECT_EQ((*device)->bytes(), host->cache.bytes());

      int host_chunks = 0, device_chunks = 0;
      const int limit = ThreeRows(host->cache);
      const std::vector<std::string> want = Encode(host->cache, limit, &host_chunks);
      const int64_t c0 = cuda::emulation::DeviceToHostCopies(),
                    b0 = cuda::emulation::DeviceToHostBytes();
      const std::vector<std::string> got = Encode(**device, limit, &device_chunks);
      const int64_t copies = cuda::emulation::DeviceToHostCopies() - c0;
      const int64_t bytes = cuda::emulation::DeviceToHostBytes() - b0;
      ASSERT_EQ(device_chunks, host_chunks);
      int expected_chunks = 0;  // three rows a chunk
      for (int l = 0; l < layers; ++l) expected_chunks += (f32.cache.len(l) + 2) / 3;
      EXPECT_EQ(host_chunks, expected_chunks);
      EXPECT_EQ(copies, 2 * host_chunks);     // K and V of each chunk
      EXPECT_EQ(bytes, host->cache.bytes());  // every row once
      ExpectSameMessages(got, want);
    }
  }
}

// When the chunker hands out a chunk, the next chunk's rows are already being copied: they
// overlap the caller's send of this one.
TEST_F(KvTransferDeviceTest, TheNextChunksCopiesAreUnderWayWhenAChunkIsHandedOut) {
  auto gpu = Load(cuda_, DType::kBF16);
  ASSERT_TRUE(gpu);
  const PrefillResult prefill = Prefill(*gpu, Prune("none"));
  const DeviceKv& device = *prefill.device_cache;
  auto chunker = KvChunker::Create(&device, ThreeRows(device));
  ASSERT_TRUE(chunker.ok()) << chunker.status();
  ASSERT_GT(chunker->n_chunks(), 2);
  const int64_t c0 = cuda::emulation::DeviceToHostCopies();
  hap::v1::KvChunk chunk;
  for (int i = 0; i < chunker->n_chunks(); ++i) {
    ASSERT_TRUE(chunker->Next(&chunk)) << i;
    EXPECT_EQ(chunk.chunk_index(), i);
    // K and V of this chunk and of the next (none after the last).
    const int issued = std::min(i + 2, chunker->n_chunks());
    EXPECT_EQ(cuda::emulation::DeviceToHostCopies() - c0, 2 * issued) << i;
  }
  EXPECT_FALSE(chunker->Next(&chunk));
  EXPECT_TRUE(chunker->status().ok()) << chunker->status();
}

// A device prefill's own cache (in the backend's memory, each layer sized to its pruned rows):
// sent as its host copy would be, and with the CPU backend's layout (same kept rows, positions).
TEST_F(KvTransferDeviceTest, ADevicePrefillsCacheIsSentFromDeviceMemory) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    auto cpu = Load(nullptr, dtype);
    auto gpu = Load(cuda_, dtype);
    ASSERT_TRUE(cpu && gpu);
    const PrefillResult on_cpu = Prefill(*cpu, Prune("hap"));
    const PrefillResult on_gpu = Prefill(*gpu, Prune("hap"));
    ASSERT_NE(on_gpu.device_cache, nullptr);
    ASSERT_EQ(on_gpu.cache.n_layers(), 0);  // nothing in host memory
    const DeviceKv& device = *on_gpu.device_cache;
    EXPECT_EQ(device.dtype(), dtype);
    auto host = device.ToHost();
    ASSERT_TRUE(host.ok()) << host.status();
    ASSERT_EQ(device.n_layers(), on_cpu.cache.n_layers());
    for (int l = 0; l < device.n_layers(); ++l) {
      EXPECT_EQ(device.capacity(l), on_cpu.cache.len(l)) << l;
      EXPECT_EQ(host->layers[l].positions, on_cpu.cache.layers[l].positions) << l;
    }
    EXPECT_EQ(on_gpu.stats.kv_bytes, on_cpu.stats.kv_bytes);

    int host_chunks = 0, device_chunks = 0;
    const int limit = ThreeRows(device);
    const std::vector<std::string> want = Encode(*host, limit, &host_chunks);
    const int64_t c0 = cuda::emulation::DeviceToHostCopies();
    const std::vector<std::string> got = Encode(device, limit, &device_chunks);
    EXPECT_EQ(cuda::emulation::DeviceToHostCopies() - c0, 2 * device_chunks);
    ExpectSameMessages(got, want);
    hap::v1::KvHeader header, cpu_header;
    ASSERT_TRUE(header.ParseFromString(got.front()));
    int cpu_chunks = 0;
    ASSERT_TRUE(cpu_header.ParseFromString(Encode(on_cpu.cache, limit, &cpu_chunks).front()));
    EXPECT_EQ(header.SerializeAsString(), cpu_header.SerializeAsString());
    EXPECT_EQ(device_chunks, cpu_chunks);
  }
}

}  // namespace
}  // namespace hap::svc
