// hapctl subcommands register themselves here; main() dispatches on the first argument.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace hap::cli {

// A subcommand receives the arguments after its name and returns the process exit code.
using CommandFn = std::function<int(const std::vector<std::string>& args)>;

struct Command {
  std::string name;
  std::string summary;  // one line for `hapctl help`
  CommandFn fn;
};

std::vector<Command>& Registry();

struct Registrar {
  Registrar(std::string name, std::string summary, CommandFn fn) {
    Registry().push_back({std::move(name), std::move(summary), std::move(fn)});
  }
};

}  // namespace hap::cli

// HAP_COMMAND(plan, "Plan a pruning schedule", CmdPlan) in a cmd_*.cc file registers CmdPlan.
#define HAP_COMMAND(name, summary, fn) \
  static ::hap::cli::Registrar hap_command_registrar_##fn(#name, summary, fn)
