// A fake libcuda.so.1 for kiln-cuda-loader-tests: it proves the availability
// probe tells a stub driver, no device, an old driver and a working one
// apart without any NVIDIA software. Its behaviour comes from environment
// variables read on every call:
//   KILN_FAKE_CUDA_INIT            cuInit's result (default 0; 34 stub, 100 no device)
//   KILN_FAKE_CUDA_DRIVER_VERSION  cuDriverGetVersion (default 13000)
//   KILN_FAKE_CUDA_DEVICES         cuDeviceGetCount (default 1)
//   KILN_FAKE_CUDA_MISSING         one entry point cuGetProcAddress_v2 does not find
//   KILN_FAKE_CUDA_MEMORY          device memory in bytes (default 1 GiB; cuMemAlloc beyond it: out of memory)
// It also runs what DriverDevice (runtime/src/cuda/DriverDevice.cpp) calls:
// device memory is host memory, copies are memcpy, streams and events are
// counters that have always completed, a module is any CUBIN (an ELF image),
// and a launch is recorded, not run (kiln_fake_cuda_last_launch).
// Built twice: normally it exports cuGetProcAddress_v2 (a CUDA 12+ driver);
// with KILN_FAKE_CUDA_PRE_12 only cuGetProcAddress and cuInit (CUDA 11).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace {

constexpr int kSuccess = 0;
constexpr int kNotFound = 500;     // CUDA_ERROR_NOT_FOUND
constexpr int kNotSupported = 801; // CUDA_ERROR_NOT_SUPPORTED
constexpr int kSymbolNotFound = 1; // CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND

int env_int(const char *name, int fallback) {
  const char *value = std::getenv(name);
  return value && *value ? std::atoi(value) : fallback;
}

int fake_init(unsigned int) { return env_int("KILN_FAKE_CUDA_INIT", kSuccess); }
int fake_driver_version(int *version) {
  *version = env_int("KILN_FAKE_CUDA_DRIVER_VERSION", 13000);
  return kSuccess;
}
int fake_device_count(int *count) {
  *count = env_int("KILN_FAKE_CUDA_DEVICES", 1);
  return kSuccess;
}
int fake_error_name(int, const char **name) {
  *name = nullptr;
  return kNotSupported;
}
// Any other entry point: the probe never calls them.
int fake_not_supported() { return kNotSupported; }

// ---- what DriverDevice calls -------------------------------------------------
constexpr int kOutOfMemory = 2;   // CUDA_ERROR_OUT_OF_MEMORY
constexpr int kInvalidValue = 1;  // CUDA_ERROR_INVALID_VALUE
constexpr int kInvalidImage = 200; // CUDA_ERROR_INVALID_IMAGE
constexpr int kCcMajor = 75, kCcMinor = 76, kMultiprocessors = 16, kSharedOptin = 97; // CUdevice_attribute

std::mutex mu;
std::map<uintptr_t, size_t> allocations;
size_t allocated = 0;
std::atomic<uintptr_t> next_handle{0x1000};
thread_local void *current_context = nullptr;
char context_object, module_object, function_object;
std::string call_log;                    // "name(args)\n" per call since the last reset
std::map<uintptr_t, bool> capturing;     // stream -> capture still valid
void log_call(const std::string &call) {
  call_log += call;
  call_log += '\n';
}
std::string hex(uintptr_t v) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

