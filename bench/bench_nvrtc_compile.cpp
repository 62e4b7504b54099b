// kiln-bench-nvrtc: the CUDA target's compile time with NVRTC here (no GPU
// needed: NVRTC runs on the CPU), issue 16 item 4.
//
//   build/bench/kiln-bench-nvrtc [--json bench/results/nvrtc_compile.json] [--zoo]
//
// The GPT training graph (examples/models/gpt.h, 2 blocks, d_model 128, 4
// heads, B4 T64, forward + backward) is compiled for the simulated CUDA
// device (KILN_CUDA_SIM=1), which records the translation units the CUDA
// target splits its kernels into (CompiledGraphSource). Then, for sm_90:
//   cold_split_s   those TUs through NvrtcCompiler::compile_batch on
//                  hardware_concurrency threads, empty disk cache
//   cold_single_s  the same kernels as ONE TU (the old scheme), empty cache
//   warm_split_s   a second process (this binary, --warm) reading the
//                  split TUs' CUBINs from the disk cache of the cold run
// and every kernel's registers and spills. --zoo also compiles the zoo's
// models (bench/models) and checks their kernels for spills.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kiln/codegen/CudaTarget.h"
#include "kiln/kiln.h"
#include "kiln/runtime/cuda/Nvrtc.h"
#include "models/gpt.h"
#include "models/harness.h"
#include "models/zoo_common.h"


namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;
namespace rc = kiln::runtime::cuda;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<rc::KernelSource> sourcesOf(size_t graph_begin, size_t graph_end) {
  std::vector<rc::KernelSource> out;
  for (const auto &unit : codegen::cuda::compiledGraphSources())
    if (unit.graph >= graph_begin && unit.graph < graph_end)
      out.push_back(rc::KernelSource{unit.source, unit.kernel_names, "kiln_graph.cu"});
  return out;
}

size_t graphCount() {
  size_t n = 0;
  for (const auto &unit : codegen::cuda::compiledGraphSources())
    n = std::max(n, unit.graph + 1);
  return n;
}

/// The split TUs as one (prelude once, every kernel).
rc::KernelSource singleTu(const std::vector<rc::KernelSource> &units) {
  const std::string prelude = codegen::cuda::graphPrelude();
  rc::KernelSource one{prelude, {}, "kiln_graph.cu"};
  for (const auto &u : units) {
    one.code += u.code.substr(u.code.compare(0, prelude.size(), prelude) == 0 ? prelude.size() : 0);
    one.kernel_names.insert(one.kernel_names.end(), u.kernel_names.begin(), u.kernel_names.end());
  }
  return one;
}

void writeUnits(const std::string &path, const std::vector<rc::KernelSource> &units) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto &u : units) j.push_back({{"code", u.code}, {"names", u.kernel_names}});
  std::ofstream(path) << j.dump();
}

std::vector<rc::KernelSource> readUnits(const std::string &path) {
  std::ifstream is(path);
  nlohmann::json j = nlohmann::json::parse(is);
  std::vector<rc::KernelSource> out;
  for (const auto &u : j) out.push_back(rc::KernelSource{u["code"], u["names"].get<std::vector<std::string>>(), "kiln_graph.cu"});
  return out;
}

int threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

/// Spill and register summary of compiled modules.
nlohmann::json resources(const std::vector<rc::CompiledModule> &modules, int64_t *spills, int *kernels) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto &m : modules)
    for (const auto &k : m.kernels) {
      *spills += k.spill_load_bytes + k.spill_store_bytes;
      ++*kernels;
      out.push_back({{"kernel", k.name}, {"registers", k.registers}, {"spill_bytes", k.spill_load_bytes + k.spill_store_bytes},
                     {"smem", k.shared_bytes}});
    }
  return out;
}

} // namespace

