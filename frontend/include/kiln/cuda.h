// kiln/cuda.h - is CUDA usable here (torch.cuda.is_available() and
// torch.cuda.device_count()), and if not, why.
//
//   if (!kiln::cuda::is_available())
//     std::cerr << kiln::cuda::availability_reason() << "\n";
//     // "CUDA is not available: cannot load libcuda.so.1 (...): the NVIDIA
//     //  driver is not installed (or not on the library path); ..."
//
// The availability calls never throw; the CUDA driver and NVRTC are loaded at run time on the
// first call (kiln/runtime/cuda/Availability.h), so a program using Kiln
// starts on any machine.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::cuda {

/// True when the NVIDIA driver (libcuda.so.1, CUDA 13+), at least one
/// device and NVRTC (libnvrtc.so.13) are all usable.
bool is_available();

/// The number of CUDA devices; 0 when is_available() is false.
int device_count();

/// One sentence: which piece is missing (no driver, the toolkit's stub
/// driver, no device, a driver too old for the kernels, no NVRTC) and what
/// to do; or "CUDA is available: driver 13.0, 1 device, NVRTC 13.0".
std::string availability_reason();

/// Blocks until all work queued on device `device`'s default stream (where
/// eager ops run) has finished (torch.cuda.synchronize). Throws kiln::Error
/// when there is no CUDA backend or no such device.
void synchronize(int device = 0);

/// Bytes of tensors allocated on CUDA device `device` now, and the most
/// since the last reset_peak_memory_stats(device) (torch.cuda.memory_allocated
/// / max_memory_allocated; the caching allocator's counts, requests rounded
/// to 512 B). Work on the simulator too (KILN_CUDA_SIM=1). Throw kiln::Error
/// when there is no CUDA backend or no such device.
int64_t memory_allocated(int device = 0);
int64_t max_memory_allocated(int device = 0);
void reset_peak_memory_stats(int device = 0);

} // namespace kiln::cuda
