// kiln/runtime/Stream.h - an ordered queue of work on one device (a CUDA
// stream, IREE's HAL queue).
//
// Work enqueued on one stream runs in order; work on different streams may
// overlap. The CPU backend runs work inline on the calling thread when it is
// enqueued, so a CPU stream is always idle and synchronize() returns at once.
#pragma once

#include "kiln/runtime/Device.h"

namespace kiln::runtime {

class Stream {
public:
  virtual ~Stream() = default;
  /// The device this stream's work runs on.
  virtual Device device() const = 0;
  /// Blocks the calling thread until all work enqueued so far has finished.
  virtual void synchronize() = 0;
};

} // namespace kiln::runtime
