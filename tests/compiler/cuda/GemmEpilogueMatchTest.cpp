// codegen/GemmEpilogue.cpp's matcher on the fusions kiln-fuse makes for a
// training step of Linear(24, 40) -> GELU("tanh") -> Linear (the IR
// KILN_DUMP_IR writes after kiln-fuse, cut to the fusions under test):
// the forward bias + GELU that also yields the pre-activation
// (GELU_AUX_BIAS), the backward GELU gradient and its column sum
// (DGELU_BGRAD), and near misses that must not fold.
#include "FuseForTests.h"
#include "GemmEpilogue.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace kiln {
namespace {

/// @forward's fusion_0 body: (t, gelu(t)) from t = %13.
const char *const kForwardBody = R"(  ^bb0(%arg5: tensor<6x40xf32>, %arg6: tensor<6x40xf32>):
    %8 = kiln.constant 4.471500e-02 : tensor<6x40xf32>
    %9 = kiln.constant 0.79788456080286541 : tensor<6x40xf32>
    %10 = kiln.constant 2.000000e+00 : tensor<6x40xf32>
    %11 = kiln.constant 0.000000e+00 : tensor<6x40xf32>
    %12 = kiln.constant 1.000000e+00 : tensor<6x40xf32>
    %13 = kiln.add %arg5, %arg6 : tensor<6x40xf32>
    %14 = kiln.mul %13, %13 : tensor<6x40xf32>
    %15 = kiln.mul %14, %13 : tensor<6x40xf32>
    %16 = kiln.mul %15, %8 : tensor<6x40xf32>
    %17 = kiln.add %13, %16 : tensor<6x40xf32>
    %18 = kiln.mul %17, %9 : tensor<6x40xf32>
    %19 = kiln.mul %18, %10 : tensor<6x40xf32>
    %20 = kiln.compare ge, %19, %11 : tensor<6x40xf32>
    %21 = kiln.neg %19 : tensor<6x40xf32>
    %22 = kiln.select %20, %21, %19 : tensor<6x40xf32>
    %23 = kiln.exp %22 : tensor<6x40xf32>
    %24 = kiln.add %23, %12 : tensor<6x40xf32>
    %25 = kiln.select %20, %12, %23 : tensor<6x40xf32>
    %26 = kiln.div %25, %24 : tensor<6x40xf32>
    %27 = kiln.mul %13, %26 : tensor<6x40xf32>
    kiln.yield %13, %27 : tensor<6x40xf32>, tensor<6x40xf32>)";

