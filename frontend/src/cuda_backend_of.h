// The CUDA backend of the kiln::cuda functions (cuda.cpp, cuda_graph.cpp).
#pragma once

#include "kiln/runtime/DeviceBackend.h"

namespace kiln::cuda::detail {

/// The process's CUDA backend for device `device`; kiln::Error naming
/// "kiln::cuda::<op>" when there is no CUDA backend (with the reason) or no
/// such device (with the device count).
runtime::DeviceBackend &backend_of(int device, const char *op);

} // namespace kiln::cuda::detail
