// libFuzzer target: the `kiln` dialect's parser and verifier as kiln-opt runs
// them (ir/lib/KilnOps.cpp, the ODS-generated parsers and verifiers): parse a
// module from arbitrary text with kiln, func, arith, tensor and linalg
// registered (kiln::ir::loadKilnDialects), which verifies it.
//
// Properties: bad text gives diagnostics, never a crash or a sanitizer report;
// a module that parses and verifies prints to text that parses and verifies
// again and prints the same (the custom assembly formats round-trip).
// Only the Kiln code is instrumented for coverage; MLIR itself is Debian's
// shared library.
#include <memory>
#include <string>

#include "fuzz_input.h"
#include "kiln/ir/KilnDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace {

/// Types and attributes are uniqued in the context for its lifetime, so a
/// fresh context every so often keeps memory flat over a long run.
constexpr int kInputsPerContext = 500;

mlir::MLIRContext &context() {
  static std::unique_ptr<mlir::MLIRContext> ctx;
  static int uses = 0;
  if (!ctx || ++uses > kInputsPerContext) {
    ctx = std::make_unique<mlir::MLIRContext>(mlir::MLIRContext::Threading::DISABLED);
    kiln::ir::loadKilnDialects(*ctx);
    uses = 0;
  }
  return *ctx;
}

mlir::OwningOpRef<mlir::ModuleOp> parse(mlir::MLIRContext &ctx, llvm::StringRef text) {
  llvm::SourceMgr sources;
  // A copy: MLIR's lexer expects the buffer to end with a NUL.
  sources.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, "fuzz-input"), llvm::SMLoc());
  return mlir::parseSourceFile<mlir::ModuleOp>(sources, mlir::ParserConfig(&ctx));
}

std::string print(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext &ctx = context();
  mlir::ScopedDiagnosticHandler quiet(&ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  mlir::OwningOpRef<mlir::ModuleOp> module = parse(ctx, llvm::StringRef(reinterpret_cast<const char *>(data), size));
  if (!module)
    return 0;
  const std::string printed = print(*module);
  mlir::OwningOpRef<mlir::ModuleOp> again = parse(ctx, printed);
  if (!again)
    kiln::fuzz::violated("a verified module's printed form does not parse:\n" + printed);
  if (print(*again) != printed)
    kiln::fuzz::violated("printing is not stable across a round trip:\n" + printed + "\nvs\n" + print(*again));
  return 0;
}
