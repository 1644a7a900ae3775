// hapctl: the command-line client of HAP serve (run, plan, eval, generate, up, make-tiny, ...).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tools/hapctl/command.h"

namespace hap::cli {

std::vector<Command>& Registry() {
  static auto* commands = new std::vector<Command>();
  return *commands;
}

namespace {

void PrintUsage() {
  std::fprintf(stderr, "usage: hapctl <command> [flags]\n\ncommands:\n");
  auto commands = Registry();
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
  for (const Command& c : commands) {
    std::fprintf(stderr, "  %-12s %s\n", c.name.c_str(), c.summary.c_str());
  }
}

}  // namespace
}  // namespace hap::cli

int main(int argc, char** argv) {
  using hap::cli::Registry;
  if (argc < 2 || std::string(argv[1]) == "help" || std::string(argv[1]) == "--help") {
    hap::cli::PrintUsage();
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  for (const auto& c : Registry()) {
    if (c.name == name) return c.fn(std::vector<std::string>(argv + 2, argv + argc));
  }
  std::fprintf(stderr, "hapctl: unknown command '%s'\n", name.c_str());
  hap::cli::PrintUsage();
  return 2;
}
