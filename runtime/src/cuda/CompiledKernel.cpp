// A compiled graph's kernels on a CUDA device (kiln/runtime/cuda/CompiledKernel.h):
// the module loaded once per device, and one launch's argument list.
#include "kiln/runtime/cuda/CompiledKernel.h"

#include "kiln/runtime/cuda/Nvrtc.h" // parse_arch_name

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace kiln::runtime::cuda {

const std::string &choose_module_image(const ModuleImages &images, int device_arch, const std::string &what) {
  const std::string want = "sm_" + std::to_string(device_arch);
  for (const auto &[arch, cubin] : images.cubins)
    if (arch == want)
      return cubin;
  const std::optional<CompileTarget> ptx_target = parse_arch_name(images.ptx_arch);
  const int ptx_arch = ptx_target && ptx_target->kind == BinaryKind::Ptx ? ptx_target->arch : 0;
  if (!images.ptx.empty() && ptx_arch > 0 && ptx_arch <= device_arch)
    return images.ptx;
  std::string present;
  for (const auto &[arch, cubin] : images.cubins)
    present += (present.empty() ? "" : ", ") + arch;
  if (!images.ptx.empty())
    present += (present.empty() ? "" : ", ") + images.ptx_arch + " (PTX)";
  throw std::runtime_error(what + ": no device code for this GPU (" + want + "): the artifact has " +
                           (present.empty() ? std::string("none") : present) +
                           "; export it with cuda_archs including \"" + want + "\"");
}

int64_t GridRule::blocks(const std::vector<int64_t> &class_sizes) const {
  int64_t work = static_work;
  for (int c : work_classes)
    work *= c >= 0 && c < static_cast<int>(class_sizes.size()) ? class_sizes[static_cast<size_t>(c)] : 1;
  const int64_t per_block = std::max<int64_t>(work_per_block, 1);
  return std::max<int64_t>(1, std::min((work + per_block - 1) / per_block, max_blocks));
}

const KernelFunction &CudaModule::function(DeviceApi &api, int device, size_t k) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = loaded_.find(device);
  if (it == loaded_.end()) {
    if (images_ && !api.properties().host_accessible) {
      const DeviceProperties p = api.properties();
      const std::string what = "kernels " + (names_.empty() ? std::string("(none)") : names_.front()) + "...";
      it = loaded_.emplace(device, api.load_module_image(choose_module_image(*images_, p.major * 10 + p.minor, what),
                                                         names_)).first;
    } else {
      it = loaded_.emplace(device, api.load_kernels(source_, names_)).first;
    }
  }
  return it->second.at(k);
}

const std::string &CompiledKernel::name() const {
  static const std::string gemm = "gemm epilogue";
  return module ? module->kernel_names().at(index) : gemm;
}

const char *gemm_epilogue_name(GemmEpilogue epilogue) {
  switch (epilogue) {
  case GemmEpilogue::None: return "none";
  case GemmEpilogue::Bias: return "bias";
  case GemmEpilogue::BiasRelu: return "bias+relu";
  case GemmEpilogue::BiasGelu: return "bias+gelu";
  case GemmEpilogue::BiasGeluAux: return "bias+gelu+aux";
  case GemmEpilogue::Dgelu: return "dgelu";
  case GemmEpilogue::DgeluBgrad: return "dgelu+bgrad";
  }
  return "?";
}

namespace {

template <class T> void epilogue_rows(GemmEpilogue epilogue, const TensorView &bias, const TensorView &c) {
  const int64_t M = c.sizes[0], N = c.sizes[1], bias_stride = bias.strides.empty() ? 1 : bias.strides[0];
  const T *b = static_cast<const T *>(bias.data());
  T *out = static_cast<T *>(c.data());
  constexpr double kSqrt2OverPi = 0.79788456080286535588, kCubic = 0.044715;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double x = static_cast<double>(out[m * N + n]) + static_cast<double>(b[n * bias_stride]);
      if (epilogue == GemmEpilogue::BiasRelu)
        x = x < 0 ? 0.0 : x;
      else if (epilogue == GemmEpilogue::BiasGelu)
        x = 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x)));
      out[m * N + n] = static_cast<T>(x);
    }
}

