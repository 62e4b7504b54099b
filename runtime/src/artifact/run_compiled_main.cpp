// kiln-run-compiled: loads an exported model (kiln::export_compiled) and runs
// it once, linking only kiln_runtime (no MLIR, no LLVM): the separate process
// of the export tests and of bench/bench_export.cpp. `--help` says how to
// call it (kUsage below).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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

constexpr const char *kUsage =
    "usage: kiln-run-compiled MODEL.kiln [--input FILE]... [--output-dir DIR] [--info] [--repeat N]\n"
    "Loads MODEL.kiln (written by kiln::export_compiled) and runs it once.\n"
    "  --input FILE      one per model input, in order: the tensor's raw bytes, row-major, little-endian,\n"
    "                    of the dtype and sizes --info lists (numpy: x.astype('float32').tofile(FILE));\n"
    "                    a dynamic dim (-1) takes the size the byte count gives\n"
    "  --output-dir DIR  writes output k as DIR/output-<k>.bin, the same raw layout (DIR is created)\n"
    "  --info            prints the model's inputs and outputs (dtype, sizes) and exits\n"
    "  --repeat N        runs N more times and adds their median, steady_run_seconds\n"
    "Prints one JSON line: load_seconds, first_run_seconds, load_to_first_output_seconds, outputs.\n"
    "Exit status: 0, 1 with the error on stderr when loading or running fails, 2 on bad usage.\n";

int usage() {
  std::fputs(kUsage, stderr);
  return 2;
}

std::string shape_text(kiln::runtime::ElementType dtype, const std::vector<int64_t> &sizes) {
  std::string s = std::string(kiln::runtime::element_type_name(dtype)) + " [";
  for (size_t d = 0; d < sizes.size(); ++d) s += (d ? ", " : "") + std::to_string(sizes[d]);
  return s + "]";
}

/// Input `k` of `model` from the raw bytes of `path`; throws LoadError naming
/// the file, its byte count and what the model expects when they differ.
kiln::runtime::HostTensor read_input(const kiln::LoadedModel &model, size_t k, const std::string &path) {
  kiln::runtime::HostTensor x;
  const std::string bytes = read_file(path);
  if (k >= model.inputs().size()) {  // the count is the guard check's error
    x.sizes = {static_cast<int64_t>(bytes.size() / sizeof(float))};
    x.data.assign(bytes.begin(), bytes.end());
    return x;
  }
  const kiln::runtime::TensorSpec &spec = model.inputs()[k];
  x.dtype = spec.dtype;
  x.sizes = spec.sizes;
  const int64_t item = static_cast<int64_t>(kiln::runtime::element_size(x.dtype));
  const int64_t have = static_cast<int64_t>(bytes.size());
  int64_t rest = item;  // bytes per step of the dynamic dim, or of the whole tensor
  int dynamic = -1;
  for (size_t d = 0; d < x.sizes.size(); ++d)
    if (x.sizes[d] < 0) dynamic = static_cast<int>(d);
    else rest *= x.sizes[d];
  const std::string expected = shape_text(spec.dtype, spec.sizes);
  if (dynamic < 0 && have != rest)
    throw kiln::runtime::LoadError(path + ": " + std::to_string(have) + " bytes, expected " + std::to_string(rest) +
                                   " for input " + std::to_string(k) + " (" + expected + ")");
  if (dynamic >= 0) {
    if (rest == 0 || have % rest != 0)
      throw kiln::runtime::LoadError(path + ": " + std::to_string(have) + " bytes, expected a multiple of " +
                                     std::to_string(rest) + " for input " + std::to_string(k) + " (" + expected +
                                     ", dim " + std::to_string(dynamic) + " dynamic)");
    x.sizes[static_cast<size_t>(dynamic)] = have / rest;
  }
  x.data.assign(bytes.begin(), bytes.end());
  return x;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) return usage();
  const std::string model_path = argv[1];
  std::vector<std::string> inputs;
  std::string output_dir;
  bool info = false;
  int repeat = 0;
  if (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, stdout);
    return 0;
  }
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
      for (const auto &spec : model.inputs()) std::printf("  %s: %s\n", spec.name.c_str(), shape_text(spec.dtype, spec.sizes).c_str());
      for (const auto &spec : model.outputs()) std::printf("  %s: %s\n", spec.name.c_str(), shape_text(spec.dtype, spec.sizes).c_str());
      return 0;
    }
    std::vector<kiln::runtime::HostTensor> xs;
    for (size_t k = 0; k < inputs.size(); ++k) xs.push_back(read_input(model, k, inputs[k]));
    const auto run_start = std::chrono::steady_clock::now();
    std::vector<kiln::runtime::HostTensor> outs = model.run(xs);
    const auto done = std::chrono::steady_clock::now();
    if (!output_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(output_dir, ec);
      if (ec) throw kiln::runtime::LoadError(output_dir + ": cannot create the output folder (" + ec.message() + ")");
    }
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
