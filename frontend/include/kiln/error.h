// kiln/error.h - the one exception type users see.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln {

/// Thrown for every user error (bad shape, dtype, device, file, state).
/// The message names the operation, the bad value and what was expected,
/// e.g. "matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)".
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void append(std::ostringstream &) {}
template <class T, class... Rest> void append(std::ostringstream &os, const T &v, const Rest &...rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

/// Formats a shape as "[2, 3]".
std::string shape_str(const std::vector<int64_t> &shape);

}  // namespace kiln

/// KILN_CHECK(cond, "op: ", parts...) throws kiln::Error with the
/// concatenated parts when `cond` is false.
#define KILN_CHECK(cond, ...)                                                                      \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::ostringstream kiln_check_os_;                                                           \
      ::kiln::detail::append(kiln_check_os_, __VA_ARGS__);                                         \
      throw ::kiln::Error(kiln_check_os_.str());                                                   \
    }                                                                                              \
  } while (0)
