// bench/models/zoo_common.h - the parts of the model zoo's harness that do
// not depend on the library measured: the command line, the statistics, the
// step count of a repetition, the process' context and the JSON report.
// Shared by kiln-zoo (harness.cpp) and kiln-zoo-libtorch
// (bench/peers/libtorch/harness.cpp) so both measure the same way.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::zoo {

/// The models of one binary by name (kiln-zoo's and kiln-zoo-libtorch's
/// ModelSpec types differ; each file registers into its own).
template <class Spec> std::map<std::string, Spec> &model_registry() {
  static std::map<std::string, Spec> models;
  return models;
}

/// The names in model_registry<Spec>(), sorted (what --model accepts).
template <class Spec> std::vector<std::string> registered_model_names() {
  std::vector<std::string> names;
  for (const auto &entry : model_registry<Spec>()) names.push_back(entry.first);
  return names;
}

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

/// The command line of a zoo binary:
///   PROGRAM [--model NAME] [--reps R] [--rep-seconds S] [--json PATH] [--list] [--loss-steps N] [--check-steps N]
///           [--device cpu|cuda|cuda-sim] [--batch B]
struct Args {
  std::string model;  ///< empty: all
  int reps = 5;
  double rep_seconds = 0.5;
  std::string json_path;  ///< empty: stdout
  bool list = false;
  int loss_steps = 0;  ///< > 0: train N eager steps and report their losses instead of timing
  int check_steps = 0;  ///< > 0 (kiln-zoo): check compiled against eager over N steps instead of timing
  /// kiln-zoo: where the models and batches live: "cpu", "cuda", or
  /// "cuda-sim" (cuda:0 served by the CUDA-on-CPU simulator: sets KILN_CUDA_SIM=1).
  std::string device = "cpu";
  int batch = 0;  ///< > 0 (kiln-zoo): the first B rows of each model's batch (small runs, e.g. on the simulator)
};

/// Parses argv; `models` are the registered names (--model must be one).
/// Prints the usage to stderr and exits with status 2 on a bad argument.
Args parse_args(int argc, char **argv, const std::string &program, const std::vector<std::string> &models);

/// Seconds from `start` to now.
double seconds_since(Clock::time_point start);

/// The median of `v` (the mean of the middle two for an even count); v non-empty.
double median(std::vector<double> v);

/// Steps per timed repetition: about `rep_seconds` of steps that take
/// `step_seconds` each, clamped to [2, 500] (harness.h).
int steps_per_rep(double rep_seconds, double step_seconds);

/// The process' peak resident set in MB (getrusage's ru_maxrss).
double max_rss_mb();

/// /proc/loadavg's 1, 5 and 15 minute load averages, "a b c".
std::string load_average();

/// $OMP_NUM_THREADS as set, or "(unset)".
std::string omp_num_threads();

/// Writes `report` (indented) to `path`, or to stdout when `path` is empty.
void write_report(const json &report, const std::string &path);

}  // namespace kiln::zoo