size_t memory_bytes() {
  const char *v = std::getenv("KILN_FAKE_CUDA_MEMORY");
  return v && *v ? std::strtoull(v, nullptr, 10) : (size_t{1} << 30);
}
int fake_device_get(int *device, int ordinal) {
  if (ordinal < 0 || ordinal >= env_int("KILN_FAKE_CUDA_DEVICES", 1)) return 101; // CUDA_ERROR_INVALID_DEVICE
  *device = ordinal;
  return kSuccess;
}
int fake_device_name(char *name, int length, int) {
  std::strncpy(name, "Kiln fake GPU", static_cast<size_t>(length));
  return kSuccess;
}
int fake_attribute(int *value, int attribute, int) {
  *value = attribute == kCcMajor ? 9 : attribute == kCcMinor ? 0 : attribute == kMultiprocessors ? 132
         : attribute == kSharedOptin ? 232448 : 0;
  return kSuccess;
}
int fake_total_mem(size_t *bytes, int) {
  *bytes = memory_bytes();
  return kSuccess;
}
int fake_retain(void **context, int) {
  *context = &context_object;
  return kSuccess;
}
int fake_release(int) { return kSuccess; }
int fake_set_current(void *context) {
  current_context = context;
  return kSuccess;
}
int fake_get_current(void **context) {
  *context = current_context;
  return kSuccess;
}
int fake_mem_alloc(uintptr_t *pointer, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu);
  if (current_context != &context_object) return 201; // CUDA_ERROR_INVALID_CONTEXT
  if (bytes > memory_bytes() - allocated) return kOutOfMemory;
  void *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  allocations[reinterpret_cast<uintptr_t>(p)] = bytes;
  allocated += bytes;
  *pointer = reinterpret_cast<uintptr_t>(p);
  return kSuccess;
}
int fake_mem_free(uintptr_t pointer) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = allocations.find(pointer);
  if (it == allocations.end()) return kInvalidValue;
  allocated -= it->second;
  allocations.erase(it);
  std::free(reinterpret_cast<void *>(pointer));
  return kSuccess;
}
int fake_mem_get_info(size_t *free_bytes, size_t *total_bytes) {
  std::lock_guard<std::mutex> lock(mu);
  *free_bytes = memory_bytes() - allocated;
  *total_bytes = memory_bytes();
  return kSuccess;
}
int fake_host_alloc(void **pointer, size_t bytes) {
  *pointer = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  return *pointer ? kSuccess : kOutOfMemory;
}
int fake_host_free(void *pointer) {
  std::free(pointer);
  return kSuccess;
}
int fake_copy(void *dst, const void *src, size_t bytes, void *) {
  std::memmove(dst, src, bytes);
  return kSuccess;
}
int fake_memset(void *dst, unsigned char value, size_t count, void *) {
  std::memset(dst, value, count);
  return kSuccess;
}
int fake_new_handle(uintptr_t *handle, unsigned) {
  *handle = next_handle++;
  return kSuccess;
}
int fake_handle_op(uintptr_t) { return kSuccess; }
int fake_handle_pair(uintptr_t, uintptr_t) { return kSuccess; }
int fake_wait_event(uintptr_t, uintptr_t, unsigned) { return kSuccess; }
int fake_elapsed(float *milliseconds, uintptr_t, uintptr_t) {
  *milliseconds = 1.5f;
  return kSuccess;
}
int fake_module_load(void **module, const void *image) {
  if (!image || std::memcmp(image, "\x7f" "ELF", 4) != 0) return kInvalidImage;
  *module = &module_object;
  return kSuccess;
}
int fake_module_unload(void *) { return kSuccess; }
int fake_get_function(void **function, void *, const char *) {
  *function = &function_object;
  return kSuccess;
}
int fake_func_set_attribute(void *, int, int) { return kSuccess; }

/// The last cuLaunchKernel: grid, block, shared bytes and its third
/// parameter read as an int (the test kernel's element count).
struct Launch {
  unsigned grid[3], block[3], shared_bytes;
  int third_parameter;
  int count;
};
Launch last_launch{};
int fake_launch(void *, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared,
                void *stream, void **params, void **) {
  std::lock_guard<std::mutex> lock(mu);
  log_call("cuLaunchKernel(" + hex(reinterpret_cast<uintptr_t>(stream)) + ")");
  if (capturing.count(reinterpret_cast<uintptr_t>(stream))) return kSuccess; // recorded, not "run"
  last_launch = Launch{{gx, gy, gz}, {bx, by, bz}, shared, params && params[2] ? *static_cast<int *>(params[2]) : -1,
                       last_launch.count + 1};
  return kSuccess;
}

