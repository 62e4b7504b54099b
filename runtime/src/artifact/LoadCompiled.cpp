// LoadCompiled.cpp - kiln::load_compiled (kiln/load_compiled.h): verify the
// artifact, map its kernels (ElfLoader), rebuild the launch list, place the
// weights, and run with the inputs checked against the guards.
#include "kiln/load_compiled.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifact/ElfLoader.h"
#include "kiln/runtime/Artifact.h"
#include "kiln/runtime/LaunchExecutable.h"
#include "kiln/runtime/Stream.h"
#include "kiln/runtime/cuda/CompiledKernel.h"
#include "kiln/runtime/cuda/CudaBackend.h"

namespace kiln::runtime {

static_assert(static_cast<int>(ElementType::Int32) == static_cast<int>(DType::Int32),
              "ElementType mirrors kiln::DType");

size_t element_size(ElementType t) { return itemsize(static_cast<DType>(t)); }
const char *element_type_name(ElementType t) { return dtype_name(static_cast<DType>(t)); }

HostTensor HostTensor::zeros(ElementType dtype, std::vector<int64_t> sizes) {
  HostTensor t;
  t.dtype = dtype;
  t.sizes = std::move(sizes);
  t.data.assign(static_cast<size_t>(t.numel()) * element_size(dtype), 0);
  return t;
}

namespace {
template <typename T> HostTensor from_values(ElementType dtype, const std::vector<T> &values, std::vector<int64_t> sizes) {
  HostTensor t = HostTensor::zeros(dtype, std::move(sizes));
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw std::invalid_argument("HostTensor: " + std::to_string(values.size()) + " values for " +
                                std::to_string(t.numel()) + " elements");
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}
template <typename T> std::vector<T> to_values(const HostTensor &t, ElementType expected) {
  if (t.dtype != expected)
    throw std::invalid_argument(std::string("HostTensor: a ") + element_type_name(t.dtype) + " tensor read as " +
                                element_type_name(expected));
  std::vector<T> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(T));
  return v;
}

std::string sizes_str(const std::vector<int64_t> &sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

/// Copies a strided view into a dense row-major HostTensor.
HostTensor to_host(const TensorView &v) {
  HostTensor t = HostTensor::zeros(static_cast<ElementType>(v.dtype), v.sizes);
  const size_t item = itemsize(v.dtype);
  const int rank = static_cast<int>(v.sizes.size());
  if (t.numel() == 0) return t;
  const char *base = static_cast<const char *>(v.data());
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t at = 0;
    for (int d = 0; d < rank; ++d) at += index[d] * v.strides[d];
    std::memcpy(t.data.data() + n * item, base + at * static_cast<int64_t>(item), item);
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < v.sizes[d]) break;
      index[d] = 0;
    }
  }
  return t;
}

/// A contiguous copy of host bytes on `device` (`backend`: its backend; null: the CPU).
TensorView from_host(const void *data, DType dtype, const std::vector<int64_t> &sizes, size_t nbytes,
                     DeviceBackend *backend = nullptr, Device device = kCPU) {
  TensorView v;
  if (backend) {
    v.buffer = Buffer::make(std::max<size_t>(nbytes, 1), backend->allocator(device.index));
    if (nbytes) backend->copy(v.buffer->data(), device, data, kCPU, nbytes);
  } else {
    v.buffer = Buffer::make(nbytes);
    if (nbytes) std::memcpy(v.buffer->data(), data, nbytes);
  }
  v.sizes = sizes;
  v.strides = contiguous_strides(sizes);
  v.dtype = dtype;
  return v;
}

/// A view on a device (`backend`'s) as a dense HostTensor: gathered on the
/// device by copy_to_contiguous, then copied to the host.
HostTensor device_to_host(const TensorView &v, DeviceBackend &backend, Device device) {
  HostTensor t = HostTensor::zeros(static_cast<ElementType>(v.dtype), v.sizes);
  if (t.data.empty()) return t;
  auto dense = Buffer::make(t.data.size(), backend.allocator(device.index));
  Stream &stream = backend.default_stream(device.index);
  backend.copy_to_contiguous(v, dense->data(), stream);
  stream.synchronize();
  backend.copy(t.data.data(), kCPU, dense->data(), device, t.data.size());
  return t;
}

std::vector<TensorSpec> specs_of(const std::vector<artifact::Guard> &guards) {
  std::vector<TensorSpec> specs;
  for (const artifact::Guard &g : guards) specs.push_back(TensorSpec{g.name, static_cast<ElementType>(g.dtype), g.sizes});
  return specs;
}

} // namespace

