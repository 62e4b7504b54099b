// The kernel cache folder rule (kiln/runtime/CacheDir.h).
#include "kiln/runtime/CacheDir.h"

#include <cstdlib>
#include <cstring>

namespace kiln::runtime {

std::string default_kernel_cache_dir() {
  if (const char *off = std::getenv("KILN_DISABLE_CACHE"); off && *off && std::strcmp(off, "0") != 0)
    return "";
  if (const char *dir = std::getenv("KILN_CACHE_DIR"))
    return dir;  // empty: disabled
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/kiln/kernels";
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/kiln/kernels";
  return "";  // nowhere sensible: no disk cache
}

} // namespace kiln::runtime
