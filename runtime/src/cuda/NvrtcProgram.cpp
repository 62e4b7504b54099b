// NVRTC version, supported architectures, target choice and one compile
// (NvrtcProgram.h, Nvrtc.h).
#include "NvrtcProgram.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "Check.h"
#include "Libraries.h"
#include "kiln/runtime/cuda/CudaError.h"

namespace kiln::runtime::cuda {
namespace {

/// Destroys the program on every path out of run_nvrtc.
struct ProgramGuard {
  nvrtcProgram program = nullptr;
  ~ProgramGuard() {
    if (program)
      nvrtc().nvrtcDestroyProgram(&program);
  }
};

/// Line `number` (1-based) of `code`, or "" when there is none.
std::string source_line(const std::string &code, int number) {
  std::istringstream lines(code);
  std::string line;
  for (int i = 1; std::getline(lines, line); ++i)
    if (i == number)
      return line;
  return "";
}

/// The first "<file>(<line>): error" in NVRTC's log, as " at line N: `text`".
std::string failing_line(const KernelSource &source, const std::string &log) {
  std::string marker = source.file_name + "(";
  for (size_t at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) {
    size_t close = log.find(')', at);
    if (close == std::string::npos || log.compare(close, 9, "): error:") != 0)
      continue;
    int number = std::atoi(log.c_str() + at + marker.size());
    return " at line " + std::to_string(number) + ": `" + source_line(source.code, number) + "`";
  }
  return "";
}

std::string fetch_log(nvrtcProgram program) {
  size_t bytes = 0;
  check_nvrtc(nvrtc().nvrtcGetProgramLogSize(program, &bytes), "nvrtcGetProgramLogSize");
  std::string log(bytes, '\0');
  check_nvrtc(nvrtc().nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog");
  while (!log.empty() && log.back() == '\0')
    log.pop_back();
  return log;
}

/// The log without ptxas' "Compile time = 14.624 ms" lines: the rest is
/// deterministic, so the same source gives the same cache entry bytes.
std::string without_timing_lines(const std::string &log) {
  std::istringstream lines(log);
  std::string kept;
  for (std::string line; std::getline(lines, line);)
    if (line.find("Compile time = ") == std::string::npos)
      kept += line + "\n";
  return kept;
}

std::string fetch_binary(nvrtcProgram program, BinaryKind kind) {
  const NvrtcSymbols &api = nvrtc();
  size_t bytes = 0;
  std::string binary;
  if (kind == BinaryKind::Cubin) {
    check_nvrtc(api.nvrtcGetCUBINSize(program, &bytes), "nvrtcGetCUBINSize");
    binary.resize(bytes);
    check_nvrtc(api.nvrtcGetCUBIN(program, binary.data()), "nvrtcGetCUBIN");
  } else {
    check_nvrtc(api.nvrtcGetPTXSize(program, &bytes), "nvrtcGetPTXSize");
    binary.resize(bytes);
    check_nvrtc(api.nvrtcGetPTX(program, binary.data()), "nvrtcGetPTX");
  }
  return binary;
}

/// Each requested kernel must be an entry of the result: a CUBIN's entries
/// are in ptxas' report, PTX's are `.entry name(` lines.
void check_kernels_present(const KernelSource &source, const CompileTarget &target, const NvrtcOutput &out) {
  std::vector<KernelResources> report = parse_ptxas_log(out.log);
  for (const std::string &name : source.kernel_names) {
    bool found = target.kind == BinaryKind::Ptx ? out.binary.find(".entry " + name + "(") != std::string::npos
                                                : std::any_of(report.begin(), report.end(),
                                                              [&](const KernelResources &k) { return k.name == name; });
    if (!found)
      throw CudaError(kNvrtcSoname, "nvrtcCompileProgram", NVRTC_SUCCESS,
                      "NVRTC compiled " + source.file_name + " for " + target.arch_name() + " but it has no kernel '" +
                          name + "': declare it extern \"C\" __global__ (C++ names are mangled)");
  }
}

[[noreturn]] void throw_compile_error(const KernelSource &source, const CompileTarget &target, nvrtcResult result,
                                      const std::string &log) {
  throw CudaError(kNvrtcSoname, "nvrtcCompileProgram", result,
                  "NVRTC could not compile " + source.file_name + " for " + target.arch_name() +
                      failing_line(source, log) + " (" + nvrtc().nvrtcGetErrorString(result) + "); NVRTC's log:\n" +
                      log);
}

} // namespace

bool nvrtc_available() { return nvrtc_library().loaded(); }
std::string nvrtc_unavailable_reason() { return nvrtc_library().error; }

NvrtcVersion nvrtc_version() {
  NvrtcVersion version;
  check_nvrtc(nvrtc().nvrtcVersion(&version.major, &version.minor), "nvrtcVersion");
  return version;
}

std::string nvrtc_version_string() {
  NvrtcVersion version = nvrtc_version();
  return std::to_string(version.major) + "." + std::to_string(version.minor);
}

std::vector<int> nvrtc_supported_archs() {
  int count = 0;
  check_nvrtc(nvrtc().nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(count);
  check_nvrtc(nvrtc().nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  std::sort(archs.begin(), archs.end());
  return archs;
}

std::string CompileTarget::arch_name() const {
  return (kind == BinaryKind::Cubin ? "sm_" : "compute_") + std::to_string(arch);
}

std::optional<CompileTarget> parse_arch_name(const std::string &name) {
  for (BinaryKind kind : {BinaryKind::Cubin, BinaryKind::Ptx}) {
    const std::string prefix = kind == BinaryKind::Cubin ? "sm_" : "compute_";
    const size_t n = prefix.size();
    if (name.size() <= n || name.size() > n + 4 || name.compare(0, n, prefix) != 0)
      continue;
    if (!std::all_of(name.begin() + static_cast<std::ptrdiff_t>(n), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    return CompileTarget{kind, std::stoi(name.substr(n))};
  }
  return std::nullopt;
}

CompileTarget choose_compile_target(int device_arch) {
  std::vector<int> archs = nvrtc_supported_archs();
  if (std::binary_search(archs.begin(), archs.end(), device_arch))
    return CompileTarget{BinaryKind::Cubin, device_arch};
  auto above = std::upper_bound(archs.begin(), archs.end(), device_arch);
  if (above == archs.begin())
    throw CudaError(kNvrtcSoname, "nvrtcGetSupportedArchs", NVRTC_SUCCESS,
                    "NVRTC " + nvrtc_version_string() + " cannot compile for sm_" + std::to_string(device_arch) +
                        ": it supports sm_" + std::to_string(archs.front()) + " to sm_" + std::to_string(archs.back()) +
                        "; use an older CUDA toolkit's NVRTC for this GPU");
  return CompileTarget{BinaryKind::Ptx, *(above - 1)};
}

NvrtcOutput run_nvrtc(const KernelSource &source, const CompileTarget &target,
                      const std::vector<std::string> &options) {
  const NvrtcSymbols &api = nvrtc();
  auto start = std::chrono::steady_clock::now();
  ProgramGuard guard;
  check_nvrtc(
      api.nvrtcCreateProgram(&guard.program, source.code.c_str(), source.file_name.c_str(), 0, nullptr, nullptr),
      "nvrtcCreateProgram");
  std::vector<const char *> argv;
  for (const std::string &option : options)
    argv.push_back(option.c_str());
  nvrtcResult result = api.nvrtcCompileProgram(guard.program, static_cast<int>(argv.size()), argv.data());
  NvrtcOutput out;
  out.log = fetch_log(guard.program);
  if (result != NVRTC_SUCCESS)
    throw_compile_error(source, target, result, out.log);
  out.log = without_timing_lines(out.log);
  out.binary = fetch_binary(guard.program, target.kind);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (out.binary.empty())
    throw CudaError(kNvrtcSoname, "nvrtcGetCUBIN", NVRTC_SUCCESS,
                    "NVRTC produced an empty " + std::string(target.kind == BinaryKind::Cubin ? "CUBIN" : "PTX") +
                        " for " + target.arch_name() + " (a CUBIN needs -arch=sm_XX, not compute_XX)");
  check_kernels_present(source, target, out);
  return out;
}

} // namespace kiln::runtime::cuda