HostTensor HostTensor::from_floats(const std::vector<float> &values, std::vector<int64_t> sizes) {
  return from_values(ElementType::Float32, values, std::move(sizes));
}
HostTensor HostTensor::from_int64(const std::vector<int64_t> &values, std::vector<int64_t> sizes) {
  return from_values(ElementType::Int64, values, std::move(sizes));
}
std::vector<float> HostTensor::to_floats() const { return to_values<float>(*this, ElementType::Float32); }
std::vector<int64_t> HostTensor::to_int64() const { return to_values<int64_t>(*this, ElementType::Int64); }

} // namespace kiln::runtime

namespace kiln {

using runtime::HostTensor;
using runtime::LoadError;

struct LoadedModel::State {
  std::string name;  ///< the file, for messages
  runtime::artifact::Contents meta;  ///< program, kernels and weights cleared after loading
  std::vector<runtime::TensorSpec> inputs, outputs;
  std::shared_ptr<runtime::artifact::LoadedObject> object;
  std::shared_ptr<runtime::LaunchExecutable> exe;
  std::vector<runtime::TensorView> weights;
  int64_t weight_bytes = 0;
  /// A CUDA artifact: the backend of CUDA device 0 (inputs, weights and
  /// outputs are copied through it) and the translation units.
  runtime::DeviceBackend *backend = nullptr;
  Device device = kCPU;
  std::string device_name = "cpu";
  std::vector<std::shared_ptr<const runtime::cuda::CudaModule>> modules;
  /// A shape-generic artifact: the program template and the executables
  /// instantiated so far, per size of the dynamic dim.
  std::string program_template;
  int64_t example_size = -1;
  mutable std::mutex mutex;
  mutable std::map<int64_t, std::shared_ptr<runtime::LaunchExecutable>> by_size;

  /// The launch list for `program` (JSON), kernels from the artifact's.
  std::shared_ptr<runtime::LaunchExecutable> decode(const std::string &program, std::string *error) const {
    auto resolve = [this](const std::string &symbol, bool split_rows, std::string *why) {
      void *fn = object ? object->symbol("_mlir_" + symbol) : nullptr;
      if (!fn) {
        *why = "kernel '" + symbol + "' (_mlir_" + symbol + ") is not defined in the kernels section";
        return runtime::KernelHandle{};
      }
      return runtime::KernelHandle::cpu(reinterpret_cast<runtime::PackedKernel>(fn), split_rows);
    };
    return runtime::artifact::decode_launches(program, resolve, object, error, backend ? &modules : nullptr);
  }
  /// The executable for size `size` of the dynamic dim (instantiated once).
  std::shared_ptr<runtime::LaunchExecutable> exe_for(int64_t size) const {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = by_size.find(size);
    if (it != by_size.end()) return it->second;
    std::string program, error;
    std::shared_ptr<runtime::LaunchExecutable> made;
    if (runtime::artifact::instantiate_program(program_template, size, &program, &error)) made = decode(program, &error);
    if (!made)
      throw LoadError(name + ": run: the launch list for size " + std::to_string(size) + " of " +
                      inputs[static_cast<size_t>(meta.dynamic_input)].name + " dim " + std::to_string(meta.dynamic_dim) +
                      ": " + error);
    by_size.emplace(size, made);
    return made;
  }
};

std::vector<HostTensor> LoadedModel::run(const std::vector<HostTensor> &inputs) const {
  const State &s = *state_;
  if (inputs.size() != s.inputs.size())
    throw LoadError(s.name + ": run: expected " + std::to_string(s.inputs.size()) + " input tensors, got " +
                    std::to_string(inputs.size()));
  std::vector<runtime::TensorView> views;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const HostTensor &x = inputs[i];
    const runtime::TensorSpec &g = s.inputs[i];
    if (static_cast<int>(i) == s.meta.dynamic_input && x.dtype == g.dtype && x.sizes.size() == g.sizes.size())
      for (size_t d = 0; d < g.sizes.size(); ++d) {
        const bool dynamic = static_cast<int>(d) == s.meta.dynamic_dim;
        if (dynamic ? x.sizes[d] < 2 : x.sizes[d] != g.sizes[d])
          throw LoadError(s.name + ": " + g.name + ": dim " + std::to_string(d) + ": expected size " +
                          (dynamic ? std::string(">= 2 (dynamic)") : std::to_string(g.sizes[d])) + ", got " +
                          std::to_string(x.sizes[d]) + " (" + runtime::element_type_name(g.dtype) + " " +
                          runtime::sizes_str(g.sizes) + ", -1 = any size >= 2)");
      }
    else if (x.dtype != g.dtype || x.sizes != g.sizes)
      throw LoadError(s.name + ": " + g.name + ": expected " + runtime::element_type_name(g.dtype) + " " +
                      runtime::sizes_str(g.sizes) + ", got " + runtime::element_type_name(x.dtype) + " " +
                      runtime::sizes_str(x.sizes));
    const size_t nbytes = static_cast<size_t>(x.numel()) * runtime::element_size(x.dtype);
    if (x.data.size() != nbytes)
      throw LoadError(s.name + ": " + g.name + ": holds " + std::to_string(x.data.size()) + " bytes, expected " +
                      std::to_string(nbytes) + " for " + runtime::sizes_str(x.sizes));
    views.push_back(runtime::from_host(x.data.data(), static_cast<DType>(x.dtype), x.sizes, nbytes, s.backend, s.device));
  }
  views.insert(views.end(), s.weights.begin(), s.weights.end());
  std::string error;
  const std::shared_ptr<runtime::LaunchExecutable> exe =
      s.meta.dynamic_input < 0 ? s.exe : s.exe_for(inputs[static_cast<size_t>(s.meta.dynamic_input)].sizes[static_cast<size_t>(s.meta.dynamic_dim)]);
  std::vector<runtime::TensorView> results = exe->run(views, &error);
  if (!error.empty()) throw LoadError(s.name + ": run: " + error);
  std::vector<HostTensor> out;
  try {
    for (size_t k = 0; k < s.outputs.size() && k < results.size(); ++k)
      out.push_back(s.backend ? runtime::device_to_host(results[k], *s.backend, s.device) : runtime::to_host(results[k]));
  } catch (const std::exception &e) {
    throw LoadError(s.name + ": run: copying the outputs from " + s.device.str() + ": " + e.what());
  }
  return out;
}

