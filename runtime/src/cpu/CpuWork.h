// CpuWork.h - the CPU backend's work functions (kernel launch, GEMM, strided
// copy), shared by CpuBackend.cpp and CpuWork.cpp; not installed.
#pragma once

#include "kiln/runtime/KernelHandle.h"
#include "kiln/runtime/TensorView.h"

namespace kiln::runtime::cpu {

/// Packs `args` as MLIR memref descriptors and calls kernel.packed, split
/// over the OpenMP threads by rows when kernel.split_rows and the launch is
/// large enough (DeviceBackend::launch).
void launch_kernel(const KernelHandle &kernel, const KernelArgs &args);

/// c = a x b on strided views (DeviceBackend::gemm).
void gemm(const TensorView &a, const TensorView &b, const TensorView &c);

/// Copies the elements of `src` (any strides) into `dst`, contiguous.
void copy_to_contiguous(const TensorView &src, void *dst);

} // namespace kiln::runtime::cpu
