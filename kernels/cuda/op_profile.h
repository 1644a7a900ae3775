// Where a GPU's time goes within a stretch of work, for benchmarks (bench/gpu): while enabled,
// every kernel launch, cuBLAS product and copy of the CUDA backend is bracketed by two CUDA
// events on its stream; Take() waits for them and reports each name's device time and the time
// the stream sat idle before it (the device waiting on the host: a host wait, or ops issued more
// slowly than they run). Off by default, where it costs one relaxed atomic load per launch. The
// emulation records nothing (its launches run to completion on the host).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda::profile {

struct Entry {
  std::string name;  // the kernel's name, "cublas" (a product), "copy h2d/d2h/d2d", "fill"
  int64_t count = 0;
  double device_ms = 0;       // Σ of its runs, first event to second
  double idle_before_ms = 0;  // Σ of the gaps between the previous op's end and its start
};
struct Summary {
  std::vector<Entry> entries;  // by device time, largest first
  double span_ms = 0;          // first op's start to last op's end
  double busy_ms = 0;          // Σ device_ms
  int64_t ops = 0;
};

// Starts recording (dropping anything recorded before).
void Enable();
// Stops recording, waits for the recorded work and summarises it. Records of a single stream
// are compared (the first one recorded); other streams' records are dropped.
KernelStatus Take(Summary* out);
bool Enabled();

// The hooks around one op on `stream`: Begin before it is issued, End after, with its name
// (a string literal). Both do nothing unless Enabled().
void Begin(Stream stream);
void End(Stream stream, const char* name);

}  // namespace hap::cuda::profile
