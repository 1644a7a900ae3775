// A KV cache handed to another process on the same device without a copy through the host
// (DeviceKv::Export, PagedKv::FromExported; CUDA IPC on a GPU, on the emulation a shared-memory
// file the other process maps): the child process (kv_handover_child) maps each layer's K and V
// blocks, copies the rows into blocks of its paged pool and writes back what it reads from them.
#include "tests/common/kv_handover.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"

namespace hap {
namespace {

const std::string kDir = std::string(HAP_BINARY_DIR) + "/tests/model";

struct ChildResult {
  int exit_code = -1;
  std::string out;    // the rows it wrote
  std::string error;  // what it wrote on stderr
};

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs the child on `exported` with a pool of `pool_dtype`.
ChildResult RunChild(const ExportedKv& exported, const char* pool_dtype, const std::string& name) {
  const std::string in = kDir + "/kv_handover_" + name + ".json";
  const std::string out = kDir + "/kv_handover_" + name + ".bin";
  const std::string err = kDir + "/kv_handover_" + name + ".err";
  std::ofstream(in) << testing::ExportedKvJson(exported).dump();
  std::remove(out.c_str());
  const std::string command =
      kDir + "/kv_handover_child " + in + " " + out + " " + pool_dtype + " 2> " + err;
  const int status = std::system(command.c_str());
  ChildResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.error = Slurp(err);
  return r;
}

// A cache of `dtype` on the emulated CUDA backend in memory another process can map, its layers
// of different lengths (as after pruning), the rows appended as a prefill appends them.
std::unique_ptr<DeviceKv> MakeCache(const Backend& b, DType dtype) {
  constexpr int kLayers = 3, kDim = 8;
  absl::StatusOr<std::unique_ptr<DeviceKv>> kv =
      DeviceKv::Create(b, kLayers, kDim, dtype, /*reserve_rows=*/3, /*shareable=*/true);
  EXPECT_TRUE(kv.ok()) << kv.status();
  for (int l = 0; l < kLayers; ++l) {
    const int n = 9 - 3 * l;
    std::vector<float> k(n * kDim), v(n * kDim);
    std::vector<int32_t> positions(n);
    for (int i = 0; i < n * kDim; ++i) {
      k[i] = 0.37f * i - 1.3f * l;
      v[i] = 2.1f - 0.11f * i * (l + 1);
    }
    for (int r = 0; r < n; ++r) positions[r] = 2 * r + l;
    BackendArray<float> dk(b), dv(b);
    EXPECT_TRUE(dk.Assign(k.data(), k.size()).ok());
    EXPECT_TRUE(dv.Assign(v.data(), v.size()).ok());
    EXPECT_TRUE((*kv)->Append(b, l, dk.data(), dv.data(), positions.data(), n).ok());
  }
  return std::move(*kv);
}

// What the child writes, from the cache itself.
std::string Expected(const DeviceKv& kv) {
  absl::StatusOr<std::string> rows = testing::LayerRowsBytes(kv);
  EXPECT_TRUE(rows.ok()) << rows.status();
  return rows.ok() ? *rows : std::string();
}

TEST(KvHandover, AnotherProcessMapsTheBlocksAndReadsTheRows) {
  const Backend& b = **GetCudaBackend();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::unique_ptr<DeviceKv> kv = MakeCache(b, dtype);
    absl::StatusOr<ExportedKv> exported = kv->Export();
    ASSERT_TRUE(exported.ok()) << exported.status();
    EXPECT_EQ(exported->device, *b.DeviceIdentity());
    ASSERT_EQ(exported->layers.size(), 3u);
    EXPECT_EQ(exported->layers[2].positions.size(), 3u);
    const ChildResult r = RunChild(*exported, dtype == DType::kF32 ? "f32" : "bf16", "ok");
    ASSERT_EQ(r.exit_code, 0) << r.error;
    EXPECT_EQ(r.out, Expected(*kv));
  }
}

TEST(KvHandover, AMismatchIsRefusedBeforeAnyRowIsRead) {
  const Backend& b = **GetCudaBackend();
  std::unique_ptr<DeviceKv> kv = MakeCache(b, DType::kBF16);
  absl::StatusOr<ExportedKv> exported = kv->Export();
  ASSERT_TRUE(exported.ok()) << exported.status();

  // Another device: the importer would map nothing of it.
  ExportedKv other = *exported;
  other.device = "GPU-00000000000000000000000000000000";
  ChildResult r = RunChild(other, "bf16", "device");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.error.find("FAILED_PRECONDITION"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("another device"), std::string::npos) << r.error;

  // A pool of another dtype: the rows would need converting (the byte stream does that).
  r = RunChild(*exported, "f32", "dtype");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.error.find("INVALID_ARGUMENT"), std::string::npos) << r.error;

  // A layer claiming more rows than its blocks hold.
  ExportedKv longer = *exported;
  longer.layers[1].positions.resize(longer.layers[1].capacity + 1, 0);
  r = RunChild(longer, "bf16", "rows");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.error.find("INVALID_ARGUMENT"), std::string::npos) << r.error;

  // The exporter freed the cache: its handles name memory that is gone.
  kv.reset();
  r = RunChild(*exported, "bf16", "freed");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.error.find("IpcOpen"), std::string::npos) << r.error;
}

TEST(KvHandover, OnlyAShareableCacheExports) {
  const Backend& b = **GetCudaBackend();
  absl::StatusOr<std::unique_ptr<DeviceKv>> kv = DeviceKv::Create(b, 2, 8, DType::kF32, 0);
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ((*kv)->Export().status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::unique_ptr<DeviceKv>> on_cpu =
      DeviceKv::Create(CpuBackend(), 2, 8, DType::kF32, 0, /*shareable=*/true);
  EXPECT_EQ(on_cpu.status().code(), absl::StatusCode::kUnimplemented) << on_cpu.status();
}

}  // namespace
}  // namespace hap
