// Per-thread current stream of each CUDA device (CurrentStream.h).
#include "kiln/runtime/cuda/CurrentStream.h"

#include <array>
#include <stdexcept>
#include <string>

namespace kiln::runtime::cuda {
namespace {

thread_local std::array<StreamHandle, kMaxDevices> t_current_streams{}; // all kDefaultStream

void check_device(const char *what, int device) {
  if (device < 0 || device >= kMaxDevices)
    throw std::out_of_range(std::string(what) + ": device index " + std::to_string(device) + " is outside [0, " +
                            std::to_string(kMaxDevices) + ")");
}

} // namespace

StreamHandle current_stream(int device) {
  check_device("current_stream", device);
  return t_current_streams[static_cast<size_t>(device)];
}

StreamHandle set_current_stream(int device, StreamHandle stream) {
  check_device("set_current_stream", device);
  StreamHandle previous = t_current_streams[static_cast<size_t>(device)];
  t_current_streams[static_cast<size_t>(device)] = stream;
  return previous;
}

} // namespace kiln::runtime::cuda
