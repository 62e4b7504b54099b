// Helpers shared by the simulator tests: device arrays from sim::allocate
// and a kernel from a source string.
#pragma once

#include "kiln/runtime/sim/Grid.h"
#include "kiln/runtime/sim/HostModule.h"
#include "kiln/runtime/sim/SimMemory.h"

#include <cstring>
#include <string>
#include <vector>

namespace kiln::runtime::sim::test {

/// `n` elements of T in simulator memory (zeroed), freed at scope exit.
template <class T> class DeviceArray {
public:
  explicit DeviceArray(size_t n, const std::string &label = "")
      : n_(n), data_(static_cast<T *>(allocate(n * sizeof(T), label))) {}
  ~DeviceArray() { deallocate(data_); }
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;
  T *data() const { return data_; }
  T &operator[](size_t i) const { return data_[i]; }
  size_t size() const { return n_; }
  std::vector<T> to_vector() const { return std::vector<T>(data_, data_ + n_); }

private:
  size_t n_;
  T *data_;
};

inline HostKernel kernel_from(const std::string &source, const std::string &name) {
  return load_module(source)->kernel(name);
}

/// Runs `body` expecting a KernelError; returns its message ("" if none).
template <class F> std::string kernel_error_of(F &&body) {
  try {
    body();
  } catch (const KernelError &e) {
    return e.what();
  }
  return "";
}

} // namespace kiln::runtime::sim::test
