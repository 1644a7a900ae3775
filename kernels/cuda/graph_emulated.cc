// The emulation's graphs: the recording thread's ops kept as closures and run again in order.
#include <utility>
#include <vector>

#include "kernels/cuda/graph.h"

namespace hap::cuda {

struct Graph {
  std::vector<std::function<KernelStatus()>> ops;
};

namespace {

// The recording of the calling thread, if it is recording.
thread_local Graph* t_recording = nullptr;

}  // namespace

bool emulation::Record(const std::function<KernelStatus()>& op) {
  if (t_recording == nullptr) return false;
  t_recording->ops.push_back(op);
  return true;
}

KernelStatus BeginCapture(Stream) {
  if (t_recording != nullptr) return KernelStatus::Error("BeginCapture: already capturing");
  t_recording = new Graph;
  return KernelStatus::Ok();
}

KernelStatus EndCapture(Stream, Graph** graph) {
  *graph = nullptr;
  if (t_recording == nullptr) return KernelStatus::Error("EndCapture: not capturing");
  Graph* g = std::exchange(t_recording, nullptr);
  if (g->ops.empty()) {
    delete g;
    return KernelStatus::Ok();
  }
  *graph = g;
  return KernelStatus::Ok();
}

KernelStatus Replay(Graph* graph, Stream) {
  if (graph == nullptr) return KernelStatus::Error("Replay: no graph");
  if (t_recording != nullptr) return KernelStatus::Error("Replay: inside a capture");
  for (const auto& op : graph->ops) {
    KernelStatus st = op();
    if (!st.ok) return st;
  }
  return KernelStatus::Ok();
}

void DestroyGraph(Graph* graph) { delete graph; }

bool Capturing() { return t_recording != nullptr; }

}  // namespace hap::cuda