/// @backward's fusion_4 body: (%arg9 = t, %arg10 = g) -> (d = g * gelu'(t), reduce_sum(d, [0])).
const char *const kBackwardBody = R"(  ^bb0(%arg9: tensor<6x40xf32>, %arg10: tensor<6x40xf32>):
    %12 = kiln.constant 4.471500e-02 : tensor<6x40xf32>
    %13 = kiln.constant 0.79788456080286541 : tensor<6x40xf32>
    %14 = kiln.constant 2.000000e+00 : tensor<6x40xf32>
    %15 = kiln.constant 0.000000e+00 : tensor<6x40xf32>
    %16 = kiln.constant 1.000000e+00 : tensor<6x40xf32>
    %17 = kiln.mul %arg9, %arg9 : tensor<6x40xf32>
    %18 = kiln.mul %17, %arg9 : tensor<6x40xf32>
    %19 = kiln.mul %18, %12 : tensor<6x40xf32>
    %20 = kiln.add %arg9, %19 : tensor<6x40xf32>
    %21 = kiln.mul %20, %13 : tensor<6x40xf32>
    %22 = kiln.mul %21, %14 : tensor<6x40xf32>
    %23 = kiln.compare ge, %22, %15 : tensor<6x40xf32>
    %24 = kiln.neg %22 : tensor<6x40xf32>
    %25 = kiln.select %23, %24, %22 : tensor<6x40xf32>
    %26 = kiln.exp %25 : tensor<6x40xf32>
    %27 = kiln.select %23, %16, %26 : tensor<6x40xf32>
    %28 = kiln.add %26, %16 : tensor<6x40xf32>
    %29 = kiln.div %27, %28 : tensor<6x40xf32>
    %30 = kiln.mul %arg10, %29 : tensor<6x40xf32>
    %31 = kiln.mul %arg10, %arg9 : tensor<6x40xf32>
    %32 = kiln.div %31, %28 : tensor<6x40xf32>
    %33 = kiln.mul %28, %28 : tensor<6x40xf32>
    %34 = kiln.mul %31, %27 : tensor<6x40xf32>
    %35 = kiln.neg %34 : tensor<6x40xf32>
    %36 = kiln.div %35, %33 : tensor<6x40xf32>
    %37 = kiln.select %23, %15, %32 : tensor<6x40xf32>
    %38 = kiln.add %37, %36 : tensor<6x40xf32>
    %39 = kiln.mul %38, %26 : tensor<6x40xf32>
    %40 = kiln.select %23, %39, %15 : tensor<6x40xf32>
    %41 = kiln.select %23, %15, %39 : tensor<6x40xf32>
    %42 = kiln.neg %40 : tensor<6x40xf32>
    %43 = kiln.add %41, %42 : tensor<6x40xf32>
    %44 = kiln.mul %43, %14 : tensor<6x40xf32>
    %45 = kiln.mul %44, %13 : tensor<6x40xf32>
    %46 = kiln.add %30, %45 : tensor<6x40xf32>
    %47 = kiln.mul %45, %12 : tensor<6x40xf32>
    %48 = kiln.mul %47, %arg9 : tensor<6x40xf32>
    %49 = kiln.mul %47, %17 : tensor<6x40xf32>
    %50 = kiln.add %46, %49 : tensor<6x40xf32>
    %51 = kiln.mul %48, %arg9 : tensor<6x40xf32>
    %52 = kiln.add %50, %51 : tensor<6x40xf32>
    %53 = kiln.add %52, %51 : tensor<6x40xf32>
    %54 = kiln.reduce_sum %53 [0] : tensor<6x40xf32> -> tensor<40xf32>
    kiln.yield %53, %54 : tensor<6x40xf32>, tensor<40xf32>)";

std::string replaceAll(std::string text, const std::string &from, const std::string &to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

/// The forward fusion after its matmul, yielding `yields`.
std::string forwardGelu(const std::string &yields = "%13, %27") {
  return R"(func.func @f(%x: tensor<6x24xf32>, %w: tensor<24x40xf32>, %b: tensor<40xf32>) -> (tensor<6x40xf32>, tensor<6x40xf32>) {
  %1 = kiln.matmul %x, %w : tensor<6x24xf32>, tensor<24x40xf32> -> tensor<6x40xf32>
  %2 = kiln.broadcast %b : tensor<40xf32> -> tensor<6x40xf32>
  %3:2 = kiln.fusion "fusion_0"(%1, %2) : (tensor<6x40xf32>, tensor<6x40xf32>) -> (tensor<6x40xf32>, tensor<6x40xf32>) {
)" + replaceAll(kForwardBody, "kiln.yield %13, %27 :", "kiln.yield " + yields + " :") + R"(
  }
  return %3#0, %3#1 : tensor<6x40xf32>, tensor<6x40xf32>
})";
}

