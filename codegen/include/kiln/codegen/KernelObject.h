// kiln/codegen/KernelObject.h - the object code of a compiled graph's
// kernels, as the on-disk kernel cache stores it (codegen/DESIGN.md, "Kernel
// cache"): what kiln::export_compiled puts in an artifact. No MLIR types.
#pragma once

#include <string>

#include "kiln/codegen/Compiler.h"

namespace kiln::codegen {

/// Reads the kernel object of `graph` (compiled by compileGraph with
/// `options`) from the kernel cache: the ELF relocatable (x86-64, large code
/// model: R_X86_64_64 relocations) whose `_mlir_<symbol>` functions are the
/// kernels in MLIR's packed convention, verified against its trailer (size,
/// SHA-256, key). False with `*error` when the graph has no kernels, the
/// cache is off (compile with CompileOptions::kernel_cache_dir set), or the
/// entry is missing or corrupt.
bool readKernelObject(const CompiledGraph &graph, const CompileOptions &options, std::string *object,
                      std::string *error);

} // namespace kiln::codegen
