// artifact/ElfLoader.h - Kiln's loader for the kernel object of an exported
// model: an x86-64 ELF relocatable as LLVM's JIT emits it for the kernel
// cache (large code model: R_X86_64_64 / PC64 relocations), mapped into
// fresh pages (code read+execute, constants read-only), relocated, and its
// external calls bound to a fixed table (malloc, free, memcpy, memset,
// memrefCopy, libm). Why not the system linker + dlopen: FORMAT.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace kiln::runtime::artifact {

/// A loaded object: symbol name -> address, for as long as it lives.
class LoadedObject {
public:
  ~LoadedObject();
  LoadedObject(const LoadedObject &) = delete;
  LoadedObject &operator=(const LoadedObject &) = delete;
  /// Address of the defined global symbol `name`, or null.
  void *symbol(const std::string &name) const;
  size_t mapped_bytes() const { return size_; }

  /// Parses, maps and relocates `object`. Null with `*error` naming the
  /// problem (not ELF64 x86-64 REL, a section or symbol outside the file, an
  /// unknown relocation type or external symbol, ...): never reads outside
  /// `object`. `execute`: make the code executable (false maps it read-only,
  /// for tools and the fuzzer, which never call it).
  static std::unique_ptr<LoadedObject> load(const std::string &object, bool execute, std::string *error);

private:
  LoadedObject() = default;
  void *base_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, void *> symbols_;
};

} // namespace kiln::runtime::artifact
