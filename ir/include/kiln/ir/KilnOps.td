//===- KilnOps.td - kiln dialect operations ----------------*- tablegen -*-===//
//
// Op names are fixed: frontend, passes and codegen depend on them.
// All ops are Pure so that CSE and DCE apply.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IR_KILNOPS_TD
#define KILN_IR_KILNOPS_TD

include "kiln/ir/KilnDialect.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Constant
//===----------------------------------------------------------------------===//

def Kiln_ConstantOp : Kiln_Op<"constant", [ConstantLike, Pure]> {
  let summary = "splat tensor constant";
  let description = [{
    A tensor whose every element is `value`. The value is stored as f64 and
    converted to the result element type (integer and i1 results need an
    integral value; i1 needs 0 or 1).

    Example:

    ```mlir
    %0 = kiln.constant 0.0 : tensor<4x8xf32>
    %1 = kiln.constant 1.0 : tensor<4xi1>
    ```
  }];
  let arguments = (ins F64Attr:$value);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasFolder = 1;
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::Type":$type, "double":$value), [{
      build($_builder, $_state, type, $_builder.getF64FloatAttr(value));
    }]>
  ];
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Kiln_BinaryOp<string mnemonic, string what, list<Trait> traits = []>
    : Kiln_Op<mnemonic, !listconcat(traits, [Pure, SameOperandsAndResultType])> {
  let summary = "elementwise " # what;
  let description = [{
    Elementwise }] # what # [{ of two tensors of identical shape and element
    type. Broadcasting is explicit (kiln.broadcast).

    Example:

    ```mlir
    %2 = kiln.}] # mnemonic # [{ %0, %1 : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Kiln_NumericTensor:$lhs, Kiln_NumericTensor:$rhs);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Kiln_AddOp : Kiln_BinaryOp<"add", "addition", [Commutative]>;
def Kiln_SubOp : Kiln_BinaryOp<"sub", "subtraction">;
def Kiln_MulOp : Kiln_BinaryOp<"mul", "multiplication", [Commutative]>;
def Kiln_DivOp : Kiln_BinaryOp<"div", "division">;

class Kiln_UnaryOp<string mnemonic, string what, Type tensorType>
    : Kiln_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = "elementwise " # what;
  let description = [{
    Elementwise }] # what # [{; the result has the operand's type.

    Example:

    ```mlir
    %1 = kiln.}] # mnemonic # [{ %0 : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins tensorType:$input);
  let results = (outs tensorType:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Kiln_NegOp : Kiln_UnaryOp<"neg", "negation", Kiln_NumericTensor>;
def Kiln_ExpOp : Kiln_UnaryOp<"exp", "natural exponential", Kiln_FloatTensor>;
def Kiln_LogOp : Kiln_UnaryOp<"log", "natural logarithm", Kiln_FloatTensor>;
def Kiln_ReluOp : Kiln_UnaryOp<"relu", "max(x, 0)", Kiln_NumericTensor>;
def Kiln_SqrtOp : Kiln_UnaryOp<"sqrt", "square root", Kiln_FloatTensor>;
def Kiln_RsqrtOp : Kiln_UnaryOp<"rsqrt", "reciprocal square root (1 / sqrt(x))",
                                Kiln_FloatTensor>;
def Kiln_TanhOp : Kiln_UnaryOp<"tanh", "hyperbolic tangent", Kiln_FloatTensor>;
def Kiln_AbsOp : Kiln_UnaryOp<"abs", "absolute value", Kiln_NumericTensor>;
def Kiln_SinOp : Kiln_UnaryOp<"sin", "sine", Kiln_FloatTensor>;
def Kiln_CosOp : Kiln_UnaryOp<"cos", "cosine", Kiln_FloatTensor>;

// Issue 13: erf, rounding, division modes and binary extremes (PyTorch's
// semantics: aten/src/ATen/native/cpu/BinaryOpsKernel.cpp, UnaryOpsKernel.cpp).
def Kiln_ErfOp : Kiln_UnaryOp<"erf", "error function erf(x) = 2/sqrt(pi) int_0^x exp(-t^2) dt",
                              Kiln_FloatTensor>;
def Kiln_FloorOp : Kiln_UnaryOp<"floor", "round toward -inf (identity on integers)",
                                Kiln_NumericTensor>;
def Kiln_CeilOp : Kiln_UnaryOp<"ceil", "round toward +inf (identity on integers)",
                               Kiln_NumericTensor>;
def Kiln_RoundOp : Kiln_UnaryOp<"round", "round half to even, as torch.round (identity on integers)",
                                Kiln_NumericTensor>;
def Kiln_TruncOp : Kiln_UnaryOp<"trunc", "round toward zero (identity on integers)",
                                Kiln_NumericTensor>;

def Kiln_MaximumOp : Kiln_BinaryOp<"maximum",
    "maximum (NaN if either is NaN, else the larger; lhs on ties, as torch.maximum)">;
def Kiln_MinimumOp : Kiln_BinaryOp<"minimum",
    "minimum (NaN if either is NaN, else the smaller; lhs on ties, as torch.minimum)">;
def Kiln_FloorDivOp : Kiln_BinaryOp<"floor_div",
    "division rounded toward -inf (torch.div(rounding_mode=\"floor\"); integers: "
    "the floored quotient, and 0 where rhs is 0)">;
def Kiln_RemainderOp : Kiln_BinaryOp<"remainder",
    "remainder with the sign of rhs (Python's %, torch.remainder; integers: 0 where rhs is 0)">;
def Kiln_FmodOp : Kiln_BinaryOp<"fmod",
    "remainder with the sign of lhs (C fmod, torch.fmod; integers: 0 where rhs is 0)">;

def Kiln_PowOp : Kiln_Op<"pow", [Pure, SameOperandsAndResultType]> {
  let summary = "elementwise power by a constant exponent";
  let description = [{
    `result[i] = input[i] ^ exponent` for a constant f64 `exponent` (as
    `torch.pow(tensor, float)`): a negative base with a non-integral
    exponent gives NaN. Floating point tensors only.

    Example:

    ```mlir
    %1 = kiln.pow %0, 3.000000e+00 : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, F64Attr:$exponent);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input `,` $exponent attr-dict `:` type($result)";
}

def Kiln_CompareOp : Kiln_Op<"compare", [Pure, SameTypeOperands,
    TypesMatchWith<"result is an i1 tensor of the operands' shape",
                   "lhs", "result",
                   "::mlir::cast<::mlir::RankedTensorType>($_self).clone("
                   "::mlir::IntegerType::get($_self.getContext(), 1))">]> {
  let summary = "elementwise comparison";
  let description = [{
    Compares two tensors of identical type elementwise with `predicate`
    (eq, ne, lt, le, gt, ge; ordered for floats, signed for integers) and
    returns an i1 tensor of the same shape.

    Example:

    ```mlir
    %2 = kiln.compare lt, %0, %1 : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Kiln_ComparePredicateAttr:$predicate,
                       Kiln_Tensor:$lhs, Kiln_Tensor:$rhs);
  let results = (outs Kiln_BoolTensor:$result);
  let assemblyFormat = "$predicate `,` $lhs `,` $rhs attr-dict `:` type($lhs)";
}

def Kiln_SelectOp : Kiln_Op<"select", [Pure,
    AllTypesMatch<["true_value", "false_value", "result"]>,
    TypesMatchWith<"condition is an i1 tensor of the result's shape",
                   "result", "cond",
                   "::mlir::cast<::mlir::RankedTensorType>($_self).clone("
                   "::mlir::IntegerType::get($_self.getContext(), 1))">]> {
  let summary = "elementwise select";
  let description = [{
    `result[i] = cond[i] ? true_value[i] : false_value[i]`; all three
    tensors have the same shape, `cond` is i1.

    Example:

    ```mlir
    %3 = kiln.select %c, %a, %b : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Kiln_BoolTensor:$cond, Kiln_Tensor:$true_value,
                       Kiln_Tensor:$false_value);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat =
      "$cond `,` $true_value `,` $false_value attr-dict `:` type($result)";
}

def Kiln_ConvertOp : Kiln_Op<"convert", [Pure]> {
  let summary = "elementwise element type conversion";
  let description = [{
    Casts every element to the result element type (float rounding to
    nearest even, float to int truncates toward zero, nonzero to i1 true).
    The shape is unchanged.

    Example:

    ```mlir
    %1 = kiln.convert %0 : tensor<4x8xf32> -> tensor<4x8xbf16>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$input);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

def Kiln_MatmulOp : Kiln_Op<"matmul", [Pure]> {
  let summary = "matrix multiplication, optionally batched";
  let description = [{
    `[M, K] x [K, N] -> [M, N]`, or batched with rank 3:
    `[B, M, K] x [B, K, N] -> [B, M, N]` (one GEMM per batch entry; no
    broadcasting of the batch dim, which is an explicit kiln.broadcast).
    Operands and result have the same rank and element type. Runs on a
    GEMM library (oneDNN / cuBLAS), never inside a kiln.fusion.

    Example:

    ```mlir
    %2 = kiln.matmul %0, %1 : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
    %5 = kiln.matmul %3, %4 : tensor<2x4x8xf32>, tensor<2x8x16xf32> -> tensor<2x4x16xf32>
    ```
  }];
  let arguments = (ins Kiln_NumericTensor:$lhs, Kiln_NumericTensor:$rhs);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Layout (views at execution time)
//===----------------------------------------------------------------------===//

def Kiln_TransposeOp : Kiln_Op<"transpose", [Pure]> {
  let summary = "permutes dimensions";
  let description = [{
    `result.shape[i] = input.shape[permutation[i]]`. `permutation` is a
    permutation of `[0, rank)`. A view (strides) at execution time.

    Example:

    ```mlir
    %1 = kiln.transpose %0 [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat =
      "$input $permutation attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
  let hasVerifier = 1;
}

def Kiln_BroadcastOp : Kiln_Op<"broadcast", [Pure]> {
  let summary = "numpy-style broadcast to a larger shape";
  let description = [{
    Expands `input` to the result shape with numpy rules: the operand's rank
    is at most the result's, dimensions are aligned from the right, and each
    operand dimension equals the result dimension or is 1. A view (zero
    strides) at execution time.

    Example:

    ```mlir
    %1 = kiln.broadcast %0 : tensor<8xf32> -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$input);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
  let hasVerifier = 1;
}

def Kiln_ReshapeOp : Kiln_Op<"reshape", [Pure]> {
  let summary = "changes the shape, keeping the element count";
  let description = [{
    Reinterprets the row-major elements of `input` with the result shape.
    Both have the same element type and element count.

    Example:

    ```mlir
    %1 = kiln.reshape %0 : tensor<4x8xf32> -> tensor<32xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$input);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Kiln_ReduceOp<string mnemonic, string what>
    : Kiln_Op<mnemonic, [Pure]> {
  let summary = what # " over dimensions";
  let description = [{
    Reduces `input` with }] # what # [{ over `dims` (sorted, unique, in
    `[0, rank)`). The result DROPS the reduced dimensions; keepdim is a
    following kiln.reshape.

    Example:

    ```mlir
    %1 = kiln.}] # mnemonic # [{ %0 [1] : tensor<4x8xf32> -> tensor<4xf32>
    ```
  }];
  let arguments = (ins Kiln_NumericTensor:$input, DenseI64ArrayAttr:$dims);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat =
      "$input $dims attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_ReduceSumOp : Kiln_ReduceOp<"reduce_sum", "sum">;
def Kiln_ReduceMaxOp : Kiln_ReduceOp<"reduce_max", "max">;
def Kiln_ReduceMinOp : Kiln_ReduceOp<"reduce_min", "min">;

class Kiln_ArgReduceOp<string mnemonic, string what>
    : Kiln_Op<mnemonic, [Pure]> {
  let summary = "index of the " # what # " along one dimension";
  let description = [{
    The int64 index along `dims` (exactly one dim) of the }] # what # [{ of
    each line of `input`: the first index of the extreme, and a NaN counts
    as the extreme (the first NaN), as torch.}] # mnemonic # [{. The result
    DROPS the dim; keepdim is a following kiln.reshape, and an all-dims
    }] # mnemonic # [{ is a kiln.reshape to rank 1 first.

    Example:

    ```mlir
    %1 = kiln.}] # mnemonic # [{ %0 [1] : tensor<4x8xf32> -> tensor<4xi64>
    ```
  }];
  let arguments = (ins Kiln_NumericTensor:$input, DenseI64ArrayAttr:$dims);
  let results = (outs StaticShapeTensorOf<[I64]>:$result);
  let assemblyFormat =
      "$input $dims attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_ArgMaxOp : Kiln_ArgReduceOp<"argmax", "maximum">;
def Kiln_ArgMinOp : Kiln_ArgReduceOp<"argmin", "minimum">;

def Kiln_CumsumOp : Kiln_Op<"cumsum", [Pure, SameOperandsAndResultType]> {
  let summary = "inclusive prefix sum along one dimension";
  let description = [{
    `result[.., i, ..] = sum_{j <= i} input[.., j, ..]` along `dims`
    (exactly one dim), as torch.cumsum; the shape is unchanged. Lowered to
    a sequential loop along the dim, parallel over the other dims; always a
    kernel of its own.

    Example:

    ```mlir
    %1 = kiln.cumsum %0 [1] : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Kiln_NumericTensor:$input, DenseI64ArrayAttr:$dims);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = "$input $dims attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Convolution and pooling (extern kernels: oneDNN on the CPU, never fused)
//===----------------------------------------------------------------------===//

// The attributes of the three convolution ops (PyTorch's conv2d arguments).
class Kiln_ConvOp<string mnemonic, string what, string example>
    : Kiln_Op<mnemonic, [Pure]> {
  let summary = what;
  let description = [{
    }] # what # [{ of a 2-D convolution (as PyTorch's
    convolution / convolution_backward): input `[N, C, H, W]`, weight
    `[O, C / groups, kH, kW]`, output `[N, O, OH, OW]` with
    `OH = (H + 2 * padding[0] - dilation[0] * (kH - 1) - 1) / stride[0] + 1`
    (OW likewise). All three tensors have one float element type. Runs on a
    convolution library (oneDNN), never inside a kiln.fusion; a bias is a
    separate kiln.add.

    Example:

    ```mlir
    }] # example # [{
    ```
  }];
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs `stride` $stride `padding` $padding `dilation` $dilation
    `groups` $groups attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_Conv2dOp : Kiln_ConvOp<"conv2d", "the forward (output = conv(input, weight))",
    "%2 = kiln.conv2d %0, %1 stride [1, 1] padding [1, 1] dilation [1, 1] groups 1 : tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<2x4x8x8xf32>"> {
  let arguments = (ins Kiln_FloatTensor:$lhs, Kiln_FloatTensor:$rhs, DenseI64ArrayAttr:$stride,
                       DenseI64ArrayAttr:$padding, DenseI64ArrayAttr:$dilation, I64Attr:$groups);
}

def Kiln_Conv2dInputGradOp : Kiln_ConvOp<"conv2d_input_grad",
    "the input gradient (lhs = grad_output, rhs = weight; result = grad_input, a transposed convolution)",
    "%2 = kiln.conv2d_input_grad %0, %1 stride [1, 1] padding [1, 1] dilation [1, 1] groups 1 : tensor<2x4x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<2x3x8x8xf32>"> {
  let arguments = (ins Kiln_FloatTensor:$lhs, Kiln_FloatTensor:$rhs, DenseI64ArrayAttr:$stride,
                       DenseI64ArrayAttr:$padding, DenseI64ArrayAttr:$dilation, I64Attr:$groups);
}

def Kiln_Conv2dWeightGradOp : Kiln_ConvOp<"conv2d_weight_grad",
    "the weight gradient (lhs = input, rhs = grad_output; result = grad_weight)",
    "%2 = kiln.conv2d_weight_grad %0, %1 stride [1, 1] padding [1, 1] dilation [1, 1] groups 1 : tensor<2x3x8x8xf32>, tensor<2x4x8x8xf32> -> tensor<4x3x3x3xf32>"> {
  let arguments = (ins Kiln_FloatTensor:$lhs, Kiln_FloatTensor:$rhs, DenseI64ArrayAttr:$stride,
                       DenseI64ArrayAttr:$padding, DenseI64ArrayAttr:$dilation, I64Attr:$groups);
}

// The attributes of max pooling (PyTorch's max_pool2d, dilation 1, floor rounding).
class Kiln_MaxPoolOp<string mnemonic, string what, Type resultType, string example>
    : Kiln_Op<mnemonic, [Pure]> {
  let summary = what;
  let description = [{
    }] # what # [{ of each `kernel` window of a float `[N, C, H, W]`
    input, windows `stride` apart, the input padded by `padding` (at most
    half the kernel) with -inf; result `[N, C, OH, OW]` with
    `OH = (H + 2 * padding[0] - kernel[0]) / stride[0] + 1` (OW likewise).
    Positions are in-plane flat indices `h * W + w` of the first maximum, a
    NaN winning (as PyTorch's max_pool2d_with_indices). An extern kernel,
    never inside a kiln.fusion.

    Example:

    ```mlir
    }] # example # [{
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$stride,
                       DenseI64ArrayAttr:$padding);
  let results = (outs resultType:$result);
  let assemblyFormat = [{
    $input `kernel` $kernel `stride` $stride `padding` $padding attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_MaxPool2dOp : Kiln_MaxPoolOp<"max_pool2d", "the maximum", Kiln_FloatTensor,
    "%1 = kiln.max_pool2d %0 kernel [2, 2] stride [2, 2] padding [0, 0] : tensor<2x3x8x8xf32> -> tensor<2x3x4x4xf32>">;
def Kiln_MaxPool2dIndicesOp : Kiln_MaxPoolOp<"max_pool2d_indices", "the position of the maximum",
    StaticShapeTensorOf<[I64]>,
    "%1 = kiln.max_pool2d_indices %0 kernel [2, 2] stride [2, 2] padding [0, 0] : tensor<2x3x8x8xf32> -> tensor<2x3x4x4xi64>">;

// Moves values between an [N, C, H, W] plane and the [N, C, OH, OW] window positions of max pooling.
class Kiln_PoolIndexOp<string mnemonic, string what, string example>
    : Kiln_Op<mnemonic, [Pure]> {
  let summary = what;
  let description = [{
    }] # what # [{ `indices` is the `[N, C, OH, OW]` i64 result of
    kiln.max_pool2d_indices (in-plane flat positions `h * W + w`); `lhs`
    and the result have one float element type. An extern kernel, never
    inside a kiln.fusion.

    Example:

    ```mlir
    }] # example # [{
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$lhs, StaticShapeTensorOf<[I64]>:$indices);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $indices attr-dict `:` type($lhs) `,` type($indices) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_MaxPool2dBackwardOp : Kiln_PoolIndexOp<"max_pool2d_backward",
    "max pooling's input gradient: `result [N, C, H, W]` is zero except `result[n, c][indices[n, c, i, j]] += lhs[n, c, i, j]` (lhs = grad_output, `[N, C, OH, OW]`; a repeated position accumulates).",
    "%2 = kiln.max_pool2d_backward %0, %1 : tensor<2x3x4x4xf32>, tensor<2x3x4x4xi64> -> tensor<2x3x8x8xf32>">;
def Kiln_MaxPool2dGatherOp : Kiln_PoolIndexOp<"max_pool2d_gather",
    "the adjoint of kiln.max_pool2d_backward (its gradient): `result[n, c, i, j] = lhs[n, c][indices[n, c, i, j]]` (lhs `[N, C, H, W]`, result `[N, C, OH, OW]`).",
    "%2 = kiln.max_pool2d_gather %0, %1 : tensor<2x3x8x8xf32>, tensor<2x3x4x4xi64> -> tensor<2x3x4x4xf32>">;

//===----------------------------------------------------------------------===//
// Indexing (addresses read from an int64 index tensor)
//===----------------------------------------------------------------------===//

def Kiln_GatherOp : Kiln_Op<"gather", [Pure,
    AllElementTypesMatch<["input", "result"]>]> {
  let summary = "gathers elements along a dimension through an index tensor";
  let description = [{
    `result[i_0, .., i_n] = input[i_0, .., index[i_0, .., i_n], .., i_n]`
    with the index in dimension `dim` (as `torch.gather`): the result has
    the index's shape, `index` has the input's rank and is no larger than
    the input in every dimension but `dim`. index_select and embedding are
    gathers with an index broadcast along the other dims. Every index is
    checked on every call: one outside `[0, input.shape[dim])` makes the
    call fail with a kiln::Error naming `source` (the op the user called:
    gather, index_select or embedding), the index and the valid range.
    Inside a kiln.fusion it is a producer over its result shape (pointwise
    consumers fuse); the producer of `input` never joins it.

    Example:

    ```mlir
    %2 = kiln.gather %w[%i] dim = 0 as "embedding" : tensor<50x8xf32>, tensor<6x8xi64> -> tensor<6x8xf32>
    ```
  }];
  let arguments = (ins Kiln_Tensor:$input, StaticShapeTensorOf<[I64]>:$index, I64Attr:$dim, StrAttr:$source);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = [{
    $input `[` $index `]` `dim` `=` $dim `as` $source attr-dict `:` type($input) `,` type($index) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_ScatterAddOp : Kiln_Op<"scatter_add", [Pure,
    AllTypesMatch<["input", "result"]>, AllElementTypesMatch<["input", "src"]>]> {
  let summary = "adds elements into a tensor at positions read from an index tensor";
  let description = [{
    `result = input`, then for every position `p` of `index` in row-major
    order: `result[p_0, .., index[p], .., p_n] += src[p]` with the index in
    dimension `dim` (as `torch.scatter_add`). Deterministic: a repeated
    index accumulates its sources in that fixed order (one sequential loop
    nest, never a racy parallel loop). `index` has the input's rank, is no
    larger than `src` in any dimension and no larger than the input in any
    but `dim`. The backward of kiln.gather; a kernel of its own. Indices
    are checked on every call as kiln.gather's (source "scatter_add").

    Example:

    ```mlir
    %3 = kiln.scatter_add %z[%i], %g dim = 0 : tensor<50x8xf32>, tensor<6x8xi64>, tensor<6x8xf32>
    ```
  }];
  let arguments = (ins Kiln_NumericTensor:$input, StaticShapeTensorOf<[I64]>:$index, Kiln_NumericTensor:$src,
                       I64Attr:$dim);
  let results = (outs Kiln_NumericTensor:$result);
  let assemblyFormat = [{
    $input `[` $index `]` `,` $src `dim` `=` $dim attr-dict `:` type($input) `,` type($index) `,` type($src)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def Kiln_FusionOp : Kiln_Op<"fusion", [Pure, IsolatedFromAbove,
    SingleBlock]> {
  let summary = "a group of elementwise ops and reductions run as one kernel";
  let description = [{
    The body is a single block whose arguments correspond 1:1 (same types)
    to the operands, terminated by `kiln.yield` whose operands correspond to
    the results. `kernel` is the kernel's symbol, unique per module
    (`fusion_0`, `fusion_1`, ...). The body may hold only kiln.constant,
    elementwise ops (add, sub, mul, div, neg, exp, log, relu, sqrt, rsqrt,
    tanh, abs, sin, cos, pow, compare, select, convert, erf, floor, ceil,
    round, trunc, maximum, minimum, floor_div, remainder, fmod), the
    reductions (kiln.reduce_sum, kiln.reduce_max, kiln.reduce_min,
    kiln.argmax, kiln.argmin), kiln.cumsum (alone), kiln.gather and
    kiln.scatter_add (alone in its fusion).

    Example:

    ```mlir
    %r = kiln.fusion "fusion_0" (%a, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4xf32> {
    ^bb0(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>):
      %0 = kiln.add %x, %y : tensor<4x8xf32>
      %1 = kiln.reduce_sum %0 [1] : tensor<4x8xf32> -> tensor<4xf32>
      kiln.yield %1 : tensor<4xf32>
    }
    ```
  }];
  let arguments = (ins StrAttr:$kernel, Variadic<Kiln_Tensor>:$inputs);
  let results = (outs Variadic<Kiln_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kernel `(` $inputs `)` attr-dict `:` functional-type($inputs, $results)
    $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The body's single block.
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
    /// The terminating kiln.yield.
    YieldOp getYield();
  }];
}

def Kiln_YieldOp : Kiln_Op<"yield", [Pure, Terminator,
    HasParent<"FusionOp">]> {
  let summary = "returns the results of a kiln.fusion body";
  let description = [{
    Terminates a kiln.fusion body; its operands become the fusion's results
    (same count and types).

    Example:

    ```mlir
    kiln.yield %1, %2 : tensor<4xf32>, tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Variadic<Kiln_Tensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

#endif // KILN_IR_KILNOPS_TD
