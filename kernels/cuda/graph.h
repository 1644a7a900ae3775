// Work enqueued on a stream recorded once and launched again as one unit (a CUDA graph): what a
// step whose arguments stay put — addresses, sizes, grids — enqueues, replayed at the cost of one
// launch instead of one per op. On a GPU: stream capture (cudaStreamBeginCapture in thread-local
// mode, so only the capturing thread's own unsafe calls are refused), instantiated once. On the
// emulation: the capturing thread's kernel launches, copies, fills and products are kept as they
// are issued (nothing runs) and run again in order at each replay. Either way a replay reads its
// inputs where they are at replay time, host sources of uploads included.
#pragma once

#include <functional>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

struct Graph;

// Starts recording what the calling thread enqueues on `stream`.
KernelStatus BeginCapture(Stream stream);
// Ends the recording begun on `stream` by this thread: *graph replays it (null on an error, and
// for a recording that enqueued nothing). Always ends the capture, so the stream is usable again.
KernelStatus EndCapture(Stream stream, Graph** graph);
// Enqueues the recorded work on `stream` once more.
KernelStatus Replay(Graph* graph, Stream stream);
void DestroyGraph(Graph* graph);
// Whether the calling thread is recording.
bool Capturing();

namespace emulation {
// Where the emulation's launches, copies, fills and products go first: while the calling thread
// records, `op` is kept for the replays and Record returns true (the caller does not run it);
// otherwise false (the caller runs it now).
bool Record(const std::function<KernelStatus()>& op);
}  // namespace emulation

}  // namespace hap::cuda
