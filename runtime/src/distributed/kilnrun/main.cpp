// kilnrun: Kiln's torchrun. Usage and behaviour: Launcher.h, `kilnrun --help`.
#include "Launcher.h"

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace kilnrun = kiln::runtime::distributed::kilnrun;

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  kilnrun::ParsedArguments parsed = kilnrun::parse_arguments(args);
  if (parsed.help) {
    std::fputs(kilnrun::help_text().c_str(), stdout);
    return 0;
  }
  if (!parsed.error.empty()) {
    std::fprintf(stderr, "kilnrun: error: %s\n%s\n", parsed.error.c_str(), kilnrun::usage_line().c_str());
    return kilnrun::kUsageExitCode;
  }
  try {
    return kilnrun::launch(*parsed.config);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kilnrun: %s\n", e.what());
    return 1;
  }
}
