// kiln/runtime/DeviceBackend.h - what a device kind provides to every layer
// above it (IREE's HAL device, PyTorch's DeviceGuardImpl + allocator), and
// the registry that finds the backend of a Device.
//
// One backend serves one DeviceType (all its indices). The CPU backend is
// always registered; CUDA, the CUDA simulator and out-of-tree backends
// (DeviceType::PrivateUse1, e.g. a test's checking device) register
// themselves at start-up or on first use.
//
//   runtime::DeviceBackend *b = runtime::find_backend(DeviceType::CPU);
//   auto buf = runtime::Buffer::make(1024, b->allocator(0));
//   runtime::Stream &s = b->default_stream(0);
//   b->launch(kernel, args, s);       // a KernelHandle from a kernel library
//   b->gemm(a, w, c, s);
//   b->conv2d(runtime::ConvOp::Forward, params, x, w, y, s);
//   s.synchronize();
//
// Work functions (copy_async, copy_to_contiguous, launch, gemm, conv2d,
// max_pool2d) enqueue on a
// stream of this backend's device; pointers and views must stay valid until
// the work has finished (stream order). The CPU backend runs them inline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/runtime/Allocator.h"
#include "kiln/runtime/Conv.h"
#include "kiln/runtime/Device.h"
#include "kiln/runtime/Event.h"
#include "kiln/runtime/KernelHandle.h"
#include "kiln/runtime/Stream.h"
#include "kiln/runtime/TensorView.h"

namespace kiln::runtime {

class DeviceBackend {
public:
  virtual ~DeviceBackend() = default;
  /// The device kind this backend serves.
  virtual DeviceType type() const = 0;
  /// Number of devices of this kind (indices 0 .. count-1).
  virtual int device_count() const = 0;
  /// The allocator of device `index` (0 <= index < device_count(); the
  /// caller checks). Lives as long as the backend.
  virtual Allocator &allocator(int index) = 0;
  /// True when host code may read and write this backend's memory through
  /// plain pointers (the CPU, the CUDA simulator, a checking CPU device):
  /// host-side kernels may then run on it directly.
  virtual bool host_accessible() const = 0;
  /// Copies `nbytes` bytes from `src` on `src_device` to `dst` on
  /// `dst_device`; one of the two is this backend's, the other is this
  /// backend's or the CPU. Synchronous: the bytes are at `dst` on return.
  virtual void copy(void *dst, Device dst_device, const void *src, Device src_device, size_t nbytes) = 0;

  // ---- streams and events ----------------------------------------------------
  /// The stream work goes to when the caller names none (lives as long as
  /// the backend).
  virtual Stream &default_stream(int index) = 0;
  /// A new stream on device `index`.
  virtual std::unique_ptr<Stream> create_stream(int index) = 0;
  /// A new, unrecorded event on device `index`.
  virtual std::unique_ptr<Event> create_event(int index) = 0;

  // ---- work on a stream --------------------------------------------------------
  /// copy() ordered on `stream` (host<->device, device<->device).
  virtual void copy_async(void *dst, Device dst_device, const void *src, Device src_device, size_t nbytes,
                          Stream &stream) = 0;
  /// Writes the elements of `src` (any non-negative strides, this backend's
  /// memory) to `dst` contiguous, row-major (numel * itemsize bytes).
  virtual void copy_to_contiguous(const TensorView &src, void *dst, Stream &stream) = 0;
  /// Runs `kernel` (from a kernel library of this backend's kind) on `args`.
  /// CPU: packs one memref descriptor per operand and result and calls
  /// kernel.packed; a split_rows kernel touching at least
  /// kCpuSplitMinBytes runs on row blocks over the OpenMP threads.
  virtual void launch(const KernelHandle &kernel, const KernelArgs &args, Stream &stream) = 0;
  /// c = a x b: a [M, K] x b [K, N] -> c [M, N], or batched [B, M, K] x
  /// [B, K, N] -> [B, M, N]; a and b strided views of one dtype (float32,
  /// float64, bfloat16, float16; batch strides may be 0), c contiguous of
  /// that dtype. The CPU runs runtime::sgemm_batched (f32), gemm16_batched
  /// (bf16, f16) or a plain f64 loop. Throws std::exception (the message
  /// names the failure) when the GEMM library fails.
  virtual void gemm(const TensorView &a, const TensorView &b, const TensorView &c, Stream &stream) = 0;
  /// One convolution primitive (Conv.h, ConvOp says which of a, b, out is
  /// the input [N, C, H, W], the weight [O, C/groups, kH, kW] and the output
  /// [N, O, OH, OW]); a and b strided views, out contiguous, one float dtype.
  /// The CPU runs runtime::conv2d (oneDNN for float32). Throws std::exception
  /// naming the shapes when the library fails.
  virtual void conv2d(ConvOp op, const Conv2dParams &p, const TensorView &a, const TensorView &b,
                      const TensorView &out, Stream &stream) = 0;
  /// One max pooling primitive (Conv.h): Forward reads a = x [N, C, H, W]
  /// and writes `values` and/or `indices` [N, C, OH, OW] (a view without a
  /// buffer is not written); Backward reads a = grad y and `indices`, writes
  /// `values` = grad x; Gather reads a [N, C, H, W] and `indices`, writes
  /// `values` [N, C, OH, OW]. Written views are contiguous; float32, float64,
  /// bfloat16 or float16 (16-bit through float32).
  virtual void max_pool2d(MaxPoolOp op, const Pool2dParams &p, const TensorView &a, const TensorView &indices,
                          const TensorView &values, Stream &stream) = 0;
};

/// The CPU backend runs a split_rows kernel on several threads only when its
/// operands and results together have at least this many bytes (below,
/// waking the OpenMP threads costs more than the halved loop saves).
/// Measured on the GPT bench (bench/README.md).
constexpr int64_t kCpuSplitMinBytes = 256 * 1024;

/// The backend registered for `type`, or null when there is none (a kind
/// this build or this process does not serve). For DeviceType::CUDA with
/// none registered yet, first tries cuda::ensure_cuda_backend (the
/// simulator under KILN_CUDA_SIM=1). Thread-safe.
DeviceBackend *find_backend(DeviceType type);

/// The backend registered for `type` now, or null; never registers one.
DeviceBackend *registered_backend(DeviceType type);

/// Why find_backend(type) returns null, as a sentence that says what to do
/// (for CUDA: the simulator switch); empty when it does not.
std::string backend_unavailable_reason(DeviceType type);

/// Registers `backend` for its type(), replacing any earlier one (the CPU's
/// included: a test may wrap it). Returns the previous one (null if none)
/// so a caller can restore it. Thread-safe; backends already handed out by
/// find_backend() must stay alive while in use (callers keep the shared_ptr).
std::shared_ptr<DeviceBackend> register_backend(std::shared_ptr<DeviceBackend> backend);

/// Removes the backend registered for `type` (not the CPU's: that one can
/// only be replaced) and returns it (null if none). Thread-safe.
std::shared_ptr<DeviceBackend> unregister_backend(DeviceType type);

/// The CPU backend (runtime/src/cpu/): cpu_allocator(), memcpy, inline
/// streams, OpenMP row-split launches, oneDNN GEMMs. Always registered.
std::shared_ptr<DeviceBackend> cpu_backend();

}  // namespace kiln::runtime
