// A real CUDA device as a DeviceApi (kiln/runtime/cuda/CudaBackend.h,
// make_driver_device): the driver API through the run-time symbol table
// (DriverSymbols.def), the device's primary context made current on the
// calling thread before each call (PyTorch's c10::cuda::CUDAGuard does the
// same per op), kernels compiled by NVRTC for the device's architecture
// (a CUBIN, or PTX the driver JITs for a newer GPU; both cached on disk) and
// loaded with cuModuleLoadData. The mapping of each method to the driver
// call is listed in DeviceApi.h and DeviceMemory.h.
#include <memory>
#include <stdexcept>
#include <string>

#include "Check.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CudaError.h"
#include "kiln/runtime/cuda/Nvrtc.h"

namespace kiln::runtime::cuda {
namespace {

// cuda.h values (CUDA 13) of the flags and attributes used here.
constexpr unsigned kStreamNonBlocking = 0x1;              // CU_STREAM_NON_BLOCKING
constexpr unsigned kEventDisableTiming = 0x2;             // CU_EVENT_DISABLE_TIMING
constexpr CUresult kErrorNotReady = 600;                  // CUDA_ERROR_NOT_READY
constexpr CUfunction_attribute kMaxDynamicSharedSize = 8; // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
/// Dynamic shared memory a launch gets without the opt-in attribute.
constexpr size_t kDefaultSharedLimitBytes = 48 * 1024;

CUstream as_stream(StreamHandle s) { return reinterpret_cast<CUstream>(s); }
CUevent as_event(EventHandle e) { return reinterpret_cast<CUevent>(e); }
CUdeviceptr as_device_pointer(const void *p) { return reinterpret_cast<CUdeviceptr>(p); }

class DriverDevice final : public DeviceApi {
public:
  DriverDevice(const DriverSymbols &cu, int index, NvrtcCompiler &nvrtc) : cu_(cu), index_(index), nvrtc_(nvrtc) {
    check(cu_.cuDeviceGet(&device_, index), "cuDeviceGet");
    check(cu_.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
    properties_ = query_properties();
    arch_ = properties_.major * 10 + properties_.minor;
  }
  ~DriverDevice() override {
    // The primary context outlives the process' last use; a failure here
    // (the driver already shut down at exit) is not worth a crash.
    cu_.cuDevicePrimaryCtxRelease(device_);
  }

  DeviceProperties properties() const override { return properties_; }

  /// This device's primary context current on the calling thread (asked
  /// each time: another library may have changed it).
  void set_current() override {
    CUcontext current = nullptr;
    check(cu_.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
    if (current != context_)
      check(cu_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  }

  // ---- memory ------------------------------------------------------------------
  void *raw_allocate(size_t nbytes) override {
    set_current();
    CUdeviceptr p = 0;
    const CUresult r = cu_.cuMemAlloc(&p, nbytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
      return nullptr; // the caching allocator frees its cache and retries
    check(r, "cuMemAlloc");
    return reinterpret_cast<void *>(p);
  }
  void raw_free(void *ptr) override {
    set_current();
    check(cu_.cuMemFree(as_device_pointer(ptr)), "cuMemFree");
  }
  DeviceMemoryInfo mem_get_info() override {
    set_current();
    DeviceMemoryInfo info;
    check(cu_.cuMemGetInfo(&info.free_bytes, &info.total_bytes), "cuMemGetInfo");
    return info;
  }
  void *host_allocate(size_t nbytes) override {
    set_current();
    void *p = nullptr;
    return cu_.cuMemAllocHost(&p, nbytes) == CUDA_SUCCESS ? p : nullptr;
  }
  void host_free(void *ptr) override {
    set_current();
    check(cu_.cuMemFreeHost(ptr), "cuMemFreeHost");
  }

  // ---- events and streams ------------------------------------------------------
  EventHandle event_create() override { return new_event(kEventDisableTiming); }
  EventHandle timed_event_create() override { return new_event(0); }
  void event_record(EventHandle event, StreamHandle stream) override {
    set_current();
    check(cu_.cuEventRecord(as_event(event), as_stream(stream)), "cuEventRecord");
  }
  bool event_query(EventHandle event) override {
    set_current();
    const CUresult r = cu_.cuEventQuery(as_event(event));
    if (r == kErrorNotReady)
      return false;
    check(r, "cuEventQuery");
    return true;
  }
  void event_synchronize(EventHandle event) override {
    set_current();
    check(cu_.cuEventSynchronize(as_event(event)), "cuEventSynchronize");
  }
  void event_destroy(EventHandle event) override {
    set_current();
    check(cu_.cuEventDestroy(as_event(event)), "cuEventDestroy");
  }
  double event_elapsed_seconds(EventHandle start, EventHandle end) override {
    set_current();
    float ms = 0;
    check(cu_.cuEventElapsedTime(&ms, as_event(start), as_event(end)), "cuEventElapsedTime");
    return ms / 1000.0;
  }
  StreamHandle stream_create() override {
    set_current();
    CUstream s = nullptr;
    check(cu_.cuStreamCreate(&s, kStreamNonBlocking), "cuStreamCreate");
    return reinterpret_cast<StreamHandle>(s);
  }
  void stream_destroy(StreamHandle stream) override {
    set_current();
    check(cu_.cuStreamDestroy(as_stream(stream)), "cuStreamDestroy");
  }
  void stream_synchronize(StreamHandle stream) override {
    set_current();
    check(cu_.cuStreamSynchronize(as_stream(stream)), "cuStreamSynchronize");
  }
  void stream_wait_event(StreamHandle stream, EventHandle event) override {
    set_current();
    check(cu_.cuStreamWaitEvent(as_stream(stream), as_event(event), 0), "cuStreamWaitEvent");
  }

  // ---- copies ------------------------------------------------------------------
  void memcpy_async(void *dst, const void *src, size_t nbytes, CopyKind kind, StreamHandle stream) override {
    set_current();
    switch (kind) {
    case CopyKind::HostToDevice:
      check(cu_.cuMemcpyHtoDAsync(as_device_pointer(dst), src, nbytes, as_stream(stream)), "cuMemcpyHtoDAsync");
      return;
    case CopyKind::DeviceToHost:
      check(cu_.cuMemcpyDtoHAsync(dst, as_device_pointer(src), nbytes, as_stream(stream)), "cuMemcpyDtoHAsync");
      return;
    case CopyKind::DeviceToDevice:
      check(cu_.cuMemcpyDtoDAsync(as_device_pointer(dst), as_device_pointer(src), nbytes, as_stream(stream)),
            "cuMemcpyDtoDAsync");
      return;
    }
  }
  void memset_async(void *dst, uint8_t value, size_t nbytes, StreamHandle stream) override {
    set_current();
    check(cu_.cuMemsetD8Async(as_device_pointer(dst), value, nbytes, as_stream(stream)), "cuMemsetD8Async");
  }

  // ---- kernels -----------------------------------------------------------------
  std::vector<KernelFunction> load_kernels(const std::string &source,
                                           const std::vector<std::string> &kernel_names) override {
    KernelSource src;
    src.code = source;
    src.kernel_names = kernel_names;
    src.file_name = (kernel_names.empty() ? std::string("kiln_kernels") : kernel_names.front()) + ".cu";
    const CompiledModule compiled = nvrtc_.compile(src, arch_);
    return load_module_image(compiled.binary, kernel_names);
  }
  std::vector<KernelFunction> load_module_image(const std::string &image,
                                                const std::vector<std::string> &kernel_names) override {
    set_current();
    CUmodule module = nullptr;
    check(cu_.cuModuleLoadData(&module, image.data()), "cuModuleLoadData");
    const DriverSymbols *cu = &cu_;
    std::shared_ptr<const void> owner(module, [cu](const void *m) {
      cu->cuModuleUnload(static_cast<CUmodule>(const_cast<void *>(m)));
    });
    std::vector<KernelFunction> out;
    for (const std::string &name : kernel_names) {
      CUfunction fn = nullptr;
      check(cu_.cuModuleGetFunction(&fn, module, name.c_str()), ("cuModuleGetFunction(" + name + ")").c_str());
      out.push_back(KernelFunction{name, fn, owner});
    }
    return out;
  }
  void launch_kernel(const KernelFunction &fn, Dim3 grid, Dim3 block, size_t shared_bytes, StreamHandle stream,
                     void **args) override {
    set_current();
    auto *function = static_cast<CUfunction>(const_cast<void *>(fn.handle));
    if (shared_bytes > kDefaultSharedLimitBytes) {
      if (shared_bytes > properties_.max_shared_bytes_per_block)
        throw std::runtime_error("cuda launch of " + fn.name + ": " + std::to_string(shared_bytes) +
                                 " bytes of dynamic shared memory, more than the device's " +
                                 std::to_string(properties_.max_shared_bytes_per_block));
      check(cu_.cuFuncSetAttribute(function, kMaxDynamicSharedSize, static_cast<int>(shared_bytes)),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    }
    const CUresult r = cu_.cuLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                          static_cast<unsigned>(shared_bytes), as_stream(stream), args, nullptr);
    if (r != CUDA_SUCCESS)
      throw CudaError(kDriverSoname, "cuLaunchKernel", r,
                      "cuLaunchKernel of " + fn.name + " on cuda:" + std::to_string(index_) + " (grid " +
                          std::to_string(grid.x) + "x" + std::to_string(grid.y) + "x" + std::to_string(grid.z) +
                          ", block " + std::to_string(block.x) + "x" + std::to_string(block.y) + "x" +
                          std::to_string(block.z) + ", " + std::to_string(shared_bytes) +
                          " bytes of shared memory) failed: " + driver_error_name(r) + " (" + driver_error_text(r) +
                          ")");
  }

  // ---- CUDA graphs ---------------------------------------------------------------
  void stream_begin_capture(StreamHandle stream) override {
    set_current();
    check(cu_.cuStreamBeginCapture(as_stream(stream), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  }
  GraphHandle stream_end_capture(StreamHandle stream) override {
    set_current();
    CUgraph graph = nullptr;
    check(cu_.cuStreamEndCapture(as_stream(stream), &graph), "cuStreamEndCapture");
    return reinterpret_cast<GraphHandle>(graph);
  }
  GraphExecHandle graph_instantiate(GraphHandle graph) override {
    set_current();
    CUgraphExec exec = nullptr;
    check(cu_.cuGraphInstantiateWithFlags(&exec, reinterpret_cast<CUgraph>(graph), 0), "cuGraphInstantiateWithFlags");
    return reinterpret_cast<GraphExecHandle>(exec);
  }
  void graph_launch(GraphExecHandle exec, StreamHandle stream) override {
    set_current();
    check(cu_.cuGraphLaunch(reinterpret_cast<CUgraphExec>(exec), as_stream(stream)), "cuGraphLaunch");
  }
  void graph_exec_destroy(GraphExecHandle exec) override {
    set_current();
    check(cu_.cuGraphExecDestroy(reinterpret_cast<CUgraphExec>(exec)), "cuGraphExecDestroy");
  }
  void graph_destroy(GraphHandle graph) override {
    set_current();
    check(cu_.cuGraphDestroy(reinterpret_cast<CUgraph>(graph)), "cuGraphDestroy");
  }

private:
  void check(CUresult r, const char *api) const { check_driver(r, api); }

  EventHandle new_event(unsigned flags) {
    set_current();
    CUevent e = nullptr;
    check(cu_.cuEventCreate(&e, flags), "cuEventCreate");
    return reinterpret_cast<EventHandle>(e);
  }

  int attribute(CUdevice_attribute a) const {
    int v = 0;
    check(cu_.cuDeviceGetAttribute(&v, a, device_), "cuDeviceGetAttribute");
    return v;
  }

  DeviceProperties query_properties() const {
    DeviceProperties p;
    char name[256] = {};
    check(cu_.cuDeviceGetName(name, sizeof(name) - 1, device_), "cuDeviceGetName");
    p.name = name;
    p.major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    p.minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    check(cu_.cuDeviceTotalMem(&p.total_memory_bytes, device_), "cuDeviceTotalMem");
    p.multiprocessors = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    p.max_shared_bytes_per_block = static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
    p.host_accessible = false;
    return p;
  }

  const DriverSymbols &cu_;
  int index_;
  NvrtcCompiler &nvrtc_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  DeviceProperties properties_;
  int arch_ = kDefaultCudaArch;
};

} // namespace

std::shared_ptr<DeviceApi> make_driver_device(const DriverSymbols &driver, int index, NvrtcCompiler &nvrtc) {
  return std::make_shared<DriverDevice>(driver, index, nvrtc);
}

} // namespace kiln::runtime::cuda
