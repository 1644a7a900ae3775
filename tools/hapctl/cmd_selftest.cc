// hapctl selftest --device cuda: runs the CUDA kernels' parity table (kernels/cuda/parity) on
// this machine's GPU and prints each case's worst error and time. Exit 0 when every case
// passes; 1 when one fails or the CUDA runtime or driver fails; 2 on bad flags, a --filter that
// matches no case included; 77 (ctest's "skipped") only when there is no GPU (cudaGetDeviceCount
// finds none, or no NVIDIA driver is installed) or this build has no CUDA backend.
#include <cstdio>
#include <string>
#include <vector>

#include "tools/hapctl/command.h"
#include "tools/hapctl/flags.h"

#if defined(HAP_HAS_CUDA)
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/parity/harness.h"
#endif

namespace hap::cli {
namespace {

constexpr int kSkipped = 77;

constexpr char kUsage[] =
    "usage: hapctl selftest --device cuda [--filter TEXT]\n"
    "  Runs every CUDA kernel against its CPU reference on this machine's GPU and prints each\n"
    "  case's worst error (as a fraction of its tolerance) and time.\n"
    "  --filter  only the cases whose name contains TEXT";

int CmdSelftest(const std::vector<std::string>& args) {
  auto flags = Flags::Parse(args, {"device", "filter"}, {"help"});
  if (!flags.ok()) return Fail("selftest", flags.status());
  if (flags->Bool("help")) {
    std::puts(kUsage);
    return 0;
  }
  const std::string device = flags->GetOr("device", "");
  if (device != "cuda") {
    std::fprintf(stderr, "hapctl selftest: --device cuda is required (the CPU backend is the "
                         "reference the table checks against)\n%s\n", kUsage);
    return 2;
  }
#if !defined(HAP_HAS_CUDA)
  std::fprintf(stderr,
               "hapctl selftest: this hapctl was built without the CUDA backend (configure with "
               "-DHAP_CUDA=ON where nvcc is installed); the same table runs on the SIMT "
               "emulation in `make test` (kernels_cuda_parity_test)\n");
  return kSkipped;
#else
  // The filter first: a run that would check nothing is an error, GPU or not.
  const std::string filter = flags->GetOr("filter", "");
  const std::vector<cuda::parity::Case> all = cuda::parity::AllCases();
  std::vector<const cuda::parity::Case*> selected;
  for (const cuda::parity::Case& c : all) {
    if (filter.empty() || c.name.find(filter) != std::string::npos) selected.push_back(&c);
  }
  if (selected.empty()) {
    std::fprintf(stderr,
                 "hapctl selftest: --filter '%s' matches none of the %zu case names (a case name "
                 "is its op and shape, e.g. '%s'); nothing to check\n",
                 filter.c_str(), all.size(), all.empty() ? "" : all.front().name.c_str());
    return 2;
  }
  // Skipped only when there is no GPU to run on; a GPU whose runtime or driver fails is a failure.
  int count = 0;
  std::string why_none;
  const cuda::KernelStatus probe = cuda::DeviceCount(&count, &why_none);
  if (!probe.ok) {
    std::fprintf(stderr, "hapctl selftest: the CUDA runtime failed: %s\n", probe.message.c_str());
    return 1;
  }
  if (count == 0) {
    std::fprintf(stderr, "hapctl selftest: no GPU (%s) — skipped\n", why_none.c_str());
    return kSkipped;
  }
  absl::StatusOr<const Backend*> backend = GetCudaBackend();
  if (!backend.ok()) {
    std::fprintf(stderr, "hapctl selftest: %d GPU(s) present, but %s\n", count,
                 backend.status().ToString().c_str());
    return 1;
  }
  char name[256];
  int64_t total = 0;
  const cuda::KernelStatus described = cuda::DeviceDescription(name, sizeof name, &total);
  if (!described.ok) {
    std::fprintf(stderr, "hapctl selftest: %s\n", described.message.c_str());
    return 1;
  }
  std::printf("device: %s, %.1f GiB\n", name, total / 1073741824.0);
  int passed = 0, failed = 0;
  for (const cuda::parity::Case* c : selected) {
    const cuda::parity::CaseResult r = c->run();
    const bool ok = r.failure.empty();
    std::printf("%-4s %-48s worst %8.3f of tolerance %9.3f ms%s%s\n", ok ? "ok" : "FAIL",
                c->name.c_str(), r.worst, r.ms, ok ? "" : "  ", r.failure.c_str());
    (ok ? passed : failed)++;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
#endif
}

}  // namespace

HAP_COMMAND(selftest, "Check every CUDA kernel against its CPU reference on this GPU",
            CmdSelftest);

}  // namespace hap::cli