// ---- stream capture: recorded calls, capture state per stream --------------
constexpr int kCaptureUnsupported = 900; // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
constexpr int kCaptureInvalidated = 901; // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
constexpr int kIllegalState = 401;       // CUDA_ERROR_ILLEGAL_STATE
int fake_begin_capture(uintptr_t stream, int mode) {
  std::lock_guard<std::mutex> lock(mu);
  log_call("cuStreamBeginCapture(" + hex(stream) + ", mode=" + std::to_string(mode) + ")");
  if (stream == 0 || capturing.count(stream)) return stream == 0 ? kCaptureUnsupported : kIllegalState;
  capturing[stream] = true;
  return kSuccess;
}
int fake_end_capture(uintptr_t stream, uintptr_t *graph) {
  std::lock_guard<std::mutex> lock(mu);
  log_call("cuStreamEndCapture(" + hex(stream) + ")");
  auto it = capturing.find(stream);
  if (it == capturing.end()) return kIllegalState;
  const bool valid = it->second;
  capturing.erase(it);
  if (!valid) return kCaptureInvalidated;
  *graph = next_handle++;
  return kSuccess;
}
int fake_instantiate(uintptr_t *exec, uintptr_t graph, unsigned long long flags) {
  std::lock_guard<std::mutex> lock(mu);
  log_call("cuGraphInstantiateWithFlags(" + hex(graph) + ", flags=" + std::to_string(flags) + ")");
  *exec = next_handle++;
  return kSuccess;
}
int fake_graph_launch(uintptr_t exec, uintptr_t stream) {
  std::lock_guard<std::mutex> lock(mu);
  log_call("cuGraphLaunch(" + hex(exec) + ", " + hex(stream) + ")");
  return kSuccess;
}
int fake_graph_exec_destroy(uintptr_t exec) {
  std::lock_guard<std::mutex> lock(mu);
  log_call("cuGraphExecDestroy(" + hex(exec) + ")");
  return kSuccess;
}
int fake_graph_destroy(uintptr_t graph) {
  std::lock_guard<std::mutex> lock(mu);
  log_call("cuGraphDestroy(" + hex(graph) + ")");
  return kSuccess;
}
/// A capturing stream cannot be synchronized: the capture is invalidated.
int fake_stream_synchronize(uintptr_t stream) {
  std::lock_guard<std::mutex> lock(mu);
  log_call("cuStreamSynchronize(" + hex(stream) + ")");
  auto it = capturing.find(stream);
  if (it == capturing.end()) return kSuccess;
  it->second = false;
  return kCaptureUnsupported;
}
/// Copies on a capturing stream are recorded (logged), not run.
bool captured_call(const std::string &name, uintptr_t stream) {
  std::lock_guard<std::mutex> lock(mu);
  log_call(name + "(" + hex(stream) + ")");
  return capturing.count(stream) > 0;
}
int fake_copy_logged(void *dst, const void *src, size_t bytes, void *stream) {
  if (captured_call("cuMemcpyAsync", reinterpret_cast<uintptr_t>(stream))) return kSuccess;
  return fake_copy(dst, src, bytes, stream);
}

struct Entry {
  const char *name;
  void *function;
};
template <typename F> void *fn(F *f) { return reinterpret_cast<void *>(f); }
const Entry kDeviceEntries[] = {
    {"cuDeviceGet", fn(&fake_device_get)},          {"cuDeviceGetName", fn(&fake_device_name)},
    {"cuDeviceGetAttribute", fn(&fake_attribute)},  {"cuDeviceTotalMem", fn(&fake_total_mem)},
    {"cuDevicePrimaryCtxRetain", fn(&fake_retain)}, {"cuDevicePrimaryCtxRelease", fn(&fake_release)},
    {"cuCtxSetCurrent", fn(&fake_set_current)},     {"cuCtxGetCurrent", fn(&fake_get_current)},
    {"cuMemAlloc", fn(&fake_mem_alloc)},            {"cuMemFree", fn(&fake_mem_free)},
    {"cuMemGetInfo", fn(&fake_mem_get_info)},       {"cuMemAllocHost", fn(&fake_host_alloc)},
    {"cuMemFreeHost", fn(&fake_host_free)},         {"cuMemcpyHtoDAsync", fn(&fake_copy_logged)},
    {"cuMemcpyDtoHAsync", fn(&fake_copy_logged)},   {"cuMemcpyDtoDAsync", fn(&fake_copy_logged)},
    {"cuMemsetD8Async", fn(&fake_memset)},          {"cuStreamCreate", fn(&fake_new_handle)},
    {"cuStreamDestroy", fn(&fake_handle_op)},       {"cuStreamSynchronize", fn(&fake_stream_synchronize)},
    {"cuStreamWaitEvent", fn(&fake_wait_event)},    {"cuEventCreate", fn(&fake_new_handle)},
    {"cuEventDestroy", fn(&fake_handle_op)},        {"cuEventRecord", fn(&fake_handle_pair)},
    {"cuEventSynchronize", fn(&fake_handle_op)},    {"cuEventQuery", fn(&fake_handle_op)},
    {"cuEventElapsedTime", fn(&fake_elapsed)},      {"cuModuleLoadData", fn(&fake_module_load)},
    {"cuModuleUnload", fn(&fake_module_unload)},    {"cuModuleGetFunction", fn(&fake_get_function)},
    {"cuFuncSetAttribute", fn(&fake_func_set_attribute)}, {"cuLaunchKernel", fn(&fake_launch)},
    {"cuStreamBeginCapture", fn(&fake_begin_capture)},   {"cuStreamEndCapture", fn(&fake_end_capture)},
    {"cuGraphInstantiateWithFlags", fn(&fake_instantiate)}, {"cuGraphLaunch", fn(&fake_graph_launch)},
    {"cuGraphExecDestroy", fn(&fake_graph_exec_destroy)}, {"cuGraphDestroy", fn(&fake_graph_destroy)},
};

