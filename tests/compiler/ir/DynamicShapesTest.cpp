// ir::fitSymbolicGraph / ir::instantiate (automatic dynamic shapes): which
// differences between two traces fit c * s^p, and what does not.
#include <gtest/gtest.h>

#include "kiln/ir/DynamicShapes.h"

namespace kiln::ir {
namespace {

/// x [s, 8] -> reshape [8 s] -> sum -> * (1 / (8 s)): a mean over a batch.
Graph meanGraph(int64_t s) {
  Graph g;
  int x = g.addValue({s, 8}, ElementType::F32);
  int flat = g.addValue({8 * s}, ElementType::F32);
  int total = g.addValue({}, ElementType::F32);
  int scale = g.addValue({}, ElementType::F32);
  int mean = g.addValue({}, ElementType::F32);
  g.inputs = {x};
  g.input_roles = {InputRole::Primal};
  g.nodes.push_back(Node{OpKind::Reshape, {x}, flat});
  Node sum{OpKind::ReduceSum, {flat}, total};
  sum.ints = {0};
  g.nodes.push_back(sum);
  Node c{OpKind::Constant, {}, scale};
  c.scalar = 1.0 / static_cast<double>(8 * s);
  g.nodes.push_back(c);
  g.nodes.push_back(Node{OpKind::Mul, {total, scale}, mean});
  g.outputs = {mean};
  g.num_forward_outputs = 1;
  return g;
}

TEST(ir_DynamicShapes, FitsSizesAndScalarsAndInstantiates) {
  SymbolicGraph sym;
  std::string why;
  ASSERT_TRUE(fitSymbolicGraph(meanGraph(4), 4, meanGraph(5), 5, &sym, &why)) << why;
  EXPECT_EQ(sym.dimString(0, 0), "s");
  EXPECT_EQ(sym.dimString(0, 1), "8");
  EXPECT_EQ(sym.dimString(1, 0), "8*s");
  EXPECT_TRUE(sym.isDynamic(0));
  EXPECT_FALSE(sym.isDynamic(2));
  EXPECT_EQ(sym.scalars[2].power, -1);
  Graph g = instantiate(sym, 11);
  EXPECT_EQ(g.values[0].shape, (std::vector<int64_t>{11, 8}));
  EXPECT_EQ(g.values[1].shape, (std::vector<int64_t>{88}));
  EXPECT_NEAR(g.nodes[2].scalar, 1.0 / 88.0, 1e-15);
}

TEST(ir_DynamicShapes, SquaresFit) {
  // An attention-like [s, s] value: c * s^2 elements when flattened.
  auto make = [](int64_t s) {
    Graph g;
    int x = g.addValue({s, s}, ElementType::F32);
    int flat = g.addValue({s * s}, ElementType::F32);
    g.inputs = {x};
    g.input_roles = {InputRole::Primal};
    g.nodes.push_back(Node{OpKind::Reshape, {x}, flat});
    g.outputs = {flat};
    return g;
  };
  SymbolicGraph sym;
  std::string why;
  ASSERT_TRUE(fitSymbolicGraph(make(3), 3, make(4), 4, &sym, &why)) << why;
  EXPECT_EQ(sym.dimString(1, 0), "s^2");
  EXPECT_EQ(instantiate(sym, 6).values[1].shape, (std::vector<int64_t>{36}));
}

TEST(ir_DynamicShapes, RejectsWhatIsNotAMonomial) {
  SymbolicGraph sym;
  std::string why;
  // s + 1 is not c * s^p.
  Graph a = meanGraph(4), b = meanGraph(5);
  a.values[1].shape = {33};
  b.values[1].shape = {41};
  EXPECT_FALSE(fitSymbolicGraph(a, 4, b, 5, &sym, &why));
  EXPECT_NE(why.find("not c*s or c*s^2"), std::string::npos) << why;
  // Different ops.
  Graph c = meanGraph(5);
  c.nodes[3].kind = OpKind::Add;
  EXPECT_FALSE(fitSymbolicGraph(meanGraph(4), 4, c, 5, &sym, &why));
  EXPECT_NE(why.find("differs between the traces"), std::string::npos) << why;
  // Sizes 0/1 are specialized, and equal sizes define nothing.
  EXPECT_FALSE(fitSymbolicGraph(meanGraph(1), 1, meanGraph(5), 5, &sym, &why));
  EXPECT_FALSE(fitSymbolicGraph(meanGraph(5), 5, meanGraph(5), 5, &sym, &why));
}

}  // namespace
}  // namespace kiln::ir