/// The backward fusion after the input-gradient matmul; `extraUse` is
/// printed after it.
std::string backwardDgelu(const std::string &body = kBackwardBody, const std::string &extraUse = "") {
  return R"(func.func @f(%t: tensor<6x40xf32>, %dy: tensor<6x8xf32>, %w: tensor<8x40xf32>) -> (tensor<6x40xf32>, tensor<40xf32>) {
  %4 = kiln.matmul %dy, %w : tensor<6x8xf32>, tensor<8x40xf32> -> tensor<6x40xf32>
  %8:2 = kiln.fusion "fusion_4"(%t, %4) : (tensor<6x40xf32>, tensor<6x40xf32>) -> (tensor<6x40xf32>, tensor<40xf32>) {
)" + body + R"(
  }
)" + extraUse + R"(  return %8#0, %8#1 : tensor<6x40xf32>, tensor<40xf32>
})";
}

/// matchGemmEpilogue on the one fusion of `text` (parsed, not fused again).
mlir::FailureOr<codegen::GemmEpilogueMatch> matchOnly(const std::string &text, std::unique_ptr<test::Fused> &keep) {
  keep = test::fuse(text, /*runFuse=*/false);
  EXPECT_TRUE(keep) << text;
  if (!keep || keep->fusions.size() != 1)
    return mlir::failure();
  return codegen::matchGemmEpilogue(keep->fusions[0]);
}

TEST(GemmEpilogueMatch, ForwardGeluWithPreActivationIsGeluAuxBias) {
  std::unique_ptr<test::Fused> f;
  auto m = matchOnly(forwardGelu(), f);
  ASSERT_TRUE(mlir::succeeded(m));
  EXPECT_EQ(m->kind, codegen::GemmEpilogueKind::BiasGeluAux);
  EXPECT_EQ(m->mainResult, 1u); // result 0 is t (the aux output), result 1 gelu(t)
  EXPECT_EQ(std::string(codegen::gemmEpilogueName(m->kind)), "bias+gelu+aux");
  m = matchOnly(forwardGelu("%27, %13"), f); // the other order
  ASSERT_TRUE(mlir::succeeded(m));
  EXPECT_EQ(m->kind, codegen::GemmEpilogueKind::BiasGeluAux);
  EXPECT_EQ(m->mainResult, 0u);
  // A second result that is not t (the sigmoid): no fold.
  EXPECT_TRUE(mlir::failed(matchOnly(forwardGelu("%26, %27"), f)));
}

TEST(GemmEpilogueMatch, BackwardGeluGradientAndColumnSumIsDgeluBgrad) {
  std::unique_ptr<test::Fused> f;
  auto m = matchOnly(backwardDgelu(), f);
  ASSERT_TRUE(mlir::succeeded(m));
  EXPECT_EQ(m->kind, codegen::GemmEpilogueKind::DgeluBgrad);
  EXPECT_EQ(m->mainResult, 0u);
  EXPECT_TRUE(codegen::readsGemmAux(m->kind));
  EXPECT_TRUE(mlir::isa<mlir::BlockArgument>(m->operand)); // the aux operand is t, not the product
}

TEST(GemmEpilogueMatch, NearMissesDoNotFold) {
  std::unique_ptr<test::Fused> f;
  // Another cubic coefficient: not GELU's derivative.
  EXPECT_TRUE(mlir::failed(matchOnly(backwardDgelu(replaceAll(kBackwardBody, "4.471500e-02", "4.500000e-02")), f)));
  // The column sum of another value than the stored gradient.
  EXPECT_TRUE(
      mlir::failed(matchOnly(backwardDgelu(replaceAll(kBackwardBody, "kiln.reduce_sum %53", "kiln.reduce_sum %52")), f)));
  // g * sigmoid(2u) (a partial sum of the gradient) stored instead of d.
  EXPECT_TRUE(
      mlir::failed(matchOnly(backwardDgelu(replaceAll(kBackwardBody, "kiln.yield %53, %54", "kiln.yield %30, %54")), f)));
  // The product read by another op too: no fold (the GEMM would not store it).
  EXPECT_TRUE(mlir::failed(matchOnly(backwardDgelu(kBackwardBody, "  %9 = kiln.add %4, %4 : tensor<6x40xf32>\n"), f)));
}

} // namespace
} // namespace kiln
