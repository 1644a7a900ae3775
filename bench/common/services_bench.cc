#include "bench/common/services_bench.h"

#include <cstdio>
#include <fstream>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace hap::bench {

svc::OptionSpec ModelSpec() {
  return {"model", "HAP_MODEL_DIR", "", "checkpoint (default: the bundled model)"};
}

svc::OptionSpec BinDirSpec() {
  return {"bin-dir", "HAP_BIN_DIR", "", "where the service binaries are"};
}

svc::OptionSpec ServiceThreadsSpec() {
  return {"threads", "HAP_THREADS", "0", "compute threads per service"};
}

svc::OptionSpec ImageSpec(const std::string& help) {
  return {"image", "HAP_BENCH_IMAGE",
          std::string(HAP_SOURCE_DIR) + "/data/scenes-test/images/test_0000.jpg", help};
}

std::optional<std::vector<int>> ParseIntList(const svc::Options& o, const std::string& flag,
                                             int min, int max, const char* wants,
                                             const char* program) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(o.Get(flag), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < min || n > max) {
      std::fprintf(stderr, "%s: --%s wants %s, got '%s'\n", program, flag.c_str(), wants,
                   std::string(part).c_str());
      return std::nullopt;
    }
    out.push_back(n);
  }
  return out;
}

std::optional<std::string> ReadImage(const svc::Options& o, const char* program) {
  std::ifstream f(o.Get("image"), std::ios::binary);
  std::string image((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (image.empty()) {
    std::fprintf(stderr, "%s: cannot read --image %s\n", program, o.Get("image").c_str());
    return std::nullopt;
  }
  return image;
}

sdk::LocalPipelineOptions QuietPipelineOptions(const svc::Options& o, const std::string& model_dir,
                                               const std::vector<std::string>& service_args) {
  sdk::LocalPipelineOptions po;
  po.model_dir = model_dir;
  po.bin_dir = o.Get("bin-dir");
  po.echo_output = false;
  po.encoder_args = po.decode_args = po.prefill_args = service_args;
  return po;
}

void FailedRequests::Add(const absl::Status& status) {
  if (status.ok()) return;
  if (count_++ == 0) first_error_ = status.ToString();
}

void FailedRequests::Add(int count, const std::string& first_error) {
  if (count > 0 && count_ == 0) first_error_ = first_error;
  count_ += count;
}

int FailedRequests::ExitCode(const char* program) const {
  if (count_ == 0) return 0;
  std::fprintf(stderr, "%s: %d request(s) failed; the first: %s\n", program, count_,
               first_error_.c_str());
  return 1;
}

}  // namespace hap::bench
