// Every kiln op documents itself in ODS (KilnOps.td): a summary, a
// description and an "Example:" block in its custom assembly. The counts are
// tied to the op table, not written here: the documented ops are the rows of
// ir/include/kiln/ir/Ops.def plus kiln.fusion and kiln.yield, and each has an
// Example. The CHECK-LABELs below check the form of each op's entry.
// RUN: mlir-tblgen -gen-op-doc -I %kiln_ir_include -I %mlir_include %kiln_ir_include/kiln/ir/KilnOps.td | FileCheck %s
// RUN: test $(mlir-tblgen -gen-op-doc -I %kiln_ir_include -I %mlir_include %kiln_ir_include/kiln/ir/KilnOps.td | grep -c '^### `kiln\.') -eq $(( $(grep -c '^KILN_OP(' %kiln_ir_include/kiln/ir/Ops.def) + 2 ))
// RUN: test $(mlir-tblgen -gen-op-doc -I %kiln_ir_include -I %mlir_include %kiln_ir_include/kiln/ir/KilnOps.td | grep -c '^Example:$') -eq $(( $(grep -c '^KILN_OP(' %kiln_ir_include/kiln/ir/Ops.def) + 2 ))

// CHECK-LABEL: ### `kiln.abs`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.abs

// CHECK-LABEL: ### `kiln.add`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.add

// CHECK-LABEL: ### `kiln.argmax`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.argmax

// CHECK-LABEL: ### `kiln.argmin`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.argmin

// CHECK-LABEL: ### `kiln.broadcast`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.broadcast

// CHECK-LABEL: ### `kiln.ceil`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.ceil

// CHECK-LABEL: ### `kiln.compare`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.compare

// CHECK-LABEL: ### `kiln.constant`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.constant

// CHECK-LABEL: ### `kiln.convert`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.convert

// CHECK-LABEL: ### `kiln.cos`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.cos

// CHECK-LABEL: ### `kiln.cumsum`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.cumsum

// CHECK-LABEL: ### `kiln.div`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.div

// CHECK-LABEL: ### `kiln.erf`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.erf

// CHECK-LABEL: ### `kiln.exp`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.exp

// CHECK-LABEL: ### `kiln.floor_div`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.floor_div

// CHECK-LABEL: ### `kiln.floor`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.floor

// CHECK-LABEL: ### `kiln.fmod`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.fmod

// CHECK-LABEL: ### `kiln.fusion`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.fusion

// CHECK-LABEL: ### `kiln.gather`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.gather

// CHECK-LABEL: ### `kiln.log`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.log

// CHECK-LABEL: ### `kiln.matmul`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.matmul

// CHECK-LABEL: ### `kiln.maximum`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.maximum

// CHECK-LABEL: ### `kiln.minimum`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.minimum

// CHECK-LABEL: ### `kiln.mul`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.mul

// CHECK-LABEL: ### `kiln.neg`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.neg

// CHECK-LABEL: ### `kiln.pow`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.pow

// CHECK-LABEL: ### `kiln.reduce_max`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.reduce_max

// CHECK-LABEL: ### `kiln.reduce_min`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.reduce_min

// CHECK-LABEL: ### `kiln.reduce_sum`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.reduce_sum

// CHECK-LABEL: ### `kiln.relu`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.relu

// CHECK-LABEL: ### `kiln.remainder`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.remainder

// CHECK-LABEL: ### `kiln.reshape`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.reshape

// CHECK-LABEL: ### `kiln.round`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.round

// CHECK-LABEL: ### `kiln.rsqrt`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.rsqrt

// CHECK-LABEL: ### `kiln.scatter_add`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.scatter_add

// CHECK-LABEL: ### `kiln.select`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.select

// CHECK-LABEL: ### `kiln.sin`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.sin

// CHECK-LABEL: ### `kiln.sqrt`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.sqrt

// CHECK-LABEL: ### `kiln.sub`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.sub

// CHECK-LABEL: ### `kiln.tanh`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.tanh

// CHECK-LABEL: ### `kiln.transpose`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.transpose

// CHECK-LABEL: ### `kiln.trunc`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.trunc

// CHECK-LABEL: ### `kiln.yield`
// CHECK-EMPTY:
// CHECK-NEXT: _{{.+}}_
// CHECK: Example:
// CHECK-EMPTY:
// CHECK-NEXT: ```mlir
// CHECK-NEXT: kiln.yield
