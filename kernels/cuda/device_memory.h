// Device memory and streams for the CUDA backend: allocation, copies and synchronisation, with
// errors as KernelStatus values. On a GPU these are the CUDA runtime's calls
// (device_memory_cuda.cc); the emulation (device_memory_emulated.cc) keeps "device" memory in
// host RAM and knows every live allocation, so a test can ask whether a pointer is one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/device_types.h"
#include "kernels/cuda/kernel_status.h"

namespace hap::cuda {

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// *ptr = `bytes` of device memory (256-byte aligned). Out of memory → KernelStatus::OutOfMemory.
KernelStatus DeviceAlloc(void** ptr, size_t bytes);
KernelStatus DeviceFree(void* ptr);
// *ptr = `bytes` of page-locked host memory (cudaMallocHost): a host→device Copy from it returns
// at once and the copy runs in order on the stream, so the bytes stay as they are until the
// stream has passed it. HostFree takes what HostAlloc gave.
KernelStatus HostAlloc(void** ptr, size_t bytes);
KernelStatus HostFree(void* ptr);
// Ordered on `stream`; a device-to-host copy into pageable memory returns when it is done.
KernelStatus Copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream);
// A device→host copy into page-locked memory (HostAlloc) ordered on `stream` that does not wait:
// the bytes are in `dst` once the stream is synchronised (Synchronize, or a Copy to the host on
// it). The emulation reads the source where the copy stands in the stream and writes `dst` at
// that synchronisation, so a reader that does not wait sees the old bytes, as it may on a GPU.
KernelStatus CopyToHostAsync(void* dst, const void* src, size_t bytes, Stream stream);
KernelStatus Fill(void* dst, unsigned char value, size_t bytes, Stream stream);
KernelStatus Synchronize(Stream stream);
KernelStatus CreateStream(Stream* stream);
KernelStatus DestroyStream(Stream stream);

// Bytes allocated through DeviceAlloc and not yet freed, by this process.
int64_t DeviceBytesInUse();
// The device's name and total memory ("emulated" and 0 on the emulation).
KernelStatus DeviceDescription(char* name, size_t name_bytes, int64_t* total_bytes);
// The device this process computes on, the same string in two processes exactly when they share
// it: "GPU-" and its UUID on a GPU; on the emulation the machine's boot id (two processes on one
// machine share memory through IpcOpen, kernels/cuda/ipc.h).
KernelStatus DeviceIdentity(std::string* identity);
// How many GPUs this process sees (the emulation: its one device). None is not an error: with
// *count == 0, *why_none says why (no device, or no NVIDIA driver installed). Any other failure
// of the runtime or the driver, with a GPU likely present, is an error naming the CUDA error.
KernelStatus DeviceCount(int* count, std::string* why_none);
// True when [ptr, ptr + bytes) is device memory: it is how the backend checks that the model hands
// it device memory, never a host buffer. The emulation knows every live DeviceAlloc allocation;
// on a GPU the runtime answers (device or managed memory at both ends of the range).
bool IsDeviceRange(const void* ptr, size_t bytes);
// True when [ptr, ptr + bytes) lies in page-locked host memory (HostAlloc, or registered with the
// runtime on a GPU): what a copy captured in a graph may read at each replay.
bool IsPinnedHostRange(const void* ptr, size_t bytes);

}  // namespace hap::cuda
