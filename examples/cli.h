// examples/cli.h - the command-line parsing the example jobs share: flags
// that set a field of the job's arguments, `--help`, and exit status 2 with
// the usage text on an unknown flag or a missing or bad value.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "kiln/cuda.h"
#include "kiln/runtime/Allocator.h"
#include "kiln/runtime/Device.h"

namespace kiln::examples {

/// One program's flags. Usage:
///   Cli cli("kiln-train-cnn", "[--eager] [--epochs N]");
///   cli.flag("--eager", [&] { a.eager = true; });
///   cli.option("--epochs", [&](const std::string &v) { a.epochs = std::stoi(v); });
///   cli.parse(argc, argv);
class Cli {
public:
  /// `program` heads every message; `synopsis` follows "usage: <program> "
  /// (continuation lines indented by the caller).
  Cli(std::string program, std::string synopsis) : program_(std::move(program)), synopsis_(std::move(synopsis)) {}

  /// A switch without a value: `set` runs when it is given.
  void flag(const std::string &name, std::function<void()> set) { flags_[name] = std::move(set); }

  /// A flag followed by a value; `set` parses it. A std::logic_error it
  /// throws (std::stoi's invalid_argument / out_of_range) is reported as
  /// "bad value for <name>".
  void option(const std::string &name, std::function<void(const std::string &)> set) {
    options_[name] = std::move(set);
  }

  /// Parses argv[1..argc) in order. Exits through usage() on `--help`/`-h`,
  /// an unknown flag, a flag missing its value or a bad value.
  void parse(int argc, char **argv) const {
    for (int i = 1; i < argc; ++i) {
      const std::string k = argv[i];
      if (k == "--help" || k == "-h")
        usage("help");
      if (auto f = flags_.find(k); f != flags_.end()) {
        f->second();
        continue;
      }
      auto o = options_.find(k);
      if (o == options_.end())
        usage("unknown argument " + k);
      if (i + 1 >= argc)
        usage("missing value for " + k);
      try {
        o->second(argv[++i]);
      } catch (const std::logic_error &) {
        usage("bad value for " + k);
      }
    }
  }

  /// Prints "<program>: <msg>" and the usage text to stderr; exit status 2.
  [[noreturn]] void usage(const std::string &msg) const {
    std::fprintf(stderr, "%s: %s\nusage: %s %s\n", program_.c_str(), msg.c_str(), program_.c_str(),
                 synopsis_.c_str());
    std::exit(2);
  }

private:
  std::string program_, synopsis_;
  std::map<std::string, std::function<void()>> flags_;
  std::map<std::string, std::function<void(const std::string &)>> options_;
};

/// "cpu", "cuda" or "cuda:N" as a Device; throws std::invalid_argument (a
/// bad value for Cli::option) otherwise.
inline Device parse_device(const std::string &v) {
  if (v == "cpu") return kCPU;
  if (v == "cuda") return Device(DeviceType::CUDA, 0);
  if (v.rfind("cuda:", 0) == 0 && v.size() > 5 && v.find_first_not_of("0123456789", 5) == std::string::npos)
    return Device(DeviceType::CUDA, std::stoi(v.substr(5)));
  throw std::invalid_argument("expected cpu, cuda or cuda:N, got " + v);
}

/// The progress line's peak memory on `device`: the cpu allocator's
/// high-water mark, or the CUDA caching allocator's (kiln::cuda); bytes.
inline void reset_peak_memory(Device device) {
  if (device.is_cpu()) runtime::cpu_allocator().reset_peak_stats();
  else cuda::reset_peak_memory_stats(device.index);
}
inline int64_t peak_memory_bytes(Device device) {
  return device.is_cpu() ? runtime::cpu_allocator().stats().peak_bytes : cuda::max_memory_allocated(device.index);
}

}  // namespace kiln::examples
