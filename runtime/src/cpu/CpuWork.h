// CpuWork.h - the CPU backend's work functions (kernel launch, GEMM, strided
// copy), shared by CpuBackend.cpp and CpuWork.cpp; not installed.
#pragma once

#include "kiln/runtime/Conv.h"
#include "kiln/runtime/KernelHandle.h"
#include "kiln/runtime/TensorView.h"

namespace kiln::runtime::cpu {

/// Packs `args` as MLIR memref descriptors and calls kernel.packed, split
/// over the OpenMP threads by rows when kernel.split_rows and the launch is
/// large enough (DeviceBackend::launch).
void launch_kernel(const KernelHandle &kernel, const KernelArgs &args);

/// c = a x b on strided views (DeviceBackend::gemm).
void gemm(const TensorView &a, const TensorView &b, const TensorView &c);

/// runtime::conv2d on views (DeviceBackend::conv2d): a and b copied
/// contiguous first when they are not.
void conv2d(ConvOp op, const Conv2dParams &p, const TensorView &a, const TensorView &b, const TensorView &out);

/// runtime::max_pool2d on views (DeviceBackend::max_pool2d).
void max_pool2d(MaxPoolOp op, const Pool2dParams &p, const TensorView &a, const TensorView &indices,
                const TensorView &values);

/// Copies the elements of `src` (any strides) into `dst`, contiguous.
void copy_to_contiguous(const TensorView &src, void *dst);

} // namespace kiln::runtime::cpu
