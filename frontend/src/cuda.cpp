// kiln::cuda: the frontend's face of the runtime's availability probe.
#include "kiln/cuda.h"

#include "cuda_backend_of.h"
#include "kiln/error.h"
#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/cuda/Availability.h"

namespace kiln::cuda {

bool is_available() { return runtime::cuda::is_available(); }
int device_count() { return runtime::cuda::device_count(); }
std::string availability_reason() { return runtime::cuda::availability_reason(); }

runtime::DeviceBackend &detail::backend_of(int device, const char *op) {
  runtime::DeviceBackend *backend = runtime::find_backend(DeviceType::CUDA);
  KILN_CHECK(backend != nullptr, "kiln::cuda::", op, ": no CUDA backend in this process (",
             runtime::backend_unavailable_reason(DeviceType::CUDA), ")");
  KILN_CHECK(device >= 0 && device < backend->device_count(), "kiln::cuda::", op, ": no device cuda:", device, " (",
             backend->device_count(), " device(s))");
  return *backend;
}

namespace {
using detail::backend_of;
runtime::Allocator &allocator_of(int device, const char *op) { return backend_of(device, op).allocator(device); }
} // namespace

void synchronize(int device) { backend_of(device, "synchronize").default_stream(device).synchronize(); }

int64_t memory_allocated(int device) { return allocator_of(device, "memory_allocated").stats().current_bytes; }
int64_t max_memory_allocated(int device) { return allocator_of(device, "max_memory_allocated").stats().peak_bytes; }
void reset_peak_memory_stats(int device) { allocator_of(device, "reset_peak_memory_stats").reset_peak_stats(); }

} // namespace kiln::cuda
