// kiln-cuda-loader-tests on a real GPU: the driver table's pinned variants
// (cuMemAlloc_v2, cuMemcpy*_v2, cuLaunchKernel...) load an NVRTC CUBIN for
// the device's own architecture and run it. Skipped, with the availability
// reason, where there is no usable driver and device.
#include <gtest/gtest.h>
#include <vector>

#include "Check.h"
#include "kiln/runtime/cuda/Availability.h"
#include "kiln/runtime/cuda/Nvrtc.h"

namespace cuda = kiln::runtime::cuda;

namespace {

const char *kAddOne = R"(extern "C" __global__ void add_one(const float *__restrict__ x, float *__restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = x[i] + 1.0f;
}
)";

int device_arch(cuda::CUdevice device) {
  int major = 0, minor = 0;
  KILN_CU_CALL(cuDeviceGetAttribute, &major, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  KILN_CU_CALL(cuDeviceGetAttribute, &minor, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  return major * 10 + minor;
}

} // namespace

TEST(CudaDevice, LaunchesAnNvrtcKernelOnDevice0) {
  if (!cuda::is_available())
    GTEST_SKIP() << "skipped: " << cuda::availability_reason();
  cuda::CUdevice device = 0;
  KILN_CU_CALL(cuDeviceGet, &device, 0);
  cuda::CUcontext context = nullptr;
  KILN_CU_CALL(cuDevicePrimaryCtxRetain, &context, device);
  KILN_CU_CALL(cuCtxSetCurrent, context);

  cuda::NvrtcCompiler compiler(cuda::NvrtcCompilerOptions{std::string(), {}});
  cuda::CompiledModule compiled = compiler.compile({kAddOne, {"add_one"}}, device_arch(device));
  cuda::CUmodule module = nullptr;
  KILN_CU_CALL(cuModuleLoadData, &module, compiled.binary.data());
  cuda::CUfunction function = nullptr;
  KILN_CU_CALL(cuModuleGetFunction, &function, module, "add_one");

  int n = 1000;
  std::vector<float> host(n), result(n, 0.f);
  for (int i = 0; i < n; ++i)
    host[i] = 0.5f * i;
  size_t bytes = n * sizeof(float);
  cuda::CUdeviceptr x = 0, y = 0;
  KILN_CU_CALL(cuMemAlloc, &x, bytes);
  KILN_CU_CALL(cuMemAlloc, &y, bytes);
  cuda::CUstream stream = nullptr;
  KILN_CU_CALL(cuStreamCreate, &stream, 0);
  KILN_CU_CALL(cuMemcpyHtoDAsync, x, host.data(), bytes, stream);
  void *params[] = {&x, &y, &n};
  KILN_CU_CALL(cuLaunchKernel, function, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  KILN_CU_CALL(cuMemcpyDtoHAsync, result.data(), y, bytes, stream);
  KILN_CU_CALL(cuStreamSynchronize, stream);
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(result[i], host[i] + 1.0f) << "element " << i;

  KILN_CU_CALL(cuStreamDestroy, stream);
  KILN_CU_CALL(cuMemFree, x);
  KILN_CU_CALL(cuMemFree, y);
  KILN_CU_CALL(cuModuleUnload, module);
  KILN_CU_CALL(cuDevicePrimaryCtxRelease, device);
}
