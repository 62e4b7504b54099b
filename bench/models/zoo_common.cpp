// bench/models/zoo_common.cpp - the library-independent part of the zoo
// harness (zoo_common.h).
#include "zoo_common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <sys/resource.h>

namespace kiln::zoo {
namespace {

/// The fewest and the most steps of one timed repetition: at least two so a
/// slow model still averages, at most 500 so a fast one ends.
constexpr int kMinStepsPerRep = 2, kMaxStepsPerRep = 500;

[[noreturn]] void usage(const std::string &program, const std::string &msg) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--model NAME] [--reps R] [--rep-seconds S] [--json PATH] [--list] "
               "[--loss-steps N] [--check-steps N] [--device cpu|cuda|cuda-sim] [--batch B]\n",
               program.c_str(), msg.c_str(), program.c_str());
  std::exit(2);
}

}  // namespace

Args parse_args(int argc, char **argv, const std::string &program, const std::vector<std::string> &models) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(program, "missing value for " + k);
      return argv[++i];
    };
    if (k == "--model") a.model = value();
    else if (k == "--reps") a.reps = std::stoi(value());
    else if (k == "--rep-seconds") a.rep_seconds = std::stod(value());
    else if (k == "--json") a.json_path = value();
    else if (k == "--list") a.list = true;
    else if (k == "--loss-steps") a.loss_steps = std::stoi(value());
    else if (k == "--check-steps") a.check_steps = std::stoi(value());
    else if (k == "--device") a.device = value();
    else if (k == "--batch") a.batch = std::stoi(value());
    else usage(program, "unknown argument " + k);
  }
  if (a.reps < 1 || !(a.rep_seconds > 0)) usage(program, "--reps and --rep-seconds must be positive");
  if (a.loss_steps < 0) usage(program, "--loss-steps must be 0 (time the steps) or positive");
  if (a.device != "cpu" && a.device != "cuda" && a.device != "cuda-sim")
    usage(program, "unknown device '" + a.device + "' (cpu, cuda or cuda-sim)");
  if (a.batch < 0) usage(program, "--batch must be 0 (the model's batch) or positive");
  if (a.check_steps < 0) usage(program, "--check-steps must be 0 (time the steps) or positive");
  if (!a.model.empty() && std::find(models.begin(), models.end(), a.model) == models.end())
    usage(program, "no zoo model named '" + a.model + "'");
  return a;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int steps_per_rep(double rep_seconds, double step_seconds) {
  return std::clamp(static_cast<int>(rep_seconds / std::max(step_seconds, 1e-6)), kMinStepsPerRep, kMaxStepsPerRep);
}

double max_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

std::string omp_num_threads() {
  const char *threads = std::getenv("OMP_NUM_THREADS");
  return threads ? threads : "(unset)";
}

void write_report(const json &report, const std::string &path) {
  const std::string text = report.dump(2) + "\n";
  if (path.empty()) {
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream(path) << text;
  }
}

}  // namespace kiln::zoo
