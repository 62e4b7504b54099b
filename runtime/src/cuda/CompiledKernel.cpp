// A compiled graph's kernels on a CUDA device (kiln/runtime/cuda/CompiledKernel.h):
// the module loaded once per device, and one launch's argument list.
#include "kiln/runtime/cuda/CompiledKernel.h"

#include <stdexcept>
#include <string>

namespace kiln::runtime::cuda {

const KernelFunction &CudaModule::function(DeviceApi &api, int device, size_t k) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = loaded_.find(device);
  if (it == loaded_.end())
    it = loaded_.emplace(device, api.load_kernels(source_, names_)).first;
  return it->second.at(k);
}

namespace {

/// One argument value of any parameter type, alive for the launch.
union ArgValue {
  const void *ptr;
  long long i64;
  float f32;
  double f64;
};

[[noreturn]] void missing(const CompiledKernel &kernel, const char *what, int index) {
  throw std::runtime_error("cuda compiled kernel " + kernel.name() + ": parameter reads " + what + " " +
                           std::to_string(index) + ", which the launch does not have");
}

const TensorView &argument(const CompiledKernel &kernel, const KernelArgs &args, int index) {
  const size_t operands = args.operands.size();
  if (index < 0 || static_cast<size_t>(index) >= operands + args.results.size())
    missing(kernel, "argument", index);
  return static_cast<size_t>(index) < operands ? *args.operands[static_cast<size_t>(index)]
                                               : *args.results[static_cast<size_t>(index) - operands];
}

} // namespace

void launch_compiled_kernel(const CompiledKernel &kernel, const KernelArgs &args, DeviceApi &api, int device,
                            StreamHandle stream) {
  std::vector<int64_t> class_sizes;
  for (auto [arg, dim] : kernel.size_sources) {
    const TensorView &v = argument(kernel, args, arg);
    if (dim < 0 || static_cast<size_t>(dim) >= v.sizes.size())
      missing(kernel, "a size of a dim past the rank of argument", arg);
    class_sizes.push_back(v.sizes[static_cast<size_t>(dim)]);
  }
  std::vector<ArgValue> values(kernel.params.size());
  std::vector<void *> pointers(kernel.params.size());
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    const KernelArgSource &p = kernel.params[i];
    ArgValue &v = values[i];
    switch (p.kind) {
    case KernelArgSource::Kind::Operand:
      if (p.index < 0 || static_cast<size_t>(p.index) >= args.operands.size())
        missing(kernel, "operand", p.index);
      v.ptr = args.operands[static_cast<size_t>(p.index)]->data();
      break;
    case KernelArgSource::Kind::Result:
      if (p.index < 0 || static_cast<size_t>(p.index) >= args.results.size())
        missing(kernel, "result", p.index);
      v.ptr = args.results[static_cast<size_t>(p.index)]->data();
      break;
    case KernelArgSource::Kind::Size:
      if (p.index < 0 || static_cast<size_t>(p.index) >= class_sizes.size())
        missing(kernel, "size class", p.index);
      v.i64 = class_sizes[static_cast<size_t>(p.index)];
      break;
    case KernelArgSource::Kind::Stride: {
      if (p.index < 0 || static_cast<size_t>(p.index) >= args.operands.size())
        missing(kernel, "the stride of operand", p.index);
      const TensorView &t = *args.operands[static_cast<size_t>(p.index)];
      if (p.dim < 0 || static_cast<size_t>(p.dim) >= t.strides.size())
        missing(kernel, "a stride past the rank of operand", p.index);
      v.i64 = t.strides[static_cast<size_t>(p.dim)];
      break;
    }
    case KernelArgSource::Kind::Float32:
      v.f32 = static_cast<float>(p.value);
      break;
    case KernelArgSource::Kind::Float64:
      v.f64 = p.value;
      break;
    }
    pointers[i] = &v;
  }
  const KernelFunction &fn = kernel.module->function(api, device, kernel.index);
  const int64_t blocks = kernel.grid_blocks ? kernel.grid_blocks(class_sizes) : 1;
  const Dim3 grid{static_cast<uint32_t>(blocks), 1, 1};
  const Dim3 block{kernel.block_threads, 1, 1};
  api.launch_kernel(fn, grid, block, kernel.dynamic_shared_bytes, stream, pointers.data());
}

} // namespace kiln::runtime::cuda
