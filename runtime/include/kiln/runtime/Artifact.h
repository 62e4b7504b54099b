// kiln/runtime/Artifact.h - the exported-model file (kiln::export_compiled
// writes it, kiln::load_compiled reads it): container, metadata, guards and
// the launch-list codec. Format: runtime/src/artifact/FORMAT.md.
// Library KilnArtifact (no MLIR, no LLVM); every reader function is a
// parser of outside bytes and never throws or crashes on bad input (it
// returns false with a message naming the file and the problem).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/runtime/DType.h"
#include "kiln/runtime/KernelHandle.h"

namespace kiln::runtime {

class LaunchExecutable;
namespace cuda {
class CudaModule;
}

namespace artifact {

/// The container format version this build writes (2: CUDA artifacts).
inline constexpr uint32_t kFormatVersion = 2;
/// The oldest version it reads (1: CPU only, the same container).
inline constexpr uint32_t kOldestFormatVersion = 1;
/// First 8 bytes of every artifact.
inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'X', 'P', '\0'};
/// The target of CPU artifacts (x86-64 object code).
inline constexpr const char *kTarget = "x86_64-linux";
/// The target of CUDA artifacts (CUBIN, PTX and CUDA C; run on CUDA device 0).
inline constexpr const char *kCudaTarget = "cuda";

/// One CUDA translation unit of a CUDA artifact (sections `cuda` and `cudabin`).
struct CudaUnit {
  std::vector<std::string> kernel_names;  ///< the extern "C" kernels, in CompiledKernel::index order
  std::string source;                     ///< the CUDA C (prelude + kernels): the simulator's input, last resort
  std::string ptx_arch;                   ///< "compute_90", or empty without PTX
  std::string ptx;                        ///< NVRTC's PTX (NUL included)
  std::vector<std::pair<std::string, std::string>> cubins;  ///< ("sm_90", CUBIN bytes), in cuda_archs order
};

/// One input or output guard: dtype and static sizes.
struct Guard {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
};

/// Everything one artifact holds, decoded (sections verified, not yet linked).
struct Contents {
  std::string kiln_version;               ///< KILN_VERSION of the exporter
  std::string model;                      ///< the module's name()
  std::string target = kTarget;           ///< "x86_64-linux"
  std::vector<std::string> cpu_features;  ///< host_cpu_features() of the exporter, sorted
  std::vector<Guard> inputs, outputs;     ///< the call's tensors (weights not included)
  std::vector<std::string> weights;       ///< safetensors names of the executable's inputs after `inputs`
  std::string program;                    ///< the launch list + memory plan (encode_launches), JSON
  std::string kernels;                    ///< ELF relocatable (x86-64) with `_mlir_<symbol>` kernels; may be empty
  std::string safetensors;                ///< the weights file (safetensors, kiln::save's layout)
  std::vector<CudaUnit> cuda_units;       ///< target "cuda" only: the device code, per translation unit
  /// The dynamic dim (ExportOptions::dynamic_dims), or -1/-1: `program` is
  /// then a template (fit_dynamic_program) and inputs[dynamic_input].sizes
  /// holds -1 at dynamic_dim (any size >= 2).
  int dynamic_input = -1, dynamic_dim = -1;
  uint32_t format_version = kFormatVersion;  ///< what write_artifact writes (tests write old versions)
};

/// The artifact's bytes: header, section table, sections (64-byte aligned),
/// CRC-32 of everything before it. Deterministic: equal Contents give equal bytes.
std::string write_artifact(const Contents &contents);

struct ReadOptions {
  bool check_host_isa = true; ///< fail when the host lacks one of cpu_features
  /// When set, the weights section is not copied into Contents::safetensors:
  /// *weights_view points into `bytes` instead (valid while they are).
  std::string_view *weights_view = nullptr;
};
/// Parses and verifies `bytes` (read from `name`, used in messages): size,
/// magic, version, checksum, section table, metadata, guards, target.
bool read_artifact(std::string_view bytes, const std::string &name, const ReadOptions &options, Contents *out,
                   std::string *error);

/// The CPU features of this host that decide whether object code built for
/// it runs elsewhere ("avx2", "avx512f", ...; __builtin_cpu_supports over a
/// fixed list), sorted.
std::vector<std::string> host_cpu_features();

/// The executable as data (JSON, deterministic): slots, steps (inputs,
/// constants, launches in order; kernels by library symbol), outputs and the
/// memory plan. A CUDA executable's kernel steps also carry their CUDA
/// launch (translation unit, index, parameters, grid rule, block), and its
/// translation units (source and kernel names, in first-use order) go to
/// `cuda_units` (required then). False when it cannot be exported (a device
/// other than the CPU or CUDA device 0).
bool encode_launches(const LaunchExecutable &exe, std::string *json, std::string *error,
                     std::vector<CudaUnit> *cuda_units = nullptr);
/// Rebuilds an executable from encode_launches' JSON, kernels resolved by
/// symbol through `resolve` (null: error); a CUDA program's kernels are
/// built from their steps over `cuda_modules` (cuda::CudaModule per
/// translation unit, in CudaUnit order; required for a CUDA program). The memory plan is recomputed by
/// the Builder and checked against the encoded one.
std::shared_ptr<LaunchExecutable> decode_launches(const std::string &json,
                                                  const std::function<KernelHandle(const std::string &symbol, bool split_rows, std::string *error)> &resolve,
                                                  std::shared_ptr<const void> keep_alive, std::string *error,
                                                  const std::vector<std::shared_ptr<const cuda::CudaModule>> *cuda_modules = nullptr);
/// A shape-generic program from encode_launches' programs at three distinct
/// sizes of one dim (`sizes`): every number that differs becomes
/// {"s": [a, b]} (a + b s, integers), fitted on the first two and checked
/// on the third; the memory plan is dropped (the Builder recomputes it per size).
/// False with the JSON path of the first value that is not affine in s or
/// of a string that differs.
bool fit_dynamic_program(const std::vector<std::string> &programs, const std::vector<int64_t> &sizes,
                         std::string *program_template, std::string *error);
/// The program of a fit_dynamic_program template at size `s`.
bool instantiate_program(const std::string &program_template, int64_t s, std::string *program, std::string *error);

/// The kernel symbols an encoded program launches (sorted, unique).
bool program_symbols(const std::string &json, std::vector<std::string> *symbols, std::string *error);

/// One tensor of a safetensors file: name, dtype, sizes and its bytes
/// [begin, end) in the file.
struct WeightEntry {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
  uint64_t begin = 0, end = 0;
};
/// Parses a safetensors file's header and checks every entry's offsets
/// against the data section and its byte count against dtype x sizes.
bool parse_safetensors(std::string_view bytes, std::vector<WeightEntry> *entries, std::string *error);

} // namespace artifact
} // namespace kiln::runtime
