// kiln/runtime/cuda/CompiledKernel.h - a kernel of a compiled graph on a
// CUDA device: what a CUDA KernelHandle's `native` object holds (codegen's
// CUDA target makes them, CudaBackend::launch runs them).
//
//   auto module = std::make_shared<cuda::CudaModule>(source, names);  // one per graph
//   module->function(api, /*device=*/0, 0);        // NVRTC / host compile now (cached)
//   auto k = std::make_shared<cuda::CompiledKernel>();
//   k->module = module; k->index = 0;
//   k->params = {{Operand, 0}, {Result, 0}};      // cuLaunchKernel's argument list, in order
//   k->grid_blocks = [](const std::vector<int64_t> &classes) { return int64_t{4}; };
//   runtime::KernelHandle h{nullptr, false, k};
//   backend->launch(h, args, stream);             // launch_compiled_kernel
//
// One module holds every distinct kernel of a graph (one NVRTC program or
// one host-compiled object: its fixed cost is paid once per graph). It is
// loaded on a device the first time one of its kernels runs there (the
// driver: cuModuleLoadData of the CUBIN; the simulator: the host object),
// under a mutex, so executables run on any CUDA device index.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/runtime/KernelHandle.h"
#include "kiln/runtime/cuda/DeviceApi.h"

namespace kiln::runtime::cuda {

/// Prebuilt device code of one translation unit (an exported model's, FORMAT.md):
/// CUBINs by architecture ("sm_90") and PTX (`ptx_arch` "compute_90") that
/// the driver JITs for a newer GPU. The source stays the last resort and what
/// the simulator compiles.
struct ModuleImages {
  std::vector<std::pair<std::string, std::string>> cubins; ///< (arch "sm_XX", CUBIN bytes), ascending arch
  std::string ptx;                                          ///< PTX text (NUL included), or empty
  std::string ptx_arch;                                     ///< "compute_XX" of `ptx`
};

/// The image of `images` for a GPU of compute capability `device_arch`
/// (major * 10 + minor): the CUBIN "sm_<device_arch>", else the PTX when its
/// arch is not newer than the device (the driver JITs it). Throws
/// std::runtime_error naming the archs present and the device's otherwise.
const std::string &choose_module_image(const ModuleImages &images, int device_arch, const std::string &what);

/// The CUDA C of one compiled graph's kernels and their loaded functions per
/// device index.
class CudaModule {
public:
  /// `source`: the whole translation unit (prelude + extern "C" __global__
  /// kernels, the kernel-source contract of DeviceApi::load_kernels);
  /// `kernel_names`: the kernels to resolve, in order.
  CudaModule(std::string source, std::vector<std::string> kernel_names)
      : source_(std::move(source)), names_(std::move(kernel_names)) {}
  /// A module with prebuilt device code: a GPU loads the image matching it
  /// (choose_module_image, DeviceApi::load_module_image), a host-accessible
  /// device (the simulator) compiles `source`.
  CudaModule(std::string source, std::vector<std::string> kernel_names, ModuleImages images)
      : source_(std::move(source)), names_(std::move(kernel_names)),
        images_(std::make_shared<const ModuleImages>(std::move(images))) {}

  /// Kernel `k` (an index into kernel_names()) loaded on `device` through
  /// `api` (compiled and loaded on the first call per device; later calls
  /// return the same function). Throws std::runtime_error with the
  /// compiler's log when the source does not compile (DeviceApi::load_kernels).
  const KernelFunction &function(DeviceApi &api, int device, size_t k) const;

