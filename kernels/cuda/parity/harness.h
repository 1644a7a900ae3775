// The CUDA kernels' parity table: one case per kernel and shape, each run against its CPU
// reference (kernels/cpu, kernels/cpu/prune) with a per-dtype tolerance atol + rtol·|ref|, the worst
// element reported, NaN/Inf rejected, and guard zones around every device buffer checked for
// writes past either end. The same table runs on the SIMT emulation in `make test`
// (tests/kernels/cuda) and on a GPU through `hapctl selftest --device cuda`.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cuda/device_memory.h"

namespace hap::cuda::parity {

// A device allocation with guard zones of kGuardBytes on each side, filled with a pattern that
// CheckGuards verifies. The kernel sees data(); the guards sit just outside it.
class DeviceBuffer {
 public:
  static constexpr size_t kGuardBytes = 256;

  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // contents 0xFF (NaN as F32) until written
  template <typename T>
  static DeviceBuffer Of(const std::vector<T>& host) {
    DeviceBuffer b(host.size() * sizeof(T));
    b.Upload(host.data(), host.size() * sizeof(T));
    return b;
  }
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return base_ == nullptr ? nullptr : static_cast<char*>(base_) + kGuardBytes; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data());
  }
  size_t bytes() const { return bytes_; }
  void Upload(const void* host, size_t bytes);
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> out(bytes_ / sizeof(T));
    DownloadTo(out.data());
    return out;
  }
  void DownloadTo(void* host) const;
  // "" when both guards are intact, else which side was written.
  std::string CheckGuards() const;

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

struct Tolerance {
  double atol;
  double rtol;
};
// F32 arithmetic in a different order than the reference (tree sums, fused multiply-adds).
inline constexpr Tolerance kF32Tol{1e-5, 1e-4};

// Compares n values; "" when every |got − want| <= atol + rtol·|want| and both are finite,
// else the first non-finite element or the worst one. *worst gets max |got − want| / (atol +
// rtol·|want|) (<= 1 passes).
std::string Compare(const float* got, const float* want, int64_t n, Tolerance tol,
                    double* worst);

// What one case reports.
struct CaseResult {
  std::string failure;  // "" when the case passed
  double worst = 0;     // worst error as a fraction of the tolerance
  double ms = 0;        // device time of the kernels under test (wall time around them)
};

struct Case {
  std::string name;                  // op and shape, e.g. "RmsNorm 7x1000"
  std::vector<std::string> kernels;  // the __global__ functions the case executes
  std::function<CaseResult()> run;
};

// The whole table: every rows_*.cc's cases (kernels/cuda/parity/rows.h), in a fixed order.
std::vector<Case> AllCases();

// Wall milliseconds of fn() followed by a synchronisation of the default stream.
double TimedMs(const std::function<KernelStatus()>& fn, KernelStatus* status);

// Deterministic inputs: uniform in [lo, hi).
std::vector<float> RandomFloats(int64_t n, uint64_t seed, float lo = -1.f, float hi = 1.f);

// Accumulates the checks of a case: output comparisons, guards, unchanged inputs.
class Checker {
 public:
  void Output(const std::string& what, const DeviceBuffer& got, const std::vector<float>& want,
              Tolerance tol);
  void Guards(const std::string& what, const DeviceBuffer& buffer);
  // An output that must equal `expected` byte for byte (indices, bit patterns).
  void Exact(const std::string& what, const DeviceBuffer& got, const void* expected);
  // An input the kernel must not write: compared byte for byte with what was uploaded.
  void Unchanged(const std::string& what, const DeviceBuffer& buffer, const void* original);
  void Fail(const std::string& message);
  void Status(const KernelStatus& status);
  // The CPU reference's status, to check before running the kernel: a reference that failed
  // leaves `want` unwritten, so the case fails with the reference's error. Returns status.ok().
  bool Reference(const absl::Status& status);
  CaseResult Result(double ms) const { return {failure_, worst_, ms}; }

 private:
  std::string failure_;
  double worst_ = 0;
};

}  // namespace hap::cuda::parity
