//===- KilnDialect.td - the kiln dialect definition --------*- tablegen -*-===//
//
// The `kiln` dialect: tensor-level operations on statically shaped ranked
// tensors, produced by the GraphBuilder from a traced Graph and consumed by
// the passes (partition, fuse) and codegen.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_KILNDIALECT_TD
#define KILN_IR_KILNDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let summary = "Tensor operations of the Kiln deep-learning compiler";
  let description = [{
    Operations on ranked tensors with static shapes and element types f32,
    f64, f16, bf16, i64 (signless) and i1 (bool). Layout operations (transpose,
    broadcast, reshape) are views at execution time; `kiln.fusion` groups
    elementwise ops and reductions into one generated kernel.
  }];
  let cppNamespace = "::kiln::ir";
  let hasConstantMaterializer = 1;
}

// Element types and tensor constraints.
def Kiln_FloatElement : AnyTypeOf<[F32, F64, F16, BF16]>;
def Kiln_NumericElement : AnyTypeOf<[F32, F64, F16, BF16, I64]>;
def Kiln_AnyElement : AnyTypeOf<[F32, F64, F16, BF16, I64, I1]>;

def Kiln_Tensor : StaticShapeTensorOf<[F32, F64, F16, BF16, I64, I1]>;
def Kiln_NumericTensor : StaticShapeTensorOf<[F32, F64, F16, BF16, I64]>;
def Kiln_FloatTensor : StaticShapeTensorOf<[F32, F64, F16, BF16]>;
def Kiln_BoolTensor : StaticShapeTensorOf<[I1]>;

// Comparison predicates of kiln.compare (ordered float / signed integer).
def Kiln_PredicateEQ : I64EnumAttrCase<"eq", 0>;
def Kiln_PredicateNE : I64EnumAttrCase<"ne", 1>;
def Kiln_PredicateLT : I64EnumAttrCase<"lt", 2>;
def Kiln_PredicateLE : I64EnumAttrCase<"le", 3>;
def Kiln_PredicateGT : I64EnumAttrCase<"gt", 4>;
def Kiln_PredicateGE : I64EnumAttrCase<"ge", 5>;
def Kiln_ComparePredicateAttr : I64EnumAttr<
    "ComparePredicate", "kiln.compare predicate",
    [Kiln_PredicateEQ, Kiln_PredicateNE, Kiln_PredicateLT, Kiln_PredicateLE,
     Kiln_PredicateGT, Kiln_PredicateGE]> {
  let cppNamespace = "::kiln::ir";
}

class Kiln_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kiln_Dialect, mnemonic, traits>;

#endif // KILN_IR_KILNDIALECT_TD
