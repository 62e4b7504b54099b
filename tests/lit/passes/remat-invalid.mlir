// kiln-remat rejects a memory-budget outside [0, 1].
// RUN: kiln-opt %s -kiln-remat=memory-budget=1.5 -verify-diagnostics
// RUN: not kiln-opt %s -kiln-remat=memory-budget=-0.25 2>&1 | FileCheck %s --check-prefix=NEG
// NEG: error: kiln-remat: memory-budget = -0.25 is outside [0, 1]

// expected-error @+1 {{kiln-remat: memory-budget = 1.5 is outside [0, 1]}}
func.func @joint(%x: tensor<4xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<4xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %y = kiln.exp %x : tensor<4xf32>
  %gx = kiln.mul %g, %y : tensor<4xf32>
  return %y, %gx : tensor<4xf32>, tensor<4xf32>
}
