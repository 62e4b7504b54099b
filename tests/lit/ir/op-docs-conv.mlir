// The convolution and max pooling ops document themselves in ODS like every
// kiln op (op-docs.mlir counts them with the rest of Ops.def): a summary and
// an "Example:" block in their custom assembly. The entries come in the
// order of the ODS class names (Conv2dInputGradOp before Conv2dOp).
// RUN: mlir-tblgen -gen-op-doc -I %kiln_ir_include -I %mlir_include %kiln_ir_include/kiln/ir/KilnOps.td | FileCheck %s

// CHECK-LABEL: ### `kiln.conv2d_input_grad`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.conv2d_input_grad

// CHECK-LABEL: ### `kiln.conv2d`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.conv2d

// CHECK-LABEL: ### `kiln.conv2d_weight_grad`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.conv2d_weight_grad

// CHECK-LABEL: ### `kiln.max_pool2d_backward`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.max_pool2d_backward

// CHECK-LABEL: ### `kiln.max_pool2d_gather`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.max_pool2d_gather

// CHECK-LABEL: ### `kiln.max_pool2d_indices`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.max_pool2d_indices

// CHECK-LABEL: ### `kiln.max_pool2d`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.max_pool2d
