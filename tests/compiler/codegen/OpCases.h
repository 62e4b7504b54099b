// OpCases.h - the op-by-op conformance list (IREE's CTS pattern): one or
// more small graphs per row of the op table (ir/include/kiln/ir/Ops.def),
// with their float32 input data. Two suites run it: OpConformanceTest.cpp
// (each graph compiled for a device vs the eager ops that record it) and
// CudaOpConformanceTest.cpp (the eager ops on the simulated CUDA device vs
// the cpu, every dtype, with gradients). A new op adds a case in OpCases.cpp
// (OpConformanceList.EveryOpKindHasACase fails until it does).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/ir/Graph.h"

namespace kiln::codegen_test {

/// One conformance case: a graph (forward only) and its input values.
struct OpCase {
  ir::Graph graph;
  std::vector<std::vector<float>> inputs; ///< float32 data, one per graph input
};

using CaseBuilder = OpCase (*)();

/// The cases, by op kind name (Ops.def's Kind column).
const std::map<std::string, std::vector<CaseBuilder>> &cases();

/// Every op kind of Ops.def, in order.
std::vector<ir::OpKind> allOpKinds();

} // namespace kiln::codegen_test
