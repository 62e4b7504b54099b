// kiln-run-compiled: loads an exported model (kiln::export_compiled) and runs
// it once, linking only kiln_runtime (no MLIR, no LLVM): the separate process
// of the export tests and of bench/bench_export.cpp.
//
//   kiln-run-compiled MODEL.kiln [--input FILE]... [--output-dir DIR] [--info] [--repeat N]
//
// Each --input is the raw bytes (row-major, little-endian) of one input, in
// guard order, whose dtype and sizes are the artifact's (a byte count that
// does not match them is an error; a wrong size is reported by the guard
// check; a dynamic dim takes the size the byte count gives). Output k is written to DIR/output-<k>.bin. Prints one JSON line:
// {"load_seconds": ..., "first_run_seconds": ..., "outputs": N}; with
// --repeat N the first run is followed by N more, and the line adds
// "steady_run_seconds" (their median, seconds) for profilers and
// benchmarks. Exit status
// 1 with the error on stderr when loading or running fails, 2 on bad usage.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/load_compiled.h"

namespace {

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kiln::runtime::LoadError(path + ": cannot open the input file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int usage() {
  std::fprintf(stderr, "usage: kiln-run-compiled MODEL.kiln [--input FILE]... [--output-dir DIR] [--info] [--repeat N]\n");
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) return usage();
  const std::string model_path = argv[1];
  std::vector<std::string> inputs;
  std::string output_dir;
  bool info = false;
  int repeat = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--input" && i + 1 < argc) inputs.push_back(argv[++i]);
    else if (a == "--output-dir" && i + 1 < argc) output_dir = argv[++i];
    else if (a == "--info") info = true;
    else if (a == "--repeat" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) repeat = std::atoi(argv[++i]);
    else return usage();
  }
  try {
    const auto start = std::chrono::steady_clock::now();
    kiln::LoadedModel model = kiln::load_compiled(model_path);
    const auto loaded = std::chrono::steady_clock::now();
    if (info) {
      std::printf("%s: model %s, Kiln %s, target %s (runs on %s), %zu inputs, %zu outputs, arena %lld bytes, weights %lld bytes\n",
                  model_path.c_str(), model.model_name().c_str(), model.kiln_version().c_str(), model.target().c_str(),
                  model.device().c_str(), model.inputs().size(), model.outputs().size(), static_cast<long long>(model.arena_bytes()),
                  static_cast<long long>(model.weight_bytes()));
      for (const auto &spec : model.inputs()) {
        std::printf("  %s: %s [", spec.name.c_str(), kiln::runtime::element_type_name(spec.dtype));
        for (size_t d = 0; d < spec.sizes.size(); ++d) std::printf("%s%lld", d ? ", " : "", static_cast<long long>(spec.sizes[d]));
        std::printf("]\n");
      }
      return 0;
    }
    std::vector<kiln::runtime::HostTensor> xs;
    for (size_t k = 0; k < inputs.size(); ++k) {
      kiln::runtime::HostTensor x;
      const std::string bytes = read_file(inputs[k]);
      x.dtype = k < model.inputs().size() ? model.inputs()[k].dtype : kiln::runtime::ElementType::Float32;
      x.sizes = k < model.inputs().size() ? model.inputs()[k].sizes : std::vector<int64_t>{};
      const size_t item = kiln::runtime::element_size(x.dtype);
      // A dynamic dim (-1) takes the size the file's byte count gives.
      int64_t rest = static_cast<int64_t>(item);
      int dynamic = -1;
      for (size_t d = 0; d < x.sizes.size(); ++d)
        if (x.sizes[d] < 0) dynamic = static_cast<int>(d);
        else rest *= x.sizes[d];
      if (dynamic >= 0 && rest > 0) x.sizes[static_cast<size_t>(dynamic)] = static_cast<int64_t>(bytes.size()) / rest;
      if (static_cast<int64_t>(bytes.size()) != x.numel() * static_cast<int64_t>(item))  // a 1-d tensor of what the file holds
        x.sizes = {static_cast<int64_t>(bytes.size() / item)};
      x.data.assign(bytes.begin(), bytes.end());
      xs.push_back(std::move(x));
    }
    const auto run_start = std::chrono::steady_clock::now();
    std::vector<kiln::runtime::HostTensor> outs = model.run(xs);
    const auto done = std::chrono::steady_clock::now();
    if (!output_dir.empty())
      for (size_t k = 0; k < outs.size(); ++k) {
        std::ofstream out(output_dir + "/output-" + std::to_string(k) + ".bin", std::ios::binary);
        out.write(reinterpret_cast<const char *>(outs[k].data.data()), static_cast<std::streamsize>(outs[k].data.size()));
        if (!out) throw kiln::runtime::LoadError(output_dir + ": cannot write output " + std::to_string(k));
      }
    auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::string steady;
    if (repeat > 0) {
      std::vector<double> times;
      for (int r = 0; r < repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        model.run(xs);
        times.push_back(seconds(t0, std::chrono::steady_clock::now()));
      }
      std::sort(times.begin(), times.end());
      steady = ", \"steady_run_seconds\": " + std::to_string(times[times.size() / 2]);
    }
    std::printf("{\"load_seconds\": %.6f, \"first_run_seconds\": %.6f, \"load_to_first_output_seconds\": %.6f, "
                "\"outputs\": %zu%s}\n",
                seconds(start, loaded), seconds(run_start, done), seconds(start, done), outs.size(), steady.c_str());
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kiln-run-compiled: %s\n", e.what());
    return 1;
  }
}
