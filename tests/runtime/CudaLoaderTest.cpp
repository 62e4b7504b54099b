// kiln-cuda-loader-tests: run-time loading of the CUDA libraries and the
// availability probe. On the development machines there is no libcuda.so.1:
// that this binary starts at all proves nothing CUDA is linked (the CTest
// cuda_loader.no_cuda_dt_needed checks the ELF too). A fake libcuda built
// beside the test (fake_cuda/FakeCudaDriver.cpp) drives every other reason.
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <gtest/gtest.h>

#include "Check.h"
#include "DriverLibrary.h"
#include "Libraries.h"
#include "kiln/runtime/cuda/Availability.h"
#include "kiln/runtime/cuda/CudaError.h"

namespace cuda = kiln::runtime::cuda;

namespace {

/// Whether the real driver exists here (the H200 machine), so the
/// "no driver" expectations would be wrong.
bool real_driver_present() {
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!handle)
    handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle)
    dlclose(handle);
  return handle != nullptr;
}

/// Sets the fake driver's environment for one test, restores it after.
class FakeDriver : public ::testing::Test {
protected:
  void TearDown() override {
    for (const char *name :
         {"KILN_FAKE_CUDA_INIT", "KILN_FAKE_CUDA_DRIVER_VERSION", "KILN_FAKE_CUDA_DEVICES", "KILN_FAKE_CUDA_MISSING"})
      unsetenv(name);
  }
  static cuda::AvailabilityReport probe(const char *library = KILN_FAKE_CUDA_DRIVER) {
    cuda::AvailabilityProbe probe;
    probe.driver_library = library;
    return cuda::probe_availability(probe);
  }
};

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

} // namespace

TEST(CudaAvailability, ThisMachineHasNoDriverAndSaysSo) {
  if (real_driver_present())
    GTEST_SKIP() << "skipped: libcuda.so.1 exists on this machine (" << cuda::availability_reason() << ")";
  EXPECT_FALSE(cuda::is_available());
  EXPECT_EQ(cuda::device_count(), 0);
  EXPECT_EQ(cuda::availability().status, cuda::CudaStatus::NoDriver);
  std::string reason = cuda::availability_reason();
  EXPECT_TRUE(contains(reason, "CUDA is not available: cannot load libcuda.so.1")) << reason;
  EXPECT_TRUE(contains(reason, "NVIDIA driver is not installed")) << reason;
}

TEST(CudaAvailability, IsComputedOnceAndIsStable) {
  const cuda::AvailabilityReport *first = &cuda::availability();
  EXPECT_EQ(first, &cuda::availability());
  EXPECT_EQ(cuda::availability_reason(), first->reason);
}

TEST(CudaAvailability, DriverTableThrowsCudaErrorNamingTheLibrary) {
  if (real_driver_present())
    GTEST_SKIP() << "skipped: libcuda.so.1 exists on this machine";
  try {
    cuda::driver();
    FAIL() << "driver() returned without a driver";
  } catch (const cuda::CudaError &error) {
    EXPECT_EQ(error.library(), "libcuda.so.1");
    EXPECT_TRUE(contains(error.what(), "cannot load libcuda.so.1")) << error.what();
  }
}

TEST_F(FakeDriver, WorkingDriverWithTwoDevicesIsAvailable) {
  setenv("KILN_FAKE_CUDA_DEVICES", "2", 1);
  cuda::AvailabilityReport report = probe();
  ASSERT_TRUE(report.available()) << report.reason;
  EXPECT_EQ(report.device_count, 2);
  EXPECT_EQ(report.driver_version, 13000);
  EXPECT_TRUE(contains(report.reason, "CUDA is available: driver 13.0, 2 devices, NVRTC 13.")) << report.reason;
}

TEST_F(FakeDriver, CuInitStubLibraryIsAStubDriver) {
  setenv("KILN_FAKE_CUDA_INIT", "34", 1);
  cuda::AvailabilityReport report = probe();
  EXPECT_EQ(report.status, cuda::CudaStatus::StubDriver);
  EXPECT_EQ(report.init_result, 34);
  EXPECT_TRUE(contains(report.reason, "stub driver (cuInit returned CUDA_ERROR_STUB_LIBRARY (34))")) << report.reason;
  EXPECT_TRUE(contains(report.reason, "LD_LIBRARY_PATH")) << report.reason;
}

