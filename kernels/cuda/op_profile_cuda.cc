// Event pairs around the CUDA backend's launches, products and copies (kernels/cuda/op_profile.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/graph.h"
#include "kernels/cuda/op_profile.h"

namespace hap::cuda::profile {
namespace {

struct Record {
  const char* name;
  cudaEvent_t start, end;
};

std::atomic<bool> g_enabled{false};
std::mutex g_mu;
std::vector<Record> g_records;                 // in issue order
std::vector<cudaEvent_t> g_free;               // events to reuse
cudaStream_t g_stream = nullptr;               // the stream being recorded
thread_local cudaEvent_t t_pending = nullptr;  // Begin's event, waiting for its End

cudaEvent_t NewEvent() {  // under g_mu
  if (!g_free.empty()) {
    cudaEvent_t e = g_free.back();
    g_free.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  return cudaEventCreate(&e) == cudaSuccess ? e : nullptr;
}

}  // namespace

bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

void Enable() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (const Record& r : g_records) {
    g_free.push_back(r.start);
    g_free.push_back(r.end);
  }
  g_records.clear();
  g_stream = nullptr;
  g_enabled = true;
}

void Begin(Stream stream) {
  // A captured op runs at its replays: no event around it.
  if (!Enabled() || Capturing()) return;
  std::lock_guard<std::mutex> lock(g_mu);
  const auto s = static_cast<cudaStream_t>(stream);
  if (g_stream == nullptr) g_stream = s;
  if (s != g_stream) return;
  t_pending = NewEvent();
  if (t_pending != nullptr) cudaEventRecord(t_pending, s);
}

void End(Stream stream, const char* name) {
  if (!Enabled() || Capturing() || t_pending == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mu);
  const auto s = static_cast<cudaStream_t>(stream);
  cudaEvent_t end = NewEvent();
  if (end == nullptr || s != g_stream) {
    g_free.push_back(t_pending);
    if (end != nullptr) g_free.push_back(end);
    t_pending = nullptr;
    return;
  }
  cudaEventRecord(end, s);
  g_records.push_back({name, t_pending, end});
  t_pending = nullptr;
}

KernelStatus Take(Summary* out) {
  *out = Summary();
  g_enabled = false;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_records.empty()) return KernelStatus::Ok();
  const cudaError_t e = cudaEventSynchronize(g_records.back().end);
  if (e != cudaSuccess) {
    return KernelStatus::Error(std::string("cudaEventSynchronize: ") + cudaGetErrorString(e));
  }
  std::map<std::string, Entry> by_name;
  float ms = 0;
  for (size_t i = 0; i < g_records.size(); ++i) {
    const Record& r = g_records[i];
    Entry& entry = by_name[r.name];
    entry.name = r.name;
    ++entry.count;
    if (cudaEventElapsedTime(&ms, r.start, r.end) == cudaSuccess) entry.device_ms += ms;
    if (i > 0 && cudaEventElapsedTime(&ms, g_records[i - 1].end, r.start) == cudaSuccess) {
      entry.idle_before_ms += std::max(0.f, ms);
    }
  }
  if (cudaEventElapsedTime(&ms, g_records.front().start, g_records.back().end) == cudaSuccess) {
    out->span_ms = ms;
  }
  for (auto& [name, entry] : by_name) {
    out->busy_ms += entry.device_ms;
    out->entries.push_back(entry);
  }
  out->ops = static_cast<int64_t>(g_records.size());
  std::sort(out->entries.begin(), out->entries.end(),
            [](const Entry& a, const Entry& b) { return a.device_ms > b.device_ms; });
  return KernelStatus::Ok();
}

}  // namespace hap::cuda::profile
