// kiln/runtime/cuda/DeviceApi.h - everything the CUDA backend needs from one
// CUDA device: memory and events (DeviceMemory, for the caching allocators),
// streams, copies, kernel modules and launches.
//
// Two implementations, so everything above them (the allocators, streams,
// the emitter's kernels, the caches, autograd, optimizers) runs the same code
// on a GPU and on this GPU-less machine:
//   - the driver (a real GPU; the driver API through the run-time symbol
//     table, kernels compiled by NVRTC and loaded with cuModuleLoadData);
//   - the CUDA-on-CPU simulator (KILN_CUDA_SIM=1: host memory, the same
//     CUDA C compiled by the host compiler and run as a grid; see
//     runtime/src/sim/README.md).
// The backend over them is CudaBackend.h. The mapping to the driver API is
// named beside each call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/runtime/cuda/DeviceMemory.h"

namespace kiln::runtime::cuda {

/// A captured graph (a CUgraph cast to an integer); 0 is never valid.
using GraphHandle = uintptr_t;
/// An instantiated, launchable graph (a CUgraphExec cast to an integer);
/// 0 is never valid.
using GraphExecHandle = uintptr_t;

/// A launch's grid or block extent (CUDA's dim3).
struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

/// Direction of a copy (the driver picks cuMemcpyHtoDAsync, DtoH or DtoD).
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };

/// What a device is (cuDeviceGetName, cuDeviceGetAttribute).
struct DeviceProperties {
  std::string name;                   ///< "NVIDIA H200", "CUDA simulator"
  int major = 0, minor = 0;           ///< compute capability (9.0 on an H200)
  size_t total_memory_bytes = 0;      ///< cuDeviceTotalMem
  int multiprocessors = 0;            ///< CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  size_t max_shared_bytes_per_block = 0;  ///< with the opt-in (227 KiB on sm_90)
  /// Host code may read and write this device's memory through plain
  /// pointers (the simulator): the backend may then run CPU code on it.
  bool host_accessible = false;
};

/// One kernel of a loaded module (a CUfunction, or a simulator kernel).
/// Valid while its module lives (the handle keeps it).
struct KernelFunction {
  std::string name;
  const void *handle = nullptr;             ///< CUfunction / sim::HostKernel*
  std::shared_ptr<const void> module;       ///< keeps the module loaded
};

/// One CUDA device. Thread-safe, as the driver API is.
class DeviceApi : public DeviceMemory {
public:
  virtual DeviceProperties properties() const = 0;
  /// Makes this device current on the calling thread (the driver: its
  /// primary context, cuCtxSetCurrent), so the CUDA libraries called next
  /// (cuBLASLt, cuDNN, NCCL) work on it. The simulator has nothing to do.
  virtual void set_current() {}

  // ---- streams and timed events --------------------------------------------
  /// A new stream (cuStreamCreate, CU_STREAM_NON_BLOCKING).
  virtual StreamHandle stream_create() = 0;
  /// cuStreamDestroy (work already enqueued still runs).
  virtual void stream_destroy(StreamHandle stream) = 0;
  /// Blocks until all work enqueued on `stream` has finished (cuStreamSynchronize).
  virtual void stream_synchronize(StreamHandle stream) = 0;
  /// Work enqueued on `stream` later waits for `event`'s recorded point
  /// (cuStreamWaitEvent); the host does not block.
  virtual void stream_wait_event(StreamHandle stream, EventHandle event) = 0;
  /// A new event that records time (cuEventCreate(CU_EVENT_DEFAULT)).
  virtual EventHandle timed_event_create() = 0;
  /// Seconds between two recorded, completed timed events (cuEventElapsedTime).
  virtual double event_elapsed_seconds(EventHandle start, EventHandle end) = 0;

  // ---- copies ----------------------------------------------------------------
  /// Copies `nbytes` bytes ordered on `stream` (cuMemcpy*Async). Host
  /// memory should be pinned (CachingHostAllocator) for the copy to overlap;
  /// pageable memory is copied synchronously, as the driver does.
  virtual void memcpy_async(void *dst, const void *src, size_t nbytes, CopyKind kind, StreamHandle stream) = 0;
  /// Sets `nbytes` bytes at `dst` to `value` ordered on `stream` (cuMemsetD8Async).
  virtual void memset_async(void *dst, uint8_t value, size_t nbytes, StreamHandle stream) = 0;

