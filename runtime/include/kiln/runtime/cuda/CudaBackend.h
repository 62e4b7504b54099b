// kiln/runtime/cuda/CudaBackend.h - the DeviceBackend of DeviceType::CUDA,
// written once over DeviceApi (DeviceApi.h), so the GPU and the CUDA-on-CPU
// simulator run the same allocator, stream, event and launch code.
//
//   auto backend = cuda::make_cuda_backend(std::move(devices));  // one DeviceApi per index
//   runtime::register_backend(backend);
//   // or: KILN_CUDA_SIM=1 and the first find_backend(DeviceType::CUDA)
//   // registers the simulator's (ensure_cuda_backend).
//
// Per device: a CachingAllocator (PyTorch's rules) and a CachingHostAllocator
// for pinned memory; the default stream is CUDA's legacy NULL stream.
// GEMMs on a GPU run on cuBLASLt (CublasLtGemm.h). What the backend does not
// run as CUDA kernels yet: on a host-accessible device (the simulator) GEMM,
// convolution, max pooling and strided copies run the CPU backend's code on
// the device memory after synchronizing the stream (the simulator's
// documented fallback); on a GPU convolution, max pooling and strided
// copies throw std::runtime_error naming the operation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/cuda/CachingHostAllocator.h"
#include "kiln/runtime/cuda/DeviceApi.h"

namespace kiln::runtime::cuda {

/// A backend over `devices` (device index i is devices[i]; at least one).
/// Throws std::invalid_argument on an empty list.
std::shared_ptr<DeviceBackend> make_cuda_backend(std::vector<std::shared_ptr<DeviceApi>> devices);

/// The DeviceApi behind CUDA device `index` of the registered CUDA backend,
/// or null when the registered CUDA backend is not a CudaBackend.
DeviceApi *device_api(int index);

/// The raw stream of a Stream of a CudaBackend (kDefaultStream for the
/// default stream). Throws std::invalid_argument for another backend's stream.
StreamHandle stream_handle(Stream &stream);

/// A Stream of the registered CUDA backend over the raw stream `stream` of
/// device `device` (not owned: destroying it leaves the stream alone), e.g.
/// the thread's current stream (CurrentStream.h), so backend work (GEMM,
/// copies) can be enqueued where the eager kernels go. Throws
/// std::runtime_error when the registered CUDA backend is not a CudaBackend,
/// std::out_of_range for a device it does not have.
std::unique_ptr<Stream> borrowed_stream(int device, StreamHandle stream);

/// The pinned host allocator of the registered CUDA backend (pin_memory()),
/// or null when there is none.
CachingHostAllocator *pinned_allocator();

/// Registers a CUDA backend when none is: the simulator (one device, or
/// $KILN_SIM_DEVICES) when the environment has KILN_CUDA_SIM=1, else the
/// driver's devices when is_available() (Availability.h). Returns the
/// registered backend, or null with `why_not` saying what is missing and
/// what to do. Thread-safe; find_backend(DeviceType::CUDA) calls it, so the
/// first CUDA tensor of a process registers the backend.
DeviceBackend *ensure_cuda_backend(std::string *why_not = nullptr);

struct DriverSymbols; // the loaded driver table (runtime/src/cuda/DriverLibrary.h)
class NvrtcCompiler;  // kiln/runtime/cuda/Nvrtc.h

/// A real GPU's DeviceApi (DriverDevice.cpp) over the loaded driver table
/// `driver`: device `index`'s primary context (retained here, released
/// with the object, made current on the calling thread before each call),
/// kernels compiled by `nvrtc` for the device's compute capability and
/// loaded with cuModuleLoadData. `driver` and `nvrtc` must outlive it.
/// Throws CudaError naming the driver call when the device cannot be
/// opened (no such index, a driver error).
std::shared_ptr<DeviceApi> make_driver_device(const DriverSymbols &driver, int index, NvrtcCompiler &nvrtc);

/// The simulator's DeviceApi for simulated device `index` (SimDevice.cpp):
/// guard-paged host memory bounded by $KILN_SIM_MEMORY_MB (default 8 GiB),
/// inline streams, kernels host-compiled and run as a grid.
std::shared_ptr<DeviceApi> make_simulator_device(int index);

} // namespace kiln::runtime::cuda
