// Flag parsing for the benchmark programs that take the services' option style.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "services/server/options.h"

namespace hap::bench {

// Parses argv against `specs`. On --help or a bad flag prints the usage (and the error) and sets
// *exit_code (0 or 2); returns nullopt then.
inline std::optional<svc::Options> ParseBenchOptions(int argc, char** argv, const char* program,
                                                     const std::vector<svc::OptionSpec>& specs,
                                                     int* exit_code) {
  auto o = svc::Options::Parse(std::vector<std::string>(argv + 1, argv + argc), specs);
  if (!o.ok() || o->help()) {
    std::fprintf(stderr, "%s%s\n", o.ok() ? "" : (std::string(o.status().message()) + "\n").c_str(),
                 svc::Options::Usage(program, specs).c_str());
    *exit_code = o.ok() ? 0 : 2;
    return std::nullopt;
  }
  return std::move(*o);
}

}  // namespace hap::bench