/// Row-major dense (strides empty: dense by convention).
bool dense(const TensorView &v) {
  if (v.strides.empty())
    return true;
  int64_t expect = 1;
  for (size_t d = v.sizes.size(); d-- > 0;) {
    if (v.sizes[d] != 1 && v.strides[d] != expect)
      return false;
    expect *= v.sizes[d];
  }
  return true;
}

constexpr double kGeluSqrt2OverPi = 0.79788456080286535588, kGeluCubic = 0.044715;

/// d/dx of 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
double gelu_tanh_derivative(double x) {
  const double th = std::tanh(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kGeluSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * x * x);
}

template <class T>
void training_epilogue_rows(GemmEpilogue epilogue, const TensorView &vec, const TensorView &mat, const TensorView &c) {
  const int64_t M = c.sizes[0], N = c.sizes[1];
  T *out = static_cast<T *>(c.data());
  T *aux = static_cast<T *>(mat.data());
  T *v = epilogue == GemmEpilogue::Dgelu ? nullptr : static_cast<T *>(vec.data());
  if (epilogue == GemmEpilogue::BiasGeluAux) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const T t = static_cast<T>(static_cast<double>(out[m * N + n]) + static_cast<double>(v[n]));
        const double x = static_cast<double>(t);
        aux[m * N + n] = t;
        out[m * N + n] =
            static_cast<T>(0.5 * x * (1.0 + std::tanh(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x))));
      }
    return;
  }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      out[m * N + n] = static_cast<T>(static_cast<double>(out[m * N + n]) *
                                      gelu_tanh_derivative(static_cast<double>(aux[m * N + n])));
  if (epilogue != GemmEpilogue::DgeluBgrad)
    return;
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0.0;
    for (int64_t m = 0; m < M; ++m)
      sum += static_cast<double>(out[m * N + n]);
    v[n] = static_cast<T>(sum);
  }
}

} // namespace

void apply_gemm_epilogue_on_host(GemmEpilogue epilogue, const TensorView &vec, const TensorView &mat,
                                 const TensorView &c) {
  if (epilogue != GemmEpilogue::BiasGeluAux && epilogue != GemmEpilogue::Dgelu && epilogue != GemmEpilogue::DgeluBgrad)
    return apply_gemm_epilogue_on_host(epilogue, vec, c);
  const bool has_vec = epilogue != GemmEpilogue::Dgelu;
  if (c.sizes.size() != 2 || mat.sizes != c.sizes || mat.dtype != c.dtype ||
      (has_vec && (vec.sizes.size() != 1 || vec.sizes[0] != c.sizes[1] || vec.dtype != c.dtype)) ||
      !dense(c) || !dense(mat) || (has_vec && !dense(vec)))
    throw std::invalid_argument(std::string("gemm epilogue ") + gemm_epilogue_name(epilogue) +
                                ": expected contiguous c [M, N], aux [M, N] and (but for dgelu) a vector [N] of one "
                                "dtype");
  if (c.dtype == DType::Float32)
    training_epilogue_rows<float>(epilogue, vec, mat, c);
  else if (c.dtype == DType::Float64)
    training_epilogue_rows<double>(epilogue, vec, mat, c);
  else
    throw std::invalid_argument(std::string("gemm epilogue ") + gemm_epilogue_name(epilogue) +
                                ": float32 or float64 expected, got " + dtype_name(c.dtype));
}

void apply_gemm_epilogue_on_host(GemmEpilogue epilogue, const TensorView &bias, const TensorView &c) {
  if (c.sizes.size() != 2 || bias.sizes.size() != 1 || bias.sizes[0] != c.sizes[1] || bias.dtype != c.dtype)
    throw std::invalid_argument(std::string("gemm epilogue ") + gemm_epilogue_name(epilogue) +
                                ": expected c [M, N] and bias [N] of one dtype");
  if (c.dtype == DType::Float32)
    epilogue_rows<float>(epilogue, bias, c);
  else if (c.dtype == DType::Float64)
    epilogue_rows<double>(epilogue, bias, c);
  else
    throw std::invalid_argument(std::string("gemm epilogue ") + gemm_epilogue_name(epilogue) +
                                ": float32 or float64 expected, got " + dtype_name(c.dtype));
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
