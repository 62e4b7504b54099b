// dlopen/dlsym wrapper and the toolkit search path (DynamicLibrary.h).
#include "DynamicLibrary.h"

#include <cstdlib>
#include <dlfcn.h>

namespace kiln::runtime::cuda {

std::unique_ptr<DynamicLibrary> DynamicLibrary::open(const std::vector<std::string> &candidates, std::string *reason) {
  std::string errors;
  for (const std::string &candidate : candidates) {
    void *handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle)
      return std::unique_ptr<DynamicLibrary>(new DynamicLibrary(handle, candidate));
    const char *error = dlerror();
    if (!errors.empty())
      errors += "; ";
    errors += error ? error : candidate + ": dlopen failed";
  }
  if (reason)
    *reason = errors;
  return nullptr;
}

DynamicLibrary::~DynamicLibrary() { dlclose(handle_); }

void *DynamicLibrary::symbol(const char *name) const { return dlsym(handle_, name); }

std::vector<std::string> toolkit_library_candidates(const std::string &soname) {
  std::vector<std::string> candidates = {soname};
  if (const char *home = std::getenv("CUDA_HOME"); home && *home)
    candidates.push_back(std::string(home) + "/lib64/" + soname);
  candidates.push_back("/usr/local/cuda/lib64/" + soname);
  return candidates;
}

std::string join_names(const std::vector<std::string> &names) {
  std::string joined;
  for (const std::string &name : names)
    joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

} // namespace kiln::runtime::cuda
