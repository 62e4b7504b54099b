// kiln-bench-export: load-to-first-output time of an exported model
// (kiln::load_compiled + run) against kiln::compile with a warm kernel cache
// (compile(model) + the first forward: trace, pipeline, cache hit, run), for
// the digits MLP, the small GPT and the zoo CNN, each at a throughput batch
// and at batch 1 (issue 17; goal 10x).
//
//   kiln-bench-export [--reps N] [--json PATH] [--keep DIR]
//
// --keep DIR leaves the artifacts (DIR/<model>.kiln) and their inputs
// (DIR/<model>.input.bin) there, for kiln-run-compiled and profilers.
//
// Both sides run in this process, in eval mode under NoGradGuard, on the
// same input; the kernel cache is a fresh folder warmed by one compile
// first. Then the same in fresh processes (what a server that starts
// cold sees): kiln-run-compiled (links only kiln_runtime) vs this binary in
// --child-compile mode (kiln::compile + first forward, warm kernel cache),
// both timed inside the process and as the process's wall time (exec,
// dynamic linking of libLLVM/libMLIR or not, start-up, exit). Medians.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/export.h"
#include "kiln/kiln.h"
#include "kiln/load_compiled.h"
#include "models/cnn.h"
#include "models/gpt.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Case {
  std::string name;
  std::shared_ptr<kiln::nn::Module> model;
  kiln::Tensor input;
};

kiln::runtime::HostTensor host_of(const kiln::Tensor &t) {
  kiln::runtime::HostTensor h;
  h.dtype = static_cast<kiln::runtime::ElementType>(t.dtype());
  h.sizes = t.sizes();
  const auto *p = static_cast<const uint8_t *>(t.contiguous().raw_data());
  h.data.assign(p, p + t.numel() * kiln::itemsize(t.dtype()));
  return h;
}

/// Runs `command` (stdout to `json_out`); its wall time in seconds, or -1 on failure.
double wall_seconds_of(const std::string &command) {
  const auto t0 = Clock::now();
  if (std::system(command.c_str()) != 0) return -1;
  return seconds(t0, Clock::now());
}

/// A field of the one JSON line a child wrote.
double json_field(const std::string &path, const char *key) {
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  return j.is_object() && j.contains(key) ? j[key].get<double>() : -1;
}

struct ProcessTimes {
  double inside = -1;  ///< measured inside the process: load/compile to first output
  double wall = -1;    ///< the whole process: exec, dynamic linking, start-up, exit
};

/// kiln-run-compiled on the artifact, a fresh process linking only kiln_runtime.
ProcessTimes runtime_process(const std::string &runner, const std::string &artifact, const kiln::Tensor &x,
                             const std::string &dir) {
  const std::string input = dir + "/input.bin";
  {
    std::ofstream out(input, std::ios::binary);
    out.write(static_cast<const char *>(x.contiguous().raw_data()), x.numel() * kiln::itemsize(x.dtype()));
  }
  ProcessTimes t;
  t.wall = wall_seconds_of("'" + runner + "' '" + artifact + "' --input '" + input + "' > '" + dir + "/run.json'");
  t.inside = json_field(dir + "/run.json", "load_to_first_output_seconds");
  return t;
}

/// This binary in --child-compile mode: a fresh process running
/// kiln::compile(model) + the first forward with the warm kernel cache.
ProcessTimes compile_process(const std::string &self, const std::string &model, const std::string &dir) {
  ProcessTimes t;
  t.wall = wall_seconds_of("'" + self + "' --child-compile " + model + " > '" + dir + "/child.json'");
  t.inside = json_field(dir + "/child.json", "compile_to_first_output_seconds");
  return t;
}

/// Each model at a throughput batch and at batch 1 (a server's first
/// request: the forward, identical work on both sides, is smallest there).
std::vector<Case> make_cases() {
  kiln::manual_seed(0);
  std::vector<Case> cases;
  auto mlp = std::make_shared<kiln::nn::Sequential>(std::initializer_list<std::shared_ptr<kiln::nn::Module>>{
      std::make_shared<kiln::nn::Linear>(64, 128), std::make_shared<kiln::nn::ReLU>(),
      std::make_shared<kiln::nn::Linear>(128, 10)});
  cases.push_back({"digits_mlp", mlp, kiln::randn({64, 64})});
  cases.push_back({"digits_mlp_b1", mlp, kiln::randn({1, 64})});
  auto tokens = [](int64_t batch) {
    std::vector<int64_t> t;
    for (int64_t i = 0; i < batch * 64; ++i) t.push_back((i * 7 + 3) % 65);
    return kiln::tensor(t, {batch, 64});
  };
  auto gpt = std::make_shared<kiln::models::GPT>(65, 64, 2, 128, 4, 0.1);
  cases.push_back({"gpt", gpt, tokens(8)});
  cases.push_back({"gpt_b1", gpt, tokens(1)});
  auto cnn = std::make_shared<kiln::models::DigitsCNN>(16);
  cases.push_back({"cnn", cnn, kiln::randn({32, 1, 8, 8})});
  cases.push_back({"cnn_b1", cnn, kiln::randn({1, 1, 8, 8})});
  return cases;
}

