// Graphs on a GPU: stream capture, instantiated once, launched by cudaGraphLaunch.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/graph.h"

namespace hap::cuda {

struct Graph {
  cudaGraphExec_t exec = nullptr;
};

namespace {

thread_local bool t_capturing = false;

KernelStatus FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return KernelStatus::Ok();
  return KernelStatus::Error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

KernelStatus BeginCapture(Stream stream) {
  if (t_capturing) return KernelStatus::Error("BeginCapture: already capturing");
  KernelStatus st = FromCuda(
      cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal),
      "cudaStreamBeginCapture");
  t_capturing = st.ok;
  return st;
}

KernelStatus EndCapture(Stream stream, Graph** graph) {
  *graph = nullptr;
  if (!t_capturing) return KernelStatus::Error("EndCapture: not capturing");
  t_capturing = false;
  cudaGraph_t g = nullptr;
  KernelStatus st =
      FromCuda(cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &g), "cudaStreamEndCapture");
  if (!st.ok || g == nullptr) return st;
  size_t nodes = 0;
  st = FromCuda(cudaGraphGetNodes(g, nullptr, &nodes), "cudaGraphGetNodes");
  cudaGraphExec_t exec = nullptr;
  if (st.ok && nodes > 0) st = FromCuda(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(g);
  if (st.ok && exec != nullptr) *graph = new Graph{exec};
  return st;
}

KernelStatus Replay(Graph* graph, Stream stream) {
  if (graph == nullptr) return KernelStatus::Error("Replay: no graph");
  return FromCuda(cudaGraphLaunch(graph->exec, static_cast<cudaStream_t>(stream)),
                  "cudaGraphLaunch");
}

void DestroyGraph(Graph* graph) {
  if (graph == nullptr) return;
  cudaGraphExecDestroy(graph->exec);
  delete graph;
}

bool Capturing() { return t_capturing; }

}  // namespace hap::cuda
