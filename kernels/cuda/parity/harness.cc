#include "kernels/cuda/parity/harness.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <utility>

#include "kernels/cuda/parity/rows.h"

namespace hap::cuda::parity {
namespace {

constexpr unsigned char kGuardPattern = 0xA5;

}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  const size_t total = bytes + 2 * kGuardBytes;
  KernelStatus s = DeviceAlloc(&base_, total);
  if (!s.ok) {
    std::fprintf(stderr, "parity: %s\n", s.message.c_str());
    std::abort();
  }
  Fill(base_, kGuardPattern, kGuardBytes, nullptr);
  Fill(data(), 0xFF, bytes, nullptr);
  Fill(static_cast<char*>(data()) + bytes, kGuardPattern, kGuardBytes, nullptr);
  Synchronize(nullptr);
}

DeviceBuffer::~DeviceBuffer() {
  if (base_ != nullptr) DeviceFree(base_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) DeviceFree(base_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Upload(const void* host, size_t bytes) {
  Copy(data(), host, bytes, CopyKind::kHostToDevice, nullptr);
  Synchronize(nullptr);
}

void DeviceBuffer::DownloadTo(void* host) const {
  Copy(host, data(), bytes_, CopyKind::kDeviceToHost, nullptr);
}

std::string DeviceBuffer::CheckGuards() const {
  std::vector<unsigned char> guard(kGuardBytes);
  for (int side = 0; side < 2; ++side) {
    const char* at = side == 0 ? static_cast<const char*>(base_)
                               : static_cast<const char*>(data()) + bytes_;
    Copy(guard.data(), at, kGuardBytes, CopyKind::kDeviceToHost, nullptr);
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (guard[i] != kGuardPattern) {
        const long off = side == 0 ? -static_cast<long>(kGuardBytes - i) : static_cast<long>(i);
        return std::string(side == 0 ? "written before its start" : "written past its end") +
               " (byte " + std::to_string(off) + (side == 0 ? "" : " after the end") + ")";
      }
    }
  }
  return "";
}

std::string Compare(const float* got, const float* want, int64_t n, Tolerance tol,
                    double* worst) {
  *worst = 0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "element %lld is not finite: got %g, reference %g",
                    static_cast<long long>(i), got[i], want[i]);
      *worst = INFINITY;
      return buf;
    }
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]) /
                       (tol.atol + tol.rtol * std::fabs(static_cast<double>(want[i])));
    if (err > *worst) {
      *worst = err;
      worst_i = i;
    }
  }
  if (*worst <= 1.0) return "";
  char buf[200];
  std::snprintf(buf, sizeof buf, "worst element %lld: got %.9g, reference %.9g (%.3g x tolerance)",
                static_cast<long long>(worst_i), got[worst_i], want[worst_i], *worst);
  return buf;
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  AddNormCases(cases);
  AddElementwiseCases(cases);
  AddAttentionCases(cases);
  AddPruneCases(cases);
  AddGemmCases(cases);
  AddVisionZipCases(cases);
  AddSamplingCases(cases);
  return cases;
}

double TimedMs(const std::function<KernelStatus()>& fn, KernelStatus* status) {
  const auto start = std::chrono::steady_clock::now();
  *status = fn();
  if (status->ok) *status = Synchronize(nullptr);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::vector<float> RandomFloats(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void Checker::Fail(const std::string& message) {
  if (failure_.empty()) failure_ = message;
}

void Checker::Status(const KernelStatus& status) {
  if (!status.ok) Fail(status.message);
}

bool Checker::Reference(const absl::Status& status) {
  if (!status.ok()) Fail("the CPU reference failed: " + status.ToString());
  return status.ok();
}

void Checker::Output(const std::string& what, const DeviceBuffer& got,
                     const std::vector<float>& want, Tolerance tol) {
  Guards(what, got);
  if (got.bytes() != want.size() * sizeof(float)) {
    Fail(what + ": size mismatch");
    return;
  }
  std::vector<float> host = got.Download<float>();
  double worst = 0;
  std::string f = Compare(host.data(), want.data(), static_cast<int64_t>(want.size()), tol, &worst);
  worst_ = std::max(worst_, worst);
  if (!f.empty()) Fail(what + ": " + f);
}

void Checker::Guards(const std::string& what, const DeviceBuffer& buffer) {
  std::string g = buffer.CheckGuards();
  if (!g.empty()) Fail(what + " " + g);
}

void Checker::Exact(const std::string& what, const DeviceBuffer& got, const void* expected) {
  Guards(what, got);
  std::vector<unsigned char> now(got.bytes());
  got.DownloadTo(now.data());
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i] != static_cast<const unsigned char*>(expected)[i]) {
      Fail(what + ": byte " + std::to_string(i) + " differs from the reference");
      return;
    }
  }
}

void Checker::Unchanged(const std::string& what, const DeviceBuffer& buffer,
                        const void* original) {
  Guards(what, buffer);
  if (buffer.bytes() == 0) return;  // an empty input (its host copy may have no storage)
  std::vector<unsigned char> now(buffer.bytes());
  buffer.DownloadTo(now.data());
  if (std::memcmp(now.data(), original, buffer.bytes()) != 0) Fail(what + " (an input) was written");
}

}  // namespace hap::cuda::parity
