// ir/lib/ShapeString.h (internal) - the shape text of the dialect's verifier
// messages, shared by KilnOps.cpp and ConvOps.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "llvm/ADT/ArrayRef.h"

namespace kiln::ir {

/// "[4, 8]" for diagnostics ("[]" for a 0-d shape).
std::string shapeString(llvm::ArrayRef<int64_t> shape);

}  // namespace kiln::ir
