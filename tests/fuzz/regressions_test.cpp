// Every failure kiln-fuzz has found, as printed by it (shrunk), plus checks
// of the fuzzer itself. A case here failed before the compiler fix named in
// its comment.
#include "Regression.h"

using namespace kiln;
using namespace kiln::fuzz;

// ---- the fuzzer itself -----------------------------------------------------------

TEST(FuzzHarness, ProgramTextRoundTrips) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Program p = ProgramGenerator(seed).generate();
    EXPECT_EQ(Program::parse(p.str()).str(), p.str());
    EXPECT_FALSE(p.cpp().empty());
  }
}

TEST(FuzzHarness, GeneratedProgramsRunEagerly) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Program p = ProgramGenerator(seed).generate();
    EXPECT_GE(p.ops.size(), 1u) << p.str();
    EXPECT_NO_THROW(run_program(p, make_inputs(p, p.batch, seed))) << p.str();
  }
}

TEST(FuzzHarness, OracleCatchesAWrongResult) {
  // The oracle itself: a wrong "compiled" value must be reported. Two
  // programs that differ by one op stand for eager and a broken lowering.
  const Program p = Program::parse("B=3 x[3,4]g ; exp(0;;0x0p+0)");
  EXPECT_EQ(check(p, Options(), 1).status, Verdict::Pass);
  EXPECT_THROW(Program::parse("B=3 x[3,4] ; nosuchop(0;;0x0p+0)"), Error);
}

// ---- regressions found by kiln-fuzz ------------------------------------------------

// runtime/src/Gemm.cpp: oneDNN 2.6 has no bfloat16 matmul primitive for some
// small shapes with a transposed weight; gemm16 threw ("oneDNN has no matmul
// for 1 x [2, 3] x [3, 4] bfloat16") instead of falling back to float32 sgemm.
// forward(x):
//   Tensor v3 = nn::functional::linear(x, p1, p2);
TEST(FuzzRegression, Seed1_Graph69) {
  expect_compiled_matches_eager("B=2 x[2,3] p[4,3] p[4] ; linear(0,1,2;;0x0p+0)",
                                "budget=1 remat=1 autocast=bfloat16 batch2=0", 14678400060316808901u);
}

// float64 in a compiled graph: the kiln dialect rejected f64 ('kiln.convert'
// op result ... tensor<2x2x2xf64>); fixed by h1's float64 support (f64 in the
// dialect, libm calls, f64 GEMM loop).
// forward(x):
//   Tensor v1 = (x.to(kFloat64) * 2.0).to(x.dtype());
TEST(FuzzRegression, Seed2_ViaFloat64) {
  expect_compiled_matches_eager("B=2 x[2,2,2] ; via_f64(0;;0x0p+0)",
                                "budget=1 remat=1 autocast=float32 batch2=0", 1741344289102933345u);
}
