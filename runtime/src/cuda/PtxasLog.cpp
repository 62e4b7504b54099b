// Parsing ptxas' -v report from NVRTC's program log (Nvrtc.h,
// parse_ptxas_log). NVRTC 13.0 prints, per kernel (a sample is in
// tests/runtime/CudaLoaderTest.cpp):
//   ptxas info    : Compiling entry function 'block_sum' for 'sm_90'
//   ptxas info    : Function properties for block_sum
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 13 registers, used 1 barriers, 128 bytes smem
#include "kiln/runtime/cuda/Nvrtc.h"

#include <cctype>
#include <sstream>

namespace kiln::runtime::cuda {
namespace {

constexpr const char *kEntryMarker = "Compiling entry function '";
constexpr const char *kPropertiesMarker = "Function properties for ";

/// The integer right before `unit` in `line` ("128 bytes smem" -> 128), or
/// -1 when `unit` is absent or not preceded by a number.
int64_t number_before(const std::string &line, const std::string &unit) {
  size_t at = line.find(unit);
  if (at == std::string::npos)
    return -1;
  size_t end = at;
  while (end > 0 && line[end - 1] == ' ')
    --end;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1])))
    --begin;
  return begin == end ? -1 : std::stoll(line.substr(begin, end - begin));
}

/// The integer right after `marker` ("Used 13 registers" after "Used "), or -1.
int64_t number_after(const std::string &line, const std::string &marker) {
  size_t at = line.find(marker);
  if (at == std::string::npos)
    return -1;
  size_t begin = at + marker.size(), end = begin;
  while (end < line.size() && std::isdigit(static_cast<unsigned char>(line[end])))
    ++end;
  return begin == end ? -1 : std::stoll(line.substr(begin, end - begin));
}

/// The text after `marker` up to `stop` (or the line's end).
std::string text_after(const std::string &line, const std::string &marker, char stop) {
  size_t begin = line.find(marker) + marker.size();
  size_t end = line.find(stop, begin);
  return line.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

int64_t or_zero(int64_t value) { return value < 0 ? 0 : value; }

void read_usage_line(const std::string &line, KernelResources &kernel) {
  kernel.registers = static_cast<int>(or_zero(number_after(line, "Used ")));
  kernel.barriers = static_cast<int>(or_zero(number_before(line, " barriers")));
  kernel.shared_bytes = or_zero(number_before(line, " bytes smem"));
}

void read_stack_line(const std::string &line, KernelResources &kernel) {
  kernel.stack_frame_bytes = or_zero(number_before(line, " bytes stack frame"));
  kernel.spill_store_bytes = or_zero(number_before(line, " bytes spill stores"));
  kernel.spill_load_bytes = or_zero(number_before(line, " bytes spill loads"));
}

} // namespace

std::vector<KernelResources> parse_ptxas_log(const std::string &log) {
  std::vector<KernelResources> kernels;
  std::string properties_of; // the function the next stack line describes
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(kEntryMarker) != std::string::npos) {
      kernels.push_back(KernelResources{});
      kernels.back().name = text_after(line, kEntryMarker, '\'');
    } else if (line.find(kPropertiesMarker) != std::string::npos) {
      properties_of = text_after(line, kPropertiesMarker, ' ');
    } else if (kernels.empty()) {
      continue;
    } else if (line.find(" bytes stack frame") != std::string::npos) {
      // Non-inlined __device__ functions get their own properties block:
      // only the kernel's own belongs to it.
      if (properties_of == kernels.back().name)
        read_stack_line(line, kernels.back());
    } else if (line.find("Used ") != std::string::npos && line.find(" registers") != std::string::npos) {
      read_usage_line(line, kernels.back());
    }
  }
  return kernels;
}

const KernelResources *CompiledModule::kernel(const std::string &name) const {
  for (const KernelResources &k : kernels)
    if (k.name == name)
      return &k;
  return nullptr;
}

} // namespace kiln::runtime::cuda
