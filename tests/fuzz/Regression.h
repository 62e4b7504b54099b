// Regression.h - replays a program kiln-fuzz found (or a hand-written one)
// through the oracle: the compiled module must match eager (Oracle.h's rule).
#pragma once

#include <gtest/gtest.h>

#include "Oracle.h"

namespace kiln::fuzz {

/// `program` and `options` in Program::str() / Options::str() form; `seed`
/// draws the inputs.
inline void expect_compiled_matches_eager(const std::string &program, const std::string &options, uint64_t seed) {
  const Verdict v = check(Program::parse(program), Options::parse(options), seed);
  EXPECT_EQ(v.status, Verdict::Pass) << v.message << "\nprogram: " << program << "\noptions: " << options;
}

}  // namespace kiln::fuzz
