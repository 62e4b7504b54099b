// backend.h (internal) - the runtime backend behind a tensor's device.
#pragma once

#include "kiln/runtime/DeviceBackend.h"
#include "kiln/tensor.h"

namespace kiln {

/// The DeviceBackend serving `device`. Throws kiln::Error naming `op` and the
/// device when no backend is registered for its type or the index does not
/// exist.
runtime::DeviceBackend &backend_of(const Device &device, const char *op);

} // namespace kiln
