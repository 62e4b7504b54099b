// kiln/runtime/CacheDir.h - the one rule for where compiled kernels are
// cached on disk (the LLVM kernel cache, NVRTC CUBINs, the simulator's
// host-compiled kernels each use a folder under it).
#pragma once

#include <string>

namespace kiln::runtime {

/// The kernel cache folder: "" (no disk cache) when $KILN_DISABLE_CACHE is
/// set to anything but "0"; else $KILN_CACHE_DIR (set but empty: no cache);
/// else $XDG_CACHE_HOME/kiln/kernels; else $HOME/.cache/kiln/kernels; else
/// "". The folder may not exist yet.
std::string default_kernel_cache_dir();

} // namespace kiln::runtime
