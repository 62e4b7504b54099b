// Kernel discovery and the dynamic shared memory rewrite (SourceRewrite.h).
#include "SourceRewrite.h"

#include "ApiTable.h"

#include <algorithm>
#include <regex>

namespace kiln::runtime::sim::detail {
namespace {

int line_at(const std::string &text, size_t pos) {
  return 1 + int(std::count(text.begin(), text.begin() + long(pos), '\n'));
}

} // namespace

std::vector<std::string> find_kernels(const std::string &source) {
  static const std::regex kernel(R"(__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\()");
  std::vector<std::string> names;
  for (auto it = std::sregex_iterator(source.begin(), source.end(), kernel); it != std::sregex_iterator(); ++it) {
    std::string name = (*it)[1].str();
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

std::string rewrite_for_host(const std::string &source, const std::vector<std::string> &kernels) {
  // `extern __shared__ T name[];` (T any words and stars, optional __align__).
  static const std::regex dynamic(R"(extern\s+__shared__\s+((?:__align__\s*\(\s*\d+\s*\)\s*)?[A-Za-z_][\w\s\*]*?)\s*([A-Za-z_]\w*)\s*\[\s*\]\s*;)");
  std::string out;
  size_t copied = 0;
  for (auto it = std::sregex_iterator(source.begin(), source.end(), dynamic); it != std::sregex_iterator(); ++it) {
    const std::smatch &m = *it;
    size_t at = size_t(m.position(0));
    out.append(source, copied, at - copied);
    std::string type = std::regex_replace(m[1].str(), std::regex(R"(__align__\s*\(\s*\d+\s*\))"), "");
    const std::string name = m[2].str();
    out += "\n#undef " + name + "\n#define " + name + " (reinterpret_cast<" + type +
           " *>(kiln_sim_api.dynamic_smem()))\n#line " + std::to_string(line_at(source, at)) + "\n";
    copied = at + size_t(m.length(0));
  }
  out.append(source, copied, std::string::npos);
  out += "\n// cuda-sim entry points: cuLaunchKernel's argument convention\n";
  for (const std::string &k : kernels)
    out += "extern \"C\" void " + std::string(kEntryPrefix) + k + "(void **args) { kiln_sim_invoke(&" + k +
           ", args); }\n";
  for (const std::string &k : kernels)
    out += "extern \"C\" unsigned long " + std::string(kArgSizesPrefix) + k +
           "(unsigned long *out) { return kiln_sim_arg_sizes(&" + k + ", out); }\n";
  return out;
}

} // namespace kiln::runtime::sim::detail
