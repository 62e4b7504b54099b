// kiln/load_compiled.h - run a model exported by kiln::export_compiled
// without the compiler: the one header of the `kiln_runtime` library
// (CMake target kiln_runtime, install component `runtime`). It includes no
// other Kiln header and links neither MLIR nor LLVM.
//
//   #include "kiln/load_compiled.h"
//   kiln::LoadedModel m = kiln::load_compiled("digits.kiln");   // throws kiln::runtime::LoadError
//   kiln::runtime::HostTensor x = kiln::runtime::HostTensor::zeros(kiln::runtime::ElementType::Float32, {32, 64});
//   std::vector<kiln::runtime::HostTensor> out = m.run({x});      // [32, 10] float32
//
// The artifact format (one file: kernels as x86-64 object code, or for a
// CUDA export CUBIN per arch + PTX + CUDA C; launch list, memory plan,
// weights as safetensors, guards, version, ISA, CRC-32) is described in
// runtime/src/artifact/FORMAT.md. A CUDA artifact runs on CUDA device 0: a
// GPU loads the CUBIN of its arch (else the PTX, JIT-compiled by the
// driver), the simulator (KILN_CUDA_SIM=1) compiles the source; run() still
// takes and returns host tensors, copied to and from the device.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::runtime {

/// Element types of artifact inputs and outputs (the values of kiln::DType,
/// so a cast converts): 4-byte IEEE float, 2-byte IEEE half, bfloat16,
/// int64, bool (one byte, 0 or 1), double, int32.
enum class ElementType : int8_t { Float32, Float16, BFloat16, Int64, Bool, Float64, Int32 };

/// Bytes per element of `t`: 4, 2, 2, 8, 1, 8, 4.
size_t element_size(ElementType t);
/// "float32", "float16", "bfloat16", "int64", "bool", "float64", "int32".
const char *element_type_name(ElementType t);

/// A dense row-major tensor in host memory: what LoadedModel::run takes and
/// returns. `data` holds numel() * element_size(dtype) bytes, little-endian.
struct HostTensor {
  ElementType dtype = ElementType::Float32;
  std::vector<int64_t> sizes;
  std::vector<uint8_t> data;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  /// A tensor of `sizes` whose bytes are all zero.
  static HostTensor zeros(ElementType dtype, std::vector<int64_t> sizes);
  /// A copy of `values` (numel(sizes) of them; a wrong count throws std::invalid_argument).
  static HostTensor from_floats(const std::vector<float> &values, std::vector<int64_t> sizes);
  static HostTensor from_int64(const std::vector<int64_t> &values, std::vector<int64_t> sizes);
  /// The elements of a Float32 / Int64 tensor (another dtype throws std::invalid_argument).
  std::vector<float> to_floats() const;
  std::vector<int64_t> to_int64() const;
};

/// What loading or running an artifact throws: the message names the file
/// (or the input), the bad value and what was expected. (The runtime's form
/// of kiln::Error, which this header may not include.)
class LoadError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// One input or output of a loaded model, as the artifact's guards state it.
struct TensorSpec {
  std::string name;            ///< "input 0", ... / "output 0", ...
  ElementType dtype = ElementType::Float32;
  /// Sizes; -1 marks a dynamic dim (ExportOptions::dynamic_dims): any size
  /// >= 2 is accepted there, every other dim must match.
  std::vector<int64_t> sizes;
};

struct LoadOptions {
  /// Reject an artifact whose CPU features the host lacks (default). false
  /// only for tools that inspect foreign artifacts without running them.
  bool check_host_isa = true;
};

} // namespace kiln::runtime

namespace kiln {

/// A loaded artifact: its kernels mapped executable, weights in memory, the
/// launch list rebuilt with its memory plan. Copies share one model; run()
/// is const and may be called from several threads at once.
class LoadedModel {
public:
  /// Runs the exported forward on `inputs` (one per guard, in order), with
  /// the exporter's results: bit-identical to the compiled model on this
  /// CPU. Throws runtime::LoadError when an input's count, dtype or sizes
  /// differ from the guards ("model.kiln: input 0: expected float32 [32, 64],
  /// got float32 [16, 64]"; with a dynamic dim: "model.kiln: input 0: dim 1:
  /// expected size 64, got 32 (...)") or when a run fails (e.g. an index out
  /// of range). A shape-generic artifact builds the launch list of each new
  /// size of its dynamic dim on that size's first run (cached; thread-safe).
  std::vector<runtime::HostTensor> run(const std::vector<runtime::HostTensor> &inputs) const;
  const std::vector<runtime::TensorSpec> &inputs() const;
  const std::vector<runtime::TensorSpec> &outputs() const;
  /// The artifact's metadata: Kiln version that wrote it, the model's name,
  /// the target ("x86_64-linux", or "cuda": runs on cuda:0) and its CPU
  /// features (none for "cuda").
  const std::string &kiln_version() const;
  const std::string &model_name() const;
  const std::string &target() const;
  const std::vector<std::string> &cpu_features() const;
  /// Where run() computes: "cpu", or "cuda:0" for a CUDA artifact (run()'s
  /// host tensors are copied there and back).
  const std::string &device() const;
  /// Bytes of the per-run arena (the memory plan's peak) and of the weights.
  int64_t arena_bytes() const;
  int64_t weight_bytes() const;

  struct State;
  explicit LoadedModel(std::shared_ptr<const State> state) : state_(std::move(state)) {}

private:
  std::shared_ptr<const State> state_;
};

/// Reads, verifies and loads the artifact at `path`. Throws
/// runtime::LoadError naming the file and the problem when it cannot be
/// read, is truncated, has a wrong magic, format version or checksum (a
/// flipped byte anywhere), was exported for a CPU whose features the host
/// lacks (e.g. "needs avx512f, which this CPU lacks"), was exported for
/// CUDA and there is no CUDA device or no code for its arch (the message
/// names the archs present and the device's), or holds a
/// malformed section; never crashes on a bad file (fuzzed:
/// tests/fuzz/libfuzzer/artifact_fuzz.cpp).
LoadedModel load_compiled(const std::string &path, const runtime::LoadOptions &options = {});
/// load_compiled maps the file read-only for the load (the weights are copied
/// once, into their buffers; the mapping is gone when it returns), so the file
/// must not be truncated while a load of it runs.
/// The same from the file's bytes in memory (`name` is used in messages);
/// `bytes` need to live only for the call.
LoadedModel load_compiled_from_bytes(std::string_view bytes, const std::string &name,
                                     const runtime::LoadOptions &options = {});

} // namespace kiln
