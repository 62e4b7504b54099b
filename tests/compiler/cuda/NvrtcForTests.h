// tests/compiler/cuda/NvrtcForTests.h - TEST-ONLY: compiles CUDA C with NVRTC
// to an sm_90 CUBIN and reads ptxas' spill report. NVRTC is dlopen()ed
// ("libnvrtc.so.13", then /usr/local/cuda/lib64/libnvrtc.so.13) and its six
// entry points are declared here, so the test builds without the toolkit.
// Replaced by runtime/cuda/Nvrtc.h (the "cudaload" part of issue 14) at merge.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <regex>
#include <string>

namespace kiln::test {

struct NvrtcResult {
  bool ok = false;
  size_t cubin_bytes = 0;
  long spill_bytes = 0; ///< sum of "N bytes spill stores" + "N bytes spill loads" over the log
  std::string log;
};

class NvrtcForTests {
public:
  using Program = struct NvrtcProgramOpaque *;
  /// The library, or null with why() set.
  static NvrtcForTests *get() {
    static NvrtcForTests instance;
    return instance.create_ ? &instance : nullptr;
  }
  static std::string why() { return "skipped: libnvrtc.so.13 not found (" + lastError() + ")"; }

  /// Compiles `source` for sm_90 (--std=c++17 -Xptxas=-v).
  NvrtcResult compile(const std::string &source, const std::string &name) const {
    NvrtcResult r;
    Program program = nullptr;
    if (create_(&program, source.c_str(), name.c_str(), 0, nullptr, nullptr) != 0) {
      r.log = "nvrtcCreateProgram failed";
      return r;
    }
    const char *options[] = {"--std=c++17", "-arch=sm_90", "-Xptxas=-v"};
    const int status = compile_(program, 3, options);
    size_t logSize = 0;
    logSize_(program, &logSize);
    r.log.resize(logSize);
    if (logSize)
      log_(program, r.log.data());
    if (status == 0)
      cubinSize_(program, &r.cubin_bytes);
    destroy_(&program);
    r.ok = status == 0 && r.cubin_bytes > 0;
    static const std::regex spill("([0-9]+) bytes spill (stores|loads)");
    for (std::sregex_iterator it(r.log.begin(), r.log.end(), spill), end; it != end; ++it)
      r.spill_bytes += std::stol((*it)[1]);
    return r;
  }

private:
  NvrtcForTests() {
    handle_ = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!handle_)
      handle_ = dlopen("/usr/local/cuda/lib64/libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      lastError() = dlerror();
      return;
    }
    create_ = reinterpret_cast<CreateFn>(dlsym(handle_, "nvrtcCreateProgram"));
    compile_ = reinterpret_cast<CompileFn>(dlsym(handle_, "nvrtcCompileProgram"));
    cubinSize_ = reinterpret_cast<SizeFn>(dlsym(handle_, "nvrtcGetCUBINSize"));
    logSize_ = reinterpret_cast<SizeFn>(dlsym(handle_, "nvrtcGetProgramLogSize"));
    log_ = reinterpret_cast<LogFn>(dlsym(handle_, "nvrtcGetProgramLog"));
    destroy_ = reinterpret_cast<DestroyFn>(dlsym(handle_, "nvrtcDestroyProgram"));
    if (!compile_ || !cubinSize_ || !logSize_ || !log_ || !destroy_)
      create_ = nullptr;
  }
  static std::string &lastError() {
    static std::string e;
    return e;
  }
  // nvrtc.h's prototypes (nvrtcResult is an int enum; 0 = NVRTC_SUCCESS).
  using CreateFn = int (*)(Program *, const char *, const char *, int, const char *const *, const char *const *);
  using CompileFn = int (*)(Program, int, const char *const *);
  using SizeFn = int (*)(Program, size_t *);
  using LogFn = int (*)(Program, char *);
  using DestroyFn = int (*)(Program *);
  void *handle_ = nullptr;
  CreateFn create_ = nullptr;
  CompileFn compile_ = nullptr;
  SizeFn cubinSize_ = nullptr, logSize_ = nullptr;
  LogFn log_ = nullptr;
  DestroyFn destroy_ = nullptr;
};

} // namespace kiln::test