int main(int argc, char **argv) {
  codegen::cuda::recordGraphSources(true);
  std::string json_path, warm_units, warm_cache;
  bool zoo_models = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--zoo") zoo_models = true;
    else if (a == "--warm" && i + 2 < argc) { warm_units = argv[++i]; warm_cache = argv[++i]; }
  }
  if (!warm_units.empty()) { // the second process: everything from the disk cache
    const auto start = Clock::now();
    rc::NvrtcCompilerOptions o;
    o.cache_dir = warm_cache;
    rc::NvrtcCompiler nvrtc(o);
    const auto units = readUnits(warm_units);
    const auto t0 = Clock::now();
    const auto modules = nvrtc.compile_batch(units, 90, threads());
    const double s = since(t0);
    int disk = 0;
    for (const auto &m : modules) disk += m.cache == rc::CacheOutcome::DiskHit;
    std::printf("%.6f %d %zu %.6f\n", s, disk, modules.size(), since(start));
    return disk == static_cast<int>(modules.size()) ? 0 : 1;
  }
  ::setenv("KILN_CUDA_SIM", "1", 1);
  const Device cuda{DeviceType::CUDA, 0};
  manual_seed(1);
  // The GPT training graph.
  const size_t gpt_begin = graphCount();
  {
    auto gpt = std::make_shared<models::GPT>(256, 64, 2, 128, 4, 0.0);
    gpt->to(cuda);
    auto compiled = compile(gpt);
    Tensor x = zoo::random_labels({4, 64}, 256).to(cuda);
    (void)compiled->forward(x);
  }
  const size_t gpt_end = graphCount();
  const auto units = sourcesOf(gpt_begin, gpt_end);
  size_t kernels = 0;
  for (const auto &u : units) kernels += u.kernel_names.size();
  const std::string dir = (std::filesystem::temp_directory_path() / ("kiln-bench-nvrtc-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/split");
  std::filesystem::create_directories(dir + "/single");
  (void)rc::nvrtc_version(); // load libnvrtc outside the timings (both sides pay it once per process)

  rc::NvrtcCompilerOptions split_options;
  split_options.cache_dir = dir + "/split";
  rc::NvrtcCompiler split(split_options);
  auto t0 = Clock::now();
  const auto split_modules = split.compile_batch(units, 90, threads());
  const double cold_split = since(t0);

  rc::NvrtcCompilerOptions single_options;
  single_options.cache_dir = dir + "/single";
  rc::NvrtcCompiler single(single_options);
  t0 = Clock::now();
  const auto single_module = single.compile(singleTu(units), 90);
  const double cold_single = since(t0);

  writeUnits(dir + "/units.json", units);
  if (const char *dump = std::getenv("KILN_BENCH_NVRTC_DUMP_UNITS")) writeUnits(dump, units);
  const std::string cmd = std::string("'") + argv[0] + "' --warm '" + dir + "/units.json' '" + dir + "/split'";
  t0 = Clock::now();
  FILE *p = ::popen(cmd.c_str(), "r");
  double warm = -1, warm_process = -1;
  int disk_hits = 0;
  size_t warm_modules = 0;
  if (p) {
    if (std::fscanf(p, "%lf %d %zu %lf", &warm, &disk_hits, &warm_modules, &warm_process) != 4) warm = -1;
    ::pclose(p);
  }
  const double warm_exec = since(t0);

  int64_t spills = 0;
  int checked = 0;
  nlohmann::json result;
  result["gpt"] = {{"model", "GPT vocab 256, T64, 2 blocks, d_model 128, 4 heads, B4, training graph (forward + backward)"},
                   {"kernels", kernels},
                   {"translation_units", units.size()},
                   {"threads", threads()},
                   {"cold_split_s", cold_split},
                   {"cold_single_tu_s", cold_single},
                   {"warm_split_s", warm},
                   {"warm_disk_hits", disk_hits},
                   {"warm_second_process_total_s", warm_process},
                   {"warm_second_process_exec_s", warm_exec},
                   {"single_tu_cubin_bytes", single_module.binary.size()},
                   {"kernels_resources", resources(split_modules, &spills, &checked)},
                   {"target_cold_s", 1.0},
                   {"target_warm_s", 0.05}};
  std::printf("GPT training graph: %zu kernels in %zu TUs; cold sm_90 compile %.3f s split on %d threads vs %.3f s as "
              "one TU; warm (second process, disk cache) %.4f s (%d/%zu disk hits; process %.3f s)\n",
              kernels, units.size(), cold_split, threads(), cold_single, warm, disk_hits, warm_modules, warm_exec);
  if (zoo_models) {
    nlohmann::json zoo = nlohmann::json::object();
    for (auto &[name, spec] : zoo::model_registry<zoo::ModelSpec>()) {
      const size_t begin = graphCount();
      const auto s0 = Clock::now();
      try {
        manual_seed(2);
        auto model = spec.make_model();
        model->to(cuda);
        auto compiled = compile(model);
        zoo::Batch batch = spec.make_batch();
        (void)compiled->forward(batch.input.to(cuda));
      } catch (const std::exception &e) {
        zoo[name] = {{"error", e.what()}};
        std::printf("zoo %s: %s\n", name.c_str(), e.what());
        continue;
      }
      const auto zunits = sourcesOf(begin, graphCount());
      rc::NvrtcCompilerOptions o;
      o.cache_dir = "";
      rc::NvrtcCompiler nvrtc(o);
      t0 = Clock::now();
      const auto modules = nvrtc.compile_batch(zunits, 90, threads());
      const double cold = since(t0);
      int64_t zspills = 0;
      int zk = 0;
      (void)resources(modules, &zspills, &zk);
      spills += zspills;
      checked += zk;
      zoo[name] = {{"kernels", zk}, {"translation_units", zunits.size()}, {"spill_bytes", zspills}, {"cold_split_s", cold},
                   {"graph_s", since(s0)}};
      std::printf("zoo %s: %d kernels in %zu TUs, spill bytes %lld, cold sm_90 compile %.3f s\n", name.c_str(), zk,
                  zunits.size(), static_cast<long long>(zspills), cold);
    }
    result["zoo"] = zoo;
  }
  result["kernels_checked"] = checked;
  result["spill_bytes_total"] = spills;
  std::printf("%d kernels checked for sm_90, spill bytes in all: %lld\n", checked, static_cast<long long>(spills));
  if (!json_path.empty()) std::ofstream(json_path) << result.dump(2) << '\n';
  std::filesystem::remove_all(dir);
  return spills == 0 ? 0 : 1;
}
