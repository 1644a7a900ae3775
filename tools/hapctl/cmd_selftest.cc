// hapctl selftest --device cuda: runs the CUDA kernels' parity table (kernels/cuda/parity) on
// this machine's GPU and prints each case's worst error and time. Exit 0 when every case
// passes, 1 when one fails, 77 (ctest's "skipped") when there is no GPU or this build has no
// CUDA backend.
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
  absl::StatusOr<const Backend*> backend = GetCudaBackend();
  if (!backend.ok()) {
    std::fprintf(stderr, "hapctl selftest: %s — skipped\n", backend.status().ToString().c_str());
    return kSkipped;
  }
  char name[256];
  int64_t total = 0;
  cuda::DeviceDescription(name, sizeof name, &total);
  std::printf("device: %s, %.1f GiB\n", name, total / 1073741824.0);
  const std::string filter = flags->GetOr("filter", "");
  int passed = 0, failed = 0;
  for (const cuda::parity::Case& c : cuda::parity::AllCases()) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    const cuda::parity::CaseResult r = c.run();
    const bool ok = r.failure.empty();
    std::printf("%-4s %-48s worst %8.3f of tolerance %9.3f ms%s%s\n", ok ? "ok" : "FAIL",
                c.name.c_str(), r.worst, r.ms, ok ? "" : "  ", r.failure.c_str());
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
