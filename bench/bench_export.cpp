// kiln-bench-export: load-to-first-output time of an exported model
// (kiln::load_compiled + run) against kiln::compile with a warm kernel cache
// (compile(model) + the first forward: trace, pipeline, cache hit, run), for
// the digits MLP, the small GPT and the zoo CNN (issue 17; goal 10x).
//
//   kiln-bench-export [--reps N] [--json PATH]
//
// Both sides run in this process, in eval mode under NoGradGuard, on the
// same input; the kernel cache is a fresh folder warmed by one compile
// first. Also runs the artifact once in a separate process
// (kiln-run-compiled, linking only kiln_runtime) and reports its in-process
// load-to-first-output time (process start not included). Medians of N reps.
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

/// The separate process's own load-to-first-output seconds (kiln-run-compiled's JSON line).
double separate_process_seconds(const std::string &runner, const std::string &artifact, const kiln::Tensor &x,
                                const std::string &dir) {
  const std::string input = dir + "/input.bin";
  {
    std::ofstream out(input, std::ios::binary);
    out.write(static_cast<const char *>(x.contiguous().raw_data()), x.numel() * kiln::itemsize(x.dtype()));
  }
  const std::string command = "'" + runner + "' '" + artifact + "' --input '" + input + "' > '" + dir + "/run.json'";
  if (std::system(command.c_str()) != 0) return -1;
  std::ifstream in(dir + "/run.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  return j.is_object() && j.contains("load_to_first_output_seconds") ? j["load_to_first_output_seconds"].get<double>() : -1;
}

} // namespace

int main(int argc, char **argv) {
  int reps = 5;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: kiln-bench-export [--reps N] [--json PATH]\n");
      return 2;
    }
  }
  char pattern[] = "/tmp/kiln-bench-export-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  setenv("KILN_CACHE_DIR", (dir + "/cache").c_str(), 1);
  const std::string runner = KILN_RUN_COMPILED;

  kiln::manual_seed(0);
  std::vector<Case> cases;
  cases.push_back({"digits_mlp",
                   std::make_shared<kiln::nn::Sequential>(std::initializer_list<std::shared_ptr<kiln::nn::Module>>{
                       std::make_shared<kiln::nn::Linear>(64, 128), std::make_shared<kiln::nn::ReLU>(),
                       std::make_shared<kiln::nn::Linear>(128, 10)}),
                   kiln::randn({64, 64})});
  std::vector<int64_t> tokens;
  for (int i = 0; i < 8 * 64; ++i) tokens.push_back((i * 7 + 3) % 65);
  cases.push_back({"gpt", std::make_shared<kiln::models::GPT>(65, 64, 2, 128, 4, 0.1), kiln::tensor(tokens, {8, 64})});
  cases.push_back({"cnn", std::make_shared<kiln::models::DigitsCNN>(16), kiln::randn({32, 1, 8, 8})});

  nlohmann::json result = {{"bench", "kiln-bench-export"}, {"reps", reps}, {"models", nlohmann::json::object()}};
  std::printf("%-11s %18s %18s %7s %12s %12s %18s\n", "model", "compile warm (ms)", "load+run (ms)", "ratio",
              "load (ms)", "run (ms)", "other process (ms)");
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
    const double process_s = separate_process_seconds(runner, path, c.input, dir);
    struct stat st {};
    stat(path.c_str(), &st);
    const double ratio = median(compile_s) / median(load_s);
    std::printf("%-11s %18.2f %18.2f %6.1fx %12.2f %12.2f %18.2f\n", c.name.c_str(), 1e3 * median(compile_s),
                1e3 * median(load_s), ratio, 1e3 * median(load_only_s), 1e3 * median(steady_s), 1e3 * process_s);
    result["models"][c.name] = {{"compile_warm_cache_first_output_seconds", median(compile_s)},
                                {"load_compiled_first_output_seconds", median(load_s)},
                                {"separate_process_load_first_output_seconds", process_s},
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