TEST_F(FakeDriver, CuInitNoDeviceIsNoDevice) {
  setenv("KILN_FAKE_CUDA_INIT", "100", 1);
  cuda::AvailabilityReport report = probe();
  EXPECT_EQ(report.status, cuda::CudaStatus::NoDevice);
  EXPECT_TRUE(contains(report.reason, "no CUDA device (cuInit returned CUDA_ERROR_NO_DEVICE (100))")) << report.reason;
}

TEST_F(FakeDriver, ZeroDevicesIsNoDevice) {
  setenv("KILN_FAKE_CUDA_DEVICES", "0", 1);
  cuda::AvailabilityReport report = probe();
  EXPECT_EQ(report.status, cuda::CudaStatus::NoDevice);
  EXPECT_TRUE(contains(report.reason, "reports 0 devices")) << report.reason;
}

TEST_F(FakeDriver, OtherCuInitErrorsAreNamed) {
  setenv("KILN_FAKE_CUDA_INIT", "999", 1);
  cuda::AvailabilityReport report = probe();
  EXPECT_EQ(report.status, cuda::CudaStatus::DriverInitFailed);
  EXPECT_TRUE(contains(report.reason, "cuInit returned CUDA_ERROR_UNKNOWN (999): unknown error")) << report.reason;
}

TEST_F(FakeDriver, DriverOlderThanNvrtcIsTooOld) {
  setenv("KILN_FAKE_CUDA_DRIVER_VERSION", "12020", 1);
  cuda::AvailabilityReport report = probe();
  EXPECT_EQ(report.status, cuda::CudaStatus::DriverTooOld);
  EXPECT_EQ(report.required_driver_version, 13000);
  EXPECT_TRUE(contains(report.reason, "supports CUDA 12.2 (cuDriverGetVersion 12020)")) << report.reason;
  EXPECT_TRUE(contains(report.reason, "need a CUDA 13.0 driver or newer")) << report.reason;
}

TEST_F(FakeDriver, MissingEntryPointAtThePinnedVersionIsNamed) {
  setenv("KILN_FAKE_CUDA_MISSING", "cuMemAlloc", 1);
  cuda::AvailabilityReport report = probe();
  EXPECT_EQ(report.status, cuda::CudaStatus::DriverTooOld);
  EXPECT_TRUE(contains(report.reason, "lacks cuMemAlloc at CUDA API version 12000")) << report.reason;
}

TEST_F(FakeDriver, PreCuda12DriverIsTooOld) {
  cuda::AvailabilityReport report = probe(KILN_FAKE_CUDA_DRIVER_PRE_12);
  EXPECT_EQ(report.status, cuda::CudaStatus::DriverTooOld);
  EXPECT_TRUE(contains(report.reason, "older than CUDA 12.0 (it has no cuGetProcAddress_v2)")) << report.reason;
}

TEST_F(FakeDriver, MissingNvrtcIsNamed) {
  cuda::AvailabilityProbe probe;
  probe.driver_library = KILN_FAKE_CUDA_DRIVER;
  probe.nvrtc_libraries = {"libnvrtc-kiln-missing.so.13"};
  cuda::AvailabilityReport report = cuda::probe_availability(probe);
  EXPECT_EQ(report.status, cuda::CudaStatus::NoNvrtc);
  EXPECT_TRUE(contains(report.reason, "cannot load libnvrtc-kiln-missing.so.13")) << report.reason;
  EXPECT_TRUE(contains(report.reason, "NVRTC from the CUDA 13 toolkit")) << report.reason;
}

TEST(CudaAvailability, ToolkitStubDriverIsRecognized) {
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (!std::filesystem::exists(stub))
    GTEST_SKIP() << "skipped: no " << stub << " on this machine";
  cuda::AvailabilityProbe probe;
  probe.driver_library = stub;
  cuda::AvailabilityReport report = cuda::probe_availability(probe);
  EXPECT_EQ(report.status, cuda::CudaStatus::StubDriver) << report.reason;
  EXPECT_TRUE(contains(report.reason, "CUDA_ERROR_STUB_LIBRARY")) << report.reason;
}