  // ---- kernels ---------------------------------------------------------------
  /// Compiles and loads CUDA C `source` (the kernel-source contract: no
  /// includes, extern "C" __global__ kernels) and returns `kernel_names`'
  /// functions in order. The driver: NVRTC for this device's architecture
  /// (cached on disk), cuModuleLoadData; the simulator: the host compiler.
  /// Throws std::runtime_error with the compiler's log on failure.
  virtual std::vector<KernelFunction> load_kernels(const std::string &source,
                                                   const std::vector<std::string> &kernel_names) = 0;
  /// Loads a prebuilt image (a CUBIN, or NUL-terminated PTX that the driver
  /// JITs: cuModuleLoadData) and returns `kernel_names`' functions in order.
  /// Devices without a driver (the simulator, test doubles) keep this
  /// default, which throws std::runtime_error: they compile the source.
  virtual std::vector<KernelFunction> load_module_image(const std::string &image,
                                                        const std::vector<std::string> &kernel_names) {
    (void)image;
    throw std::runtime_error(properties().name + " cannot load a CUBIN or PTX image (" +
                             std::to_string(kernel_names.size()) + " kernels); it compiles CUDA C source");
  }
  /// Launches `fn` on `grid` x `block` threads with `shared_bytes` of
  /// dynamic shared memory, ordered on `stream`; args[i] points at the
  /// value of parameter i (cuLaunchKernel's convention). Throws
  /// std::runtime_error for a launch the device refuses (the simulator:
  /// also for a kernel that fails its checks, naming kernel, block, thread).
  virtual void launch_kernel(const KernelFunction &fn, Dim3 grid, Dim3 block, size_t shared_bytes,
                             StreamHandle stream, void **args) = 0;

  // ---- CUDA graphs: stream capture (CudaGraph.h is the user of these) ------
  // CUDA's semantics, on the simulator too: while `stream` is capturing,
  // launch_kernel, memcpy_async and memset_async on it are recorded into a
  // graph, not run (their arguments are copied at the call; the memory they
  // name is read and written when the graph is launched). A synchronize of
  // the capturing stream, a copy from or to pageable (not pinned) host
  // memory on it, or another call the capture cannot record, throws
  // CudaError (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and invalidates the
  // capture: every later call on the stream and stream_end_capture throw
  // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED naming the first failure. Work
  // on other streams runs as usual. Devices without graphs (test doubles)
  // keep these defaults, which throw std::runtime_error naming the call.

  /// Starts capturing `stream` (cuStreamBeginCapture_v2 in
  /// CU_STREAM_CAPTURE_MODE_THREAD_LOCAL). The legacy default stream cannot
  /// be captured (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); a stream already
  /// capturing is CUDA_ERROR_ILLEGAL_STATE.
  virtual void stream_begin_capture(StreamHandle stream) { unsupported("stream_begin_capture", stream); }
  /// Ends the capture begun on `stream` on this thread and returns the
  /// graph (cuStreamEndCapture). Throws CudaError when the capture was
  /// invalidated (with the reason), when none is in progress, or from
  /// another thread (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD); the capture
  /// has ended either way.
  virtual GraphHandle stream_end_capture(StreamHandle stream) {
    unsupported("stream_end_capture", stream);
    return 0;
  }
  /// A launchable copy of `graph` (cuGraphInstantiateWithFlags, flags 0);
  /// the graph may be destroyed afterwards.
  virtual GraphExecHandle graph_instantiate(GraphHandle) {
    unsupported("graph_instantiate", kDefaultStream);
    return 0;
  }
  /// Enqueues one run of the whole graph on `stream`, in capture order
  /// (cuGraphLaunch); the kernels read the buffers' contents at that point.
  virtual void graph_launch(GraphExecHandle, StreamHandle stream) { unsupported("graph_launch", stream); }
  /// cuGraphExecDestroy (a launch already enqueued still runs).
  virtual void graph_exec_destroy(GraphExecHandle) { unsupported("graph_exec_destroy", kDefaultStream); }
  /// cuGraphDestroy.
  virtual void graph_destroy(GraphHandle) { unsupported("graph_destroy", kDefaultStream); }
  /// Runs `fn` on the host once `stream`'s earlier work is done
  /// (cuLaunchHostFunc); captured as a host node while the stream captures.
  /// The simulator's host fallbacks (GEMM, conv, pooling, strided copies)
  /// go through it, so compiled graphs with them can be captured there.
  /// Default (test doubles, the driver device): synchronize the stream, then
  /// run `fn` (not capturable: the synchronize invalidates a capture).
  virtual void launch_host_func(StreamHandle stream, std::function<void()> fn) {
    stream_synchronize(stream);
    fn();
  }

private:
  [[noreturn]] void unsupported(const char *call, StreamHandle stream) const {
    throw std::runtime_error(std::string("DeviceApi::") + call + " (stream " + std::to_string(stream) + ") on " +
                             properties().name + ": this device does not support CUDA graphs (stream capture); "
                             "expected the driver's or the simulator's device");
  }
};

} // namespace kiln::runtime::cuda
