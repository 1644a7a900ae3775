// What the benches that run the three services share: their common options, the image they send,
// the local pipeline they start and the tally of failed requests they end with.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sdk/local_pipeline.h"
#include "services/server/options.h"

namespace hap::bench {

// Options every services bench takes, with the same meaning and help.
svc::OptionSpec ModelSpec();   // --model: the checkpoint
svc::OptionSpec BinDirSpec();  // --bin-dir: where the service binaries are
// --threads: compute threads per service.
svc::OptionSpec ServiceThreadsSpec();
// --image, by default the first scenes test image; `help` says what it is used for.
svc::OptionSpec ImageSpec(const std::string& help);

// The comma-separated integers `flag` gives; nullopt, after "<program>: --FLAG wants WANTS, got
// 'PART'" on stderr, when one does not parse or is outside [min, max].
std::optional<std::vector<int>> ParseIntList(const svc::Options& o, const std::string& flag,
                                             int min, int max, const char* wants,
                                             const char* program);

// The bytes of the file --image names; nullopt, after "<program>: cannot read --image PATH" on
// stderr, when it cannot be read or is empty.
std::optional<std::string> ReadImage(const svc::Options& o, const char* program);

// A pipeline on `model_dir` with --bin-dir's binaries, whose output is not echoed; every service
// gets `service_args`.
sdk::LocalPipelineOptions QuietPipelineOptions(const svc::Options& o, const std::string& model_dir,
                                               const std::vector<std::string>& service_args);

// Failed requests over a whole run: how many, and the first one's error.
class FailedRequests {
 public:
  void Add(const absl::Status& status);  // counts it when not OK
  // `count` failures whose first was `first_error`.
  void Add(int count, const std::string& first_error);
  // 0; or 1, after "<program>: N request(s) failed; the first: ERROR" on stderr.
  int ExitCode(const char* program) const;

 private:
  int count_ = 0;
  std::string first_error_;
};

}  // namespace hap::bench
