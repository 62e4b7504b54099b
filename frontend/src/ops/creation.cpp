// Creation ops: full/zeros/ones, arange, tensor(values), random sampling.
#include <cmath>

#include "kiln/ops.h"
#include "kiln/random.h"
#include "dispatch.h"
#include "kernels.h"
#include "../trace.h"

namespace kiln {

namespace {

/// Sets every element of the contiguous `out` to `value` (converted to its dtype).
using FillKernel = void(const Tensor &out, double value);
dispatch::DispatchStub<FillKernel> fill_stub("fill");

void fill_cpu(const Tensor &out, double value) {
  const int64_t n = trace::skip_compute() ? 0 : out.numel();
  char *p = static_cast<char *>(out.raw_data());
  if (out.dtype() == kFloat32) {
    float *f = reinterpret_cast<float *>(p);
    std::fill(f, f + n, static_cast<float>(value));
  } else {
    for (int64_t i = 0; i < n; ++i) kernels::store_from_double(p, out.dtype(), i, value);
  }
}
const dispatch::KernelRegistrar<FillKernel> fill_cpu_reg(fill_stub, DeviceType::CPU, fill_cpu);

/// CUDA: a float64 kiln.constant splat (the kernel's scalar parameter)
/// converted to out's dtype, as store_from_double converts on the CPU.
void fill_cuda(const Tensor &out, double value) {
  dispatch::GraphMaker g;
  g.output(g.convert(g.constant(value, out.sizes(), kFloat64), out.dtype()));
  g.run("fill", {}, {out});
}
const dispatch::KernelRegistrar<FillKernel> fill_cuda_reg(fill_stub, DeviceType::CUDA, fill_cuda);

}  // namespace

Tensor full(const Shape &shape, double value, DType dtype, Device device) {
  Tensor out = Tensor::empty(shape, dtype, device);
  fill_stub("full", device.type, out, value);
  trace::Attrs attrs;
  attrs.scalar = value;
  trace::record(ir::OpKind::Constant, {}, out, attrs);
  return out;
}

Tensor zeros(const Shape &shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape &shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor &t) { return full(t.sizes(), 0.0, t.dtype(), t.device()); }
Tensor ones_like(const Tensor &t) { return full(t.sizes(), 1.0, t.dtype(), t.device()); }
Tensor full_like(const Tensor &t, double value) { return full(t.sizes(), value, t.dtype(), t.device()); }
Tensor empty_like(const Tensor &t) { return Tensor::empty(t.sizes(), t.dtype(), t.device()); }
Tensor scalar_tensor(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor arange(int64_t n, DType dtype, Device device) {
  KILN_CHECK(n >= 0, "arange: end must be non-negative, got ", n);
  Tensor out = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) kernels::store_from_double(out.raw_data(), dtype, i, static_cast<double>(i));
  return kernels::host_to_device(out, device);
}

Tensor tensor(const std::vector<float> &values, const Shape &shape, Device device) {
  KILN_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()), "tensor: ", values.size(),
             " values do not fill shape ", shape_str(shape), " (", numel_of(shape), " elements)");
  Tensor out = Tensor::empty(shape, kFloat32);
  std::copy(values.begin(), values.end(), out.data_ptr<float>());
  return kernels::host_to_device(out, device);
}

Tensor tensor(const std::vector<int64_t> &values, const Shape &shape, Device device) {
  KILN_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()), "tensor: ", values.size(),
             " values do not fill shape ", shape_str(shape), " (", numel_of(shape), " elements)");
  Tensor out = Tensor::empty(shape, kInt64);
  std::copy(values.begin(), values.end(), out.data_ptr<int64_t>());
  return kernels::host_to_device(out, device);
}

static void check_float(DType dtype, const char *op) {
  KILN_CHECK(is_floating_point(dtype), op, ": expected a floating point dtype, got ", dtype_name(dtype));
}

Tensor randn(const Shape &shape, DType dtype, Device device) {
  trace::GraphBreak graph_break("randn");  // not capturable: runs eagerly between compiled segments
  check_float(dtype, "randn");
  Tensor out = Tensor::empty(shape, kFloat32);
  float *p = out.data_ptr<float>();
  const int64_t n = out.numel();
  Generator &gen = default_generator();
  // Box-Muller: two uniforms give two independent normals.
  for (int64_t i = 0; i < n; i += 2) {
    float u1 = gen.next_uniform(), u2 = gen.next_uniform();
    double r = std::sqrt(-2.0 * std::log(1.0 - static_cast<double>(u1)));
    double theta = 2.0 * M_PI * u2;
    p[i] = static_cast<float>(r * std::cos(theta));
    if (i + 1 < n) p[i + 1] = static_cast<float>(r * std::sin(theta));
  }
  return kernels::host_to_device(dtype == kFloat32 ? out : out.to(dtype), device);
}

Tensor uniform(const Shape &shape, double low, double high, DType dtype, Device device) {
  trace::GraphBreak graph_break("uniform");  // not capturable: runs eagerly between compiled segments
  check_float(dtype, "uniform");
  KILN_CHECK(low <= high, "uniform: expected low <= high, got low=", low, " high=", high);
  Tensor out = Tensor::empty(shape, kFloat32);
  float *p = out.data_ptr<float>();
  Generator &gen = default_generator();
  for (int64_t i = 0; i < out.numel(); ++i)
    p[i] = static_cast<float>(low + (high - low) * gen.next_uniform());
  return kernels::host_to_device(dtype == kFloat32 ? out : out.to(dtype), device);
}

Tensor rand(const Shape &shape, DType dtype, Device device) { return uniform(shape, 0.0, 1.0, dtype, device); }

}  // namespace kiln
