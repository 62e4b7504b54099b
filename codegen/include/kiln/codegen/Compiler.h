// kiln/codegen/Compiler.h - the compiler entry point used by kiln::compile.
//
// Takes the plain Graph from tracing, builds the `kiln` dialect module, runs
// the pass pipeline (passes/Pipeline.h), lowers every kiln.fusion to LLVM and
// JITs them in one ExecutionEngine, and returns runtime Executables for the
// forward and (for joint graphs) the backward function.
//
// No MLIR type appears here; this header is safe to include from frontend/.
// Never throws: errors come back as a message (the frontend turns them into
// kiln::Error).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/ir/Graph.h"
#include "kiln/runtime/Executable.h"

namespace kiln::codegen {

struct CompileOptions {
  /// If non-empty, the IR after each named pipeline stage is written here
  /// (KILN_DUMP_IR).
  std::string dump_ir_dir;
};

/// One fusion group, for reports (kiln::explain and logs).
struct FusionInfo {
  std::string name;       ///< kernel symbol
  int num_ops = 0;        ///< ops inside the kiln.fusion region
  int64_t bytes_read = 0; ///< bytes of its operands
  int64_t bytes_written = 0;
};

struct CompiledGraph {
  /// forward: (primal inputs...) -> (forward outputs..., saved values...)
  std::shared_ptr<runtime::Executable> forward;
  /// backward: (primal inputs..., saved values..., tangents...) -> (grads...)
  /// grads are for the primal inputs that had a gradient output in the
  /// Graph, in Graph::outputs order. Null for forward-only graphs.
  std::shared_ptr<runtime::Executable> backward;
  int num_forward_outputs = 0;
  int num_saved = 0;
  std::vector<FusionInfo> fusions;
};

/// Compiles `graph`. Returns false and fills `error` on failure.
bool compileGraph(const ir::Graph &graph, const CompileOptions &options,
                  CompiledGraph *out, std::string *error);

}  // namespace kiln::codegen
