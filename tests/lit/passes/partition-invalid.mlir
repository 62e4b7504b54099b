// kiln-partition rejects a joint function whose forward outputs depend on a
// tangent.
// RUN: kiln-opt %s -kiln-partition -split-input-file -verify-diagnostics

func.func @joint(%x: tensor<4xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<4xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  // expected-error @+1 {{'kiln.add' op computes a forward output but uses tangent argument #1}}
  %y = kiln.add %x, %g : tensor<4xf32>
  return %y, %g : tensor<4xf32>, tensor<4xf32>
}

// -----

func.func @joint(%x: tensor<4xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<4xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  // expected-error @+1 {{'func.return' op returns tangent argument #1 as a forward output}}
  return %g, %x : tensor<4xf32>, tensor<4xf32>
}