/// --child-compile NAME: compile + first forward, timed, as one JSON line.
int child_compile(const std::string &name) {
  for (Case &c : make_cases())
    if (c.name == name) {
      c.model->eval();
      kiln::NoGradGuard no_grad;
      const auto t0 = Clock::now();
      kiln::Tensor y = kiln::compile(c.model)->forward(c.input);
      std::printf("{\"compile_to_first_output_seconds\": %.6f}\n", seconds(t0, Clock::now()));
      return 0;
    }
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 3 && std::string(argv[1]) == "--child-compile") return child_compile(argv[2]);
  int reps = 5;
  std::string json_path, keep_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--keep" && i + 1 < argc) keep_dir = argv[++i];
    else {
      std::fprintf(stderr, "usage: kiln-bench-export [--reps N] [--json PATH] [--keep DIR]\n");
      return 2;
    }
  }
  char pattern[] = "/tmp/kiln-bench-export-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  setenv("KILN_CACHE_DIR", (dir + "/cache").c_str(), 1);
  const std::string runner = KILN_RUN_COMPILED;
  std::vector<Case> cases = make_cases();
  char self_path[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
  const std::string self_exe = n > 0 ? std::string(self_path, static_cast<size_t>(n)) : std::string(argv[0]);

  nlohmann::json result = {{"bench", "kiln-bench-export"}, {"reps", reps}, {"models", nlohmann::json::object()}};
  std::printf("%-13s %17s %13s %6s %9s %8s | fresh process: %14s %14s %6s %12s %12s %6s\n", "model",
              "compile warm (ms)", "load+run (ms)", "ratio", "load (ms)", "run (ms)", "compile (ms)", "load+run (ms)",
              "ratio", "wall compile", "wall load", "ratio");
  for (Case &c : cases) {
    c.model->eval();
    kiln::NoGradGuard no_grad;
    kiln::compile(c.model)->forward(c.input);  // warms the kernel cache
    std::vector<double> compile_s, load_s;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      auto compiled = kiln::compile(c.model);
      kiln::Tensor y = compiled->forward(c.input);
      compile_s.push_back(seconds(t0, Clock::now()));
    }
    const std::string path = dir + "/" + c.name + ".kiln";
    kiln::export_compiled(c.model, {c.input}, path);
    const kiln::runtime::HostTensor x = host_of(c.input);
    std::vector<double> load_only_s, steady_s;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      kiln::LoadedModel m = kiln::load_compiled(path);
      const auto t1 = Clock::now();
      std::vector<kiln::runtime::HostTensor> y = m.run({x});
      const auto t2 = Clock::now();
      load_s.push_back(seconds(t0, t2));
      load_only_s.push_back(seconds(t0, t1));
      m.run({x});
      steady_s.push_back(seconds(t2, Clock::now()));
    }
    std::vector<double> rt_inside, rt_wall, cp_inside, cp_wall;
    for (int r = 0; r < std::max(3, reps / 3); ++r) {
      const ProcessTimes rt = runtime_process(runner, path, c.input, dir);
      const ProcessTimes cp = compile_process(self_exe, c.name, dir);
      rt_inside.push_back(rt.inside), rt_wall.push_back(rt.wall), cp_inside.push_back(cp.inside), cp_wall.push_back(cp.wall);
    }
    const double process_s = median(rt_inside);
    struct stat st {};
    stat(path.c_str(), &st);
    if (!keep_dir.empty()) {
      mkdir(keep_dir.c_str(), 0755);
      std::system(("cp '" + path + "' '" + keep_dir + "/" + c.name + ".kiln' && cp '" + dir + "/input.bin' '" +
                   keep_dir + "/" + c.name + ".input.bin'")
                      .c_str());
    }
    const double ratio = median(compile_s) / median(load_s);
    std::printf("%-13s %17.2f %13.2f %5.1fx %9.2f %8.2f | %29.2f %14.2f %5.1fx %12.2f %12.2f %5.1fx\n", c.name.c_str(),
                1e3 * median(compile_s), 1e3 * median(load_s), ratio, 1e3 * median(load_only_s), 1e3 * median(steady_s),
                1e3 * median(cp_inside), 1e3 * process_s, median(cp_inside) / process_s, 1e3 * median(cp_wall),
                1e3 * median(rt_wall), median(cp_wall) / median(rt_wall));
    result["models"][c.name] = {{"compile_warm_cache_first_output_seconds", median(compile_s)},
                                {"load_compiled_first_output_seconds", median(load_s)},
                                {"separate_process_load_first_output_seconds", process_s},
                                {"fresh_process", {{"kiln_run_compiled_inside_seconds", median(rt_inside)},
                                                   {"kiln_run_compiled_wall_seconds", median(rt_wall)},
                                                   {"compile_warm_cache_inside_seconds", median(cp_inside)},
                                                   {"compile_warm_cache_wall_seconds", median(cp_wall)},
                                                   {"ratio_inside", median(cp_inside) / median(rt_inside)},
                                                   {"ratio_wall", median(cp_wall) / median(rt_wall)}}},
                                {"load_only_seconds", median(load_only_s)},
                                {"steady_run_seconds", median(steady_s)},
                                {"ratio", ratio},
                                {"artifact_bytes", static_cast<int64_t>(st.st_size)},
                                {"compile_samples", compile_s},
                                {"load_samples", load_s}};
  }
  std::system(("rm -rf '" + dir + "'").c_str());
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << result.dump(2) << "\n";
  }
  return 0;
}
