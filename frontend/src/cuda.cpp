// kiln::cuda: the frontend's face of the runtime's availability probe.
#include "kiln/cuda.h"

#include "kiln/runtime/cuda/Availability.h"

namespace kiln::cuda {

bool is_available() { return runtime::cuda::is_available(); }
int device_count() { return runtime::cuda::device_count(); }
std::string availability_reason() { return runtime::cuda::availability_reason(); }

} // namespace kiln::cuda
