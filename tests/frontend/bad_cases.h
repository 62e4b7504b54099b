// bad_cases.h - the bad-input catalogues of the frontend tests: each case is
// a call that must throw kiln::Error whose message contains given substrings.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln::test_support {

struct BadCase {
  const char *name;
  std::function<void()> call;
  std::vector<std::string> expect;  // substrings of the message
};

/// Every case throws kiln::Error (not another exception, not nothing) whose
/// message contains each of its `expect` substrings.
inline void expect_kiln_errors(const std::vector<BadCase> &cases) {
  for (const BadCase &c : cases) {
    try {
      c.call();
      ADD_FAILURE() << c.name << ": no exception";
    } catch (const Error &e) {
      const std::string msg = e.what();
      for (const std::string &s : c.expect)
        EXPECT_NE(msg.find(s), std::string::npos) << c.name << ": message '" << msg << "' lacks '" << s << "'";
    } catch (const std::exception &e) {
      ADD_FAILURE() << c.name << ": threw a non-kiln exception: " << e.what();
    }
  }
}

}  // namespace kiln::test_support
