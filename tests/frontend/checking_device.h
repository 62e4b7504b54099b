// checking_device.h - the checking PrivateUse1 device of tests/support
// (CheckingBackend.h: poisoned host memory, counted launches and copies) with
// the CPU eager kernels registered for it, so eager ops run on it.
//
//   auto dev = testing::install_checking_device();   // once per process
//   Tensor x = ones({2, 3}, kFloat32, testing::kChecking);
#pragma once

#include <memory>

#include "CheckingBackend.h"
#include "ops/dispatch.h"

namespace kiln::testing {

constexpr Device kChecking{DeviceType::PrivateUse1, 0};

/// Registers a CheckingBackend for PrivateUse1 (once per process) and the CPU
/// kernels for it (again on every call: a test may clear them); returns it.
inline std::shared_ptr<CheckingBackend> install_checking_device() {
  static std::shared_ptr<CheckingBackend> backend = install_checking_backend();
  dispatch::register_cpu_kernels_for(DeviceType::PrivateUse1);
  return backend;
}

}  // namespace kiln::testing