const std::vector<runtime::TensorSpec> &LoadedModel::inputs() const { return state_->inputs; }
const std::vector<runtime::TensorSpec> &LoadedModel::outputs() const { return state_->outputs; }
const std::string &LoadedModel::kiln_version() const { return state_->meta.kiln_version; }
const std::string &LoadedModel::model_name() const { return state_->meta.model; }
const std::string &LoadedModel::target() const { return state_->meta.target; }
const std::vector<std::string> &LoadedModel::cpu_features() const { return state_->meta.cpu_features; }
const std::string &LoadedModel::device() const { return state_->device_name; }
int64_t LoadedModel::arena_bytes() const { return state_->exe->arena_bytes(); }
int64_t LoadedModel::weight_bytes() const { return state_->weight_bytes; }

namespace {

/// The weights in the executable's input order (meta.weights), on the CPU.
void place_weights(LoadedModel::State &s, std::string_view safetensors) {
  std::vector<runtime::artifact::WeightEntry> entries;
  std::string error;
  if (!runtime::artifact::parse_safetensors(safetensors, &entries, &error)) throw LoadError(s.name + ": " + error);
  for (const std::string &name : s.meta.weights) {
    const runtime::artifact::WeightEntry *found = nullptr;
    for (const auto &e : entries)
      if (e.name == name) found = &e;
    if (!found) throw LoadError(s.name + ": weights: tensor '" + name + "' is missing from the safetensors section");
    s.weights.push_back(runtime::from_host(safetensors.data() + found->begin, found->dtype, found->sizes,
                                           static_cast<size_t>(found->end - found->begin), s.backend, s.device));
    s.weight_bytes += static_cast<int64_t>(found->end - found->begin);
  }
}

/// A CUDA artifact: CUDA device 0's backend, and one CudaModule per
/// translation unit, loaded on the device now (a GPU: the CUBIN for its arch,
/// else the PTX; the simulator: the source through its host compiler), so a
/// GPU without matching code fails the load, not the first run.
void load_cuda_units(LoadedModel::State &s) {
  s.device = Device(DeviceType::CUDA, 0);
  s.device_name = s.device.str();
  s.backend = runtime::find_backend(DeviceType::CUDA);
  runtime::cuda::DeviceApi *api = s.backend && s.backend->device_count() > 0 ? runtime::cuda::device_api(0) : nullptr;
  if (!api)
    throw LoadError(s.name + ": the model was exported for CUDA and runs on cuda:0, but there is no CUDA device (" +
                    runtime::backend_unavailable_reason(DeviceType::CUDA) +
                    "; KILN_CUDA_SIM=1 runs it on the CUDA-on-CPU simulator)");
  for (runtime::artifact::CudaUnit &u : s.meta.cuda_units) {
    runtime::cuda::ModuleImages images{std::move(u.cubins), std::move(u.ptx), u.ptx_arch};
    auto module = std::make_shared<const runtime::cuda::CudaModule>(std::move(u.source), u.kernel_names, std::move(images));
    try {
      module->function(*api, 0, 0);
    } catch (const std::exception &e) {
      throw LoadError(s.name + ": loading the CUDA kernels on cuda:0 (" + api->properties().name + "): " + e.what());
    }
    s.modules.push_back(std::move(module));
  }
  s.meta.cuda_units.clear();
}

/// KILN_LOG contains "load": one line per load with the phases' times.
bool log_load() {
  const char *v = std::getenv("KILN_LOG");
  return v && std::strstr(v, "load");
}

double ms_since(std::chrono::steady_clock::time_point &t) {
  const auto now = std::chrono::steady_clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - t).count();
  t = now;
  return ms;
}

} // namespace