void *entry_point(const char *symbol) {
  if (std::strcmp(symbol, "cuInit") == 0)
    return reinterpret_cast<void *>(&fake_init);
  if (std::strcmp(symbol, "cuDriverGetVersion") == 0)
    return reinterpret_cast<void *>(&fake_driver_version);
  if (std::strcmp(symbol, "cuDeviceGetCount") == 0)
    return reinterpret_cast<void *>(&fake_device_count);
  if (std::strcmp(symbol, "cuGetErrorName") == 0 || std::strcmp(symbol, "cuGetErrorString") == 0)
    return reinterpret_cast<void *>(&fake_error_name);
  for (const Entry &e : kDeviceEntries)
    if (std::strcmp(symbol, e.name) == 0) return e.function;
  return reinterpret_cast<void *>(&fake_not_supported);
}

} // namespace

/// For the tests: the last recorded launch and the launch count, in
/// `out` = {grid x, y, z, block x, y, z, shared bytes, third parameter, count}.
extern "C" void kiln_fake_cuda_last_launch(long long *out) {
  std::lock_guard<std::mutex> lock(mu);
  const Launch &l = last_launch;
  const long long v[] = {l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared_bytes,
                         l.third_parameter, l.count};
  std::memcpy(out, v, sizeof(v));
}
/// For the tests: the calls logged since the last call of this function
/// (stream capture, graphs, launches, copies, stream synchronizes), one
/// "name(arguments)" per line, copied into `out` (NUL-terminated, cut at
/// `capacity`); returns the log's full length. Clears the log.
extern "C" size_t kiln_fake_cuda_take_calls(char *out, size_t capacity) {
  std::lock_guard<std::mutex> lock(mu);
  const size_t n = call_log.size();
  if (out && capacity > 0) {
    const size_t m = std::min(n, capacity - 1);
    std::memcpy(out, call_log.data(), m);
    out[m] = '\0';
  }
  call_log.clear();
  return n;
}
/// For the tests: bytes of device memory allocated now.
extern "C" size_t kiln_fake_cuda_allocated() {
  std::lock_guard<std::mutex> lock(mu);
  return allocated;
}

#ifdef KILN_FAKE_CUDA_PRE_12
extern "C" int cuGetProcAddress(const char *symbol, void **pfn, int, uint64_t) {
  *pfn = entry_point(symbol);
  return kSuccess;
}
extern "C" int cuInit(unsigned int flags) { return fake_init(flags); }
#else
extern "C" int cuGetProcAddress_v2(const char *symbol, void **pfn, int, uint64_t, int *status) {
  const char *missing = std::getenv("KILN_FAKE_CUDA_MISSING");
  if (missing && std::strcmp(symbol, missing) == 0) {
    *pfn = nullptr;
    *status = kSymbolNotFound;
    return kNotFound;
  }
  *pfn = entry_point(symbol);
  *status = kSuccess;
  return kSuccess;
}
#endif
