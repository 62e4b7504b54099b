// The out-of-range message of index checks (kiln/runtime/IndexCheck.h).
#include "kiln/runtime/IndexCheck.h"

namespace kiln::runtime {

std::string index_error(const IndexCheck &check, int64_t index) {
  const std::string v = std::to_string(index), n = std::to_string(check.size);
  if (check.op == "embedding")
    return "embedding: index " + v + " is out of range for a table of " + n + " embeddings (expected 0.." +
           std::to_string(check.size - 1) + ")";
  return check.op + ": index " + v + " is out of bounds for dimension " + std::to_string(check.dim) + " with size " +
         n;
}

} // namespace kiln::runtime