LoadedModel load_compiled_from_bytes(std::string_view bytes, const std::string &name,
                                     const runtime::LoadOptions &options) {
  auto t = std::chrono::steady_clock::now();
  double ms[4] = {};
  auto state = std::make_shared<LoadedModel::State>();
  state->name = name;
  std::string error;
  runtime::artifact::ReadOptions read_options;
  read_options.check_host_isa = options.check_host_isa;
  std::string_view safetensors;  // the weights, in `bytes`: copied once, into their buffers
  read_options.weights_view = &safetensors;
  if (!runtime::artifact::read_artifact(bytes, name, read_options, &state->meta, &error)) throw LoadError(error);
  ms[0] = ms_since(t);
  state->inputs = runtime::specs_of(state->meta.inputs);
  state->outputs = runtime::specs_of(state->meta.outputs);
  const bool cuda = state->meta.target == runtime::artifact::kCudaTarget;
  if (cuda) load_cuda_units(*state);
  if (!state->meta.kernels.empty() && !cuda) {
    auto object = runtime::artifact::LoadedObject::load(state->meta.kernels, /*execute=*/true, &error);
    if (!object) throw LoadError(name + ": " + error);
    state->object = std::move(object);
  }
  ms[1] = ms_since(t);
  if (state->meta.dynamic_input >= 0) {
    // Shape-generic: instantiate the template at the example size now (a bad
    // template fails the load), other sizes on their first run.
    const size_t i = static_cast<size_t>(state->meta.dynamic_input), d = static_cast<size_t>(state->meta.dynamic_dim);
    state->program_template = std::move(state->meta.program);
    state->example_size = state->meta.inputs[i].sizes[d];
    state->inputs[i].sizes[d] = -1;
    std::string program;
    if (runtime::artifact::instantiate_program(state->program_template, state->example_size, &program, &error))
      state->exe = state->decode(program, &error);
    if (state->exe) state->by_size.emplace(state->example_size, state->exe);
  } else {
    state->exe = state->decode(state->meta.program, &error);
  }
  if (!state->exe) throw LoadError(name + ": " + error);
  ms[2] = ms_since(t);
  place_weights(*state, safetensors);
  ms[3] = ms_since(t);
  if (log_load())
    std::fprintf(stderr, "[kiln] load_compiled %s: verify %.2f ms, kernels %.2f ms, launch list %.2f ms, weights %.2f ms\n",
                 name.c_str(), ms[0], ms[1], ms[2], ms[3]);
  state->meta.program.clear();
  state->meta.kernels.clear();
  return LoadedModel(state);
}

namespace {

/// A file's bytes, read-only: mapped (no copy; the page cache's pages), or
/// read into memory where mmap does not apply (an empty file, a pipe).
class FileBytes {
public:
  explicit FileBytes(const std::string &path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw LoadError(path + ": cannot open the file (" + std::strerror(errno) + ")");
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      void *p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (p != MAP_FAILED) {
        map_ = p;
        size_ = static_cast<size_t>(st.st_size);
        ::close(fd);
        return;
      }
    }
    char chunk[1 << 16];
    for (ssize_t n; (n = ::read(fd, chunk, sizeof chunk)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const std::string why = std::strerror(errno);
        ::close(fd);
        throw LoadError(path + ": read error (" + why + ")");
      }
      copy_.append(chunk, static_cast<size_t>(n));
    }
    ::close(fd);
  }
  ~FileBytes() {
    if (map_) ::munmap(map_, size_);
  }
  FileBytes(const FileBytes &) = delete;
  FileBytes &operator=(const FileBytes &) = delete;
  std::string_view view() const { return map_ ? std::string_view(static_cast<const char *>(map_), size_) : copy_; }

private:
  void *map_ = nullptr;
  size_t size_ = 0;
  std::string copy_;
};

} // namespace

LoadedModel load_compiled(const std::string &path, const runtime::LoadOptions &options) {
  auto t = std::chrono::steady_clock::now();
  const FileBytes bytes(path);
  if (log_load()) std::fprintf(stderr, "[kiln] load_compiled %s: read %.2f ms\n", path.c_str(), ms_since(t));
  return load_compiled_from_bytes(bytes.view(), path, options);
}

} // namespace kiln
