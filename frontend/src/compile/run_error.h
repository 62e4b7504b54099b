// compile/run_error.h (internal) - turns a failed compiled run into the
// kiln::Error the user sees.
#pragma once

#include <string>

#include "kiln/error.h"
#include "kiln/runtime/IndexCheck.h"

namespace kiln::compile_detail {

/// Throws when `error` (from Executable::run) is set. A failed index check
/// (runtime::kIndexErrorPrefix) is thrown as the error eager raises for the
/// same index ("embedding: index 7 is out of range ..."); anything else as
/// "kiln::compile: compiled <what> failed: <error>".
inline void check_run(const std::string &error, const char *what) {
  if (error.empty()) return;
  const std::string prefix = runtime::kIndexErrorPrefix;
  if (error.compare(0, prefix.size(), prefix) == 0) throw Error(error.substr(prefix.size()));
  throw Error(std::string("kiln::compile: compiled ") + what + " failed: " + error);
}

}  // namespace kiln::compile_detail