// The other libraries load by soname with every entry point of their table.
TEST(CudaLibraries, ToolkitLibrariesLoadWithTheirVersions) {
  const auto &nvrtc = cuda::nvrtc_library();
  if (!nvrtc.loaded())
    GTEST_SKIP() << "skipped: " << nvrtc.error;
  int major = 0, minor = 0;
  ASSERT_EQ(nvrtc.symbols.nvrtcVersion(&major, &minor), cuda::NVRTC_SUCCESS);
  EXPECT_EQ(major, 13);
  // cuBLASLt and cuDNN encode major * 10000 + minor * 100 + patch; NCCL 2.9+ too.
  const auto &cublaslt = cuda::cublaslt_library();
  ASSERT_TRUE(cublaslt.loaded()) << cublaslt.error;
  EXPECT_EQ(cublaslt.symbols.cublasLtGetVersion() / 10000, 13u);
  const auto &cudnn = cuda::cudnn_library();
  ASSERT_TRUE(cudnn.loaded()) << cudnn.error;
  EXPECT_EQ(cudnn.symbols.cudnnGetVersion() / 10000, 9u);
  const auto &nccl = cuda::nccl_library();
  ASSERT_TRUE(nccl.loaded()) << nccl.error;
  int nccl_version = 0;
  ASSERT_EQ(nccl.symbols.ncclGetVersion(&nccl_version), cuda::ncclSuccess);
  EXPECT_EQ(nccl_version / 10000, 2);
}

TEST(CudaLibraries, MissingLibraryReportsEveryCandidate) {
  cuda::LoadedLibrary<cuda::NvrtcSymbols> missing =
      cuda::load_nvrtc_library({"libkiln-absent-a.so", "libkiln-absent-b.so"});
  EXPECT_FALSE(missing.loaded());
  EXPECT_TRUE(contains(missing.error, "cannot load libkiln-absent-a.so")) << missing.error;
  EXPECT_TRUE(contains(missing.error, "libkiln-absent-b.so: cannot open shared object file")) << missing.error;
}

TEST(CudaLibraries, ToolkitCandidatesSearchCudaHomeThenUsrLocal) {
  setenv("CUDA_HOME", "/opt/kiln-cuda", 1);
  std::vector<std::string> candidates = cuda::toolkit_library_candidates("libnvrtc.so.13");
  unsetenv("CUDA_HOME");
  std::vector<std::string> expected = {"libnvrtc.so.13", "/opt/kiln-cuda/lib64/libnvrtc.so.13",
                                       "/usr/local/cuda/lib64/libnvrtc.so.13"};
  EXPECT_EQ(candidates, expected);
}

// Error messages: API name, status name, status text.
TEST(CudaErrors, DriverStatusNamesTheApiAndTheError) {
  try {
    cuda::check_driver(cuda::CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc");
    FAIL();
  } catch (const cuda::CudaError &error) {
    EXPECT_STREQ(error.what(), "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
    EXPECT_EQ(error.api(), "cuMemAlloc");
    EXPECT_EQ(error.code(), 2);
  }
  EXPECT_NO_THROW(cuda::check_driver(cuda::CUDA_SUCCESS, "cuInit"));
  EXPECT_EQ(cuda::driver_error_name(12345), real_driver_present() ? cuda::driver_error_name(12345) : "CUresult 12345");
}

TEST(CudaErrors, LibraryStatusesUseTheLibrarysOwnNames) {
  if (!cuda::nvrtc_library().loaded() || !cuda::cublaslt_library().loaded())
    GTEST_SKIP() << "skipped: " << cuda::nvrtc_library().error << cuda::cublaslt_library().error;
  auto message = [](auto check, int code, const char *api) {
    try {
      check(code, api);
    } catch (const cuda::CudaError &error) {
      return std::string(error.what());
    }
    return std::string("no throw");
  };
  EXPECT_EQ(message(cuda::check_nvrtc, cuda::NVRTC_ERROR_COMPILATION, "nvrtcCompileProgram"),
            "nvrtcCompileProgram failed: NVRTC_ERROR_COMPILATION");
  EXPECT_TRUE(contains(message(cuda::check_cublaslt, cuda::CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtCreate"),
                       "cublasLtCreate failed: CUBLAS_STATUS_NOT_INITIALIZED"));
  EXPECT_TRUE(
      contains(message(cuda::check_cudnn, 1001, "cudnnCreate"), "cudnnCreate failed: CUDNN_STATUS_NOT_INITIALIZED"));
  EXPECT_TRUE(contains(message(cuda::check_nccl, 1, "ncclCommInitRank"), "ncclCommInitRank failed: "));
}
