// The few CUDA driver and NVRTC types Kiln's symbol tables need, declared
// here so the build needs no toolkit headers (IREE's dynamic_symbol_tables.h
// pattern). Values and layouts are those of cuda.h / nvrtc.h (CUDA 13.0);
// every type is an opaque handle, an integer or a C enum passed as int.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::runtime::cuda {

/// cuda.h `CUresult` (a C enum: int-sized). Only the codes Kiln names.
using CUresult = int;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
constexpr CUresult CUDA_ERROR_INSUFFICIENT_DRIVER = 35;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
constexpr CUresult CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;
constexpr CUresult CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803;
constexpr CUresult CUDA_ERROR_INVALID_HANDLE = 400;
constexpr CUresult CUDA_ERROR_ILLEGAL_STATE = 401;
constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900;
constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901;
constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908;
constexpr CUresult CUDA_ERROR_UNKNOWN = 999;

using CUdevice = int;
using CUdeviceptr = unsigned long long; // CUdeviceptr_v2 on 64-bit hosts
using cuuint64_t = uint64_t;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUgraph = struct CUgraph_st *;
using CUgraphExec = struct CUgraphExec_st *;

/// cuda.h `CUdevice_attribute` (passed as int); the attributes Kiln reads.
using CUdevice_attribute = int;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

using CUfunction_attribute = int; // cuda.h CUfunction_attribute
using CUstreamCaptureMode = int;  // cuda.h CUstreamCaptureMode
/// cuda.h CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: unsafe calls (a synchronize,
/// cuMemAlloc...) from the capturing thread fail and invalidate the capture;
/// other threads are not restricted (PyTorch's default for CUDAGraph is global).
constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
using CUjit_option = int;         // cuda.h CUjit_option

/// cuda.h `CUdriverProcAddressQueryResult` (cuGetProcAddress_v2's status).
using CUdriverProcAddressQueryResult = int;
constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_SUCCESS = 0;
constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1;
constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2;
/// cuda.h `CU_GET_PROC_ADDRESS_DEFAULT`: the legacy default stream unless
/// the caller was built with per-thread default streams (Kiln is not).
constexpr cuuint64_t CU_GET_PROC_ADDRESS_DEFAULT = 0;

/// cuda.h (CUDA 12.0+): `cuGetProcAddress_v2`, the one entry point Kiln takes
/// from libcuda.so.1 by name; every other one comes through it.
using PFN_cuGetProcAddress_v2 = CUresult (*)(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult *symbolStatus);

/// nvrtc.h `nvrtcResult` (C enum) and the program handle.
using nvrtcResult = int;
constexpr nvrtcResult NVRTC_SUCCESS = 0;
constexpr nvrtcResult NVRTC_ERROR_COMPILATION = 6;
using nvrtcProgram = struct _nvrtcProgram *;

} // namespace kiln::runtime::cuda