  const std::string &source() const { return source_; }
  const std::vector<std::string> &kernel_names() const { return names_; }

private:
  std::string source_;
  std::vector<std::string> names_;
  std::shared_ptr<const ModuleImages> images_; ///< null: compile `source_` on every device
  mutable std::mutex mutex_;
  mutable std::map<int, std::vector<KernelFunction>> loaded_; ///< device index -> functions in name order
};

/// Where the value of one kernel parameter comes from at a launch.
struct KernelArgSource {
  enum class Kind : int8_t {
    Operand, ///< a pointer to KernelArgs::operands[index]'s first element
    Result,  ///< a pointer to KernelArgs::results[index]'s first element (index-check status words included)
    Size,    ///< size class `index` (`long long`): CompiledKernel::size_sources[index]
    Stride,  ///< the stride of operand `index` in dim `dim`, elements (`long long`)
    Float32, ///< `value` as a float, by value
    Float64, ///< `value` as a double, by value
  };
  Kind kind = Kind::Operand;
  int index = 0;
  int dim = 0;
  double value = 0.0;
};

/// gridDim.x of a kernel as data (codegen/cuda's LaunchRule::gridBlocks, so
/// an exported launch needs no codegen): clamp(ceil(work / work_per_block),
/// 1, max_blocks), work = static_work x the sizes of `work_classes`.
struct GridRule {
  int64_t static_work = 1;
  int64_t work_per_block = 1;
  int64_t max_blocks = 65536;
  std::vector<int> work_classes;
  int64_t blocks(const std::vector<int64_t> &class_sizes) const;
};

/// A GEMM's fused epilogue (cuBLASLt's cublasLtEpilogue_t values): what is
/// applied to each element of a x b before it is stored.
enum class GemmEpilogue : int16_t {
  None = 0,
  Bias = 4,      ///< CUBLASLT_EPILOGUE_BIAS: + bias[n]
  BiasRelu = 6,  ///< CUBLASLT_EPILOGUE_RELU_BIAS: max(x + bias[n], 0)
  BiasGelu = 36, ///< CUBLASLT_EPILOGUE_GELU_BIAS: gelu_tanh(x + bias[n])
  /// CUBLASLT_EPILOGUE_GELU_AUX_BIAS: as BiasGelu, and t = x + bias[n]
  /// stored in the aux matrix (the pre-GELU value backward needs).
  BiasGeluAux = 4 | 32 | 128,
  Dgelu = 64 | 128, ///< CUBLASLT_EPILOGUE_DGELU: x * gelu_tanh'(aux[m, n])
  /// CUBLASLT_EPILOGUE_DGELU_BGRAD: as Dgelu, and bgrad[n] = sum over m of
  /// the stored gradient (cuBLASLt's bias gradient: one per row of the
  /// column-major D = c^T, i.e. per column n of c).
  DgeluBgrad = 64 | 128 | 16,
};

/// "bias", "bias+relu", "bias+gelu", "bias+gelu+aux", "dgelu", "dgelu+bgrad"
/// (for names and errors).
const char *gemm_epilogue_name(GemmEpilogue epilogue);

/// One kernel of a graph: its module, its parameters and its launch shape
/// (1-D grid and block, as codegen/cuda's LaunchRule); or, with `module`
/// null and `gemm_epilogue` set, a GEMM with a fused epilogue (operands a
/// [M, K], b [K, N] (any unit-stride layout, as DeviceBackend::gemm), then
/// bias [N] contiguous (Bias, BiasRelu, BiasGelu, BiasGeluAux) or aux [M, N]
/// contiguous (Dgelu, DgeluBgrad); results c [M, N] contiguous, then aux
/// [M, N] (BiasGeluAux) or bgrad [N] (DgeluBgrad); one float dtype).
struct CompiledKernel {
  GemmEpilogue gemm_epilogue = GemmEpilogue::None;
  std::shared_ptr<const CudaModule> module;
  size_t index = 0; ///< into module->kernel_names()
  std::vector<KernelArgSource> params;
  /// Per size class of a shape-generic kernel: (argument index over the
  /// operands then the results, dim) whose size it is.
  std::vector<std::pair<int, int>> size_sources;
  /// gridDim.x for the size classes' sizes (codegen's LaunchRule::gridBlocks).
  std::function<int64_t(const std::vector<int64_t> &class_sizes)> grid_blocks;
  /// The rule grid_blocks computes, as data (what an exported launch stores).
  GridRule grid_rule;
  uint32_t block_threads = 256;
  size_t dynamic_shared_bytes = 0;

  const std::string &name() const;
};

/// The simulator's GEMM epilogue, on host-accessible memory after the GEMM
/// wrote c [M, N] (contiguous): c[m, n] = f(c[m, n] + bias[n]) with f the
/// identity, max(x, 0) (NaN kept) or cuBLASLt's GELU, the tanh
/// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
/// (cublasLt.h, CUBLASLT_EPILOGUE_GELU; Hendrycks & Gimpel 2016), each
/// element computed in double and rounded once. float32 and float64; throws
/// std::invalid_argument naming the dtype or shapes otherwise.
void apply_gemm_epilogue_on_host(GemmEpilogue epilogue, const TensorView &bias, const TensorView &c);

/// The simulator's training epilogues, the same way, after the GEMM wrote
/// c = a x b [M, N] (contiguous), per cublasLt.h's cublasLtEpilogue_t:
///  - BiasGeluAux: aux[m, n] = t = c[m, n] + bias[n], c[m, n] = gelu(t)
///    (`vec` = bias [N], `mat` = aux [M, N] written);
///  - Dgelu: c[m, n] *= gelu'(aux[m, n]) with gelu' the derivative of the
///    tanh form, 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi)
///    (1 + 3 * 0.044715 x^2), u = sqrt(2/pi) (x + 0.044715 x^3)
///    (`mat` = aux read, `vec` unused);
///  - DgeluBgrad: as Dgelu, then vec[n] = sum over m of the rounded c[m, n]
///    (`vec` = bgrad [N] written; summed in double in m order, rounded once).
/// Other epilogues go to the overload above. Throws std::invalid_argument
/// naming the epilogue for other shapes or dtypes (float32/float64 only).
void apply_gemm_epilogue_on_host(GemmEpilogue epilogue, const TensorView &vec, const TensorView &mat,
                                 const TensorView &c);

/// Launches `kernel` (a KernelHandle's native CompiledKernel) on `args` on
/// CUDA device `device` (its DeviceApi `api`), ordered on `stream`: the
/// argument list built from `kernel.params`, gridDim.x from the size
/// classes, blockDim.x = block_threads. Throws std::runtime_error naming the
/// kernel when an argument is missing (a parameter index past `args`) or
/// the device refuses the launch.
void launch_compiled_kernel(const CompiledKernel &kernel, const KernelArgs &args, DeviceApi &api, int device,
                            StreamHandle stream);

} // namespace kiln::runtime::cuda
