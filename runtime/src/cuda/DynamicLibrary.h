// A shared library opened at run time (dlopen), and the loaded-once symbol
// table type every CUDA library shares. No CUDA library is ever linked: a
// binary starts on a machine without the driver or the toolkit, and what is
// missing is reported when CUDA is first asked for (IREE's dynamic symbol
// tables; runtime/README.md "Decisions").
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

/// One dlopen'ed library; closed (dlclose) when destroyed.
class DynamicLibrary {
public:
  /// Opens the first of `candidates` (sonames or paths) that dlopen accepts,
  /// with RTLD_NOW | RTLD_LOCAL. On failure returns null and sets `*reason`
  /// to every candidate with dlerror's message ("libnvrtc.so.13: cannot open
  /// shared object file: No such file or directory; /usr/local/...").
  static std::unique_ptr<DynamicLibrary> open(const std::vector<std::string> &candidates, std::string *reason);

  ~DynamicLibrary();
  DynamicLibrary(const DynamicLibrary &) = delete;
  DynamicLibrary &operator=(const DynamicLibrary &) = delete;

  /// dlsym: the symbol's address, or null when the library has none.
  void *symbol(const char *name) const;
  /// The candidate that opened (a soname or a path).
  const std::string &name() const { return name_; }

private:
  DynamicLibrary(void *handle, std::string name) : handle_(handle), name_(std::move(name)) {}
  void *handle_;
  std::string name_;
};

/// Where a toolkit library is looked for: its soname first (the loader's
/// search: LD_LIBRARY_PATH, ldconfig), then $CUDA_HOME/lib64 and
/// /usr/local/cuda/lib64 (a toolkit that is installed but not registered,
/// as on the development machines).
std::vector<std::string> toolkit_library_candidates(const std::string &soname);

/// A library's symbol table after loading: `symbols` valid when `error` is
/// empty; else `error` says what is missing (no library, or which symbols).
template <class Symbols> struct LoadedLibrary {
  std::unique_ptr<DynamicLibrary> library;
  Symbols symbols;
  std::string error;
  bool loaded() const { return error.empty(); }
};

/// Opens `candidates` and resolves every symbol of `Symbols` with dlsym
/// through `resolve(library, symbols, missing)`; a missing symbol is an error
/// naming it ("libcublasLt.so.13 lacks cublasLtMatmul").
template <class Symbols>
LoadedLibrary<Symbols> load_library(const std::vector<std::string> &candidates,
                                    void (*resolve)(const DynamicLibrary &, Symbols &, std::vector<std::string> &));

/// "a, b, c": the names joined for messages.
std::string join_names(const std::vector<std::string> &names);

template <class Symbols>
LoadedLibrary<Symbols> load_library(const std::vector<std::string> &candidates,
                                    void (*resolve)(const DynamicLibrary &, Symbols &, std::vector<std::string> &)) {
  LoadedLibrary<Symbols> loaded;
  std::string reason;
  loaded.library = DynamicLibrary::open(candidates, &reason);
  if (!loaded.library) {
    loaded.error = "cannot load " + candidates.front() + " (" + reason + ")";
    return loaded;
  }
  std::vector<std::string> missing;
  resolve(*loaded.library, loaded.symbols, missing);
  if (!missing.empty())
    loaded.error = loaded.library->name() + " lacks " + join_names(missing) + " (too old a version?)";
  return loaded;
}

} // namespace kiln::runtime::cuda
