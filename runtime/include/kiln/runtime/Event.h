// kiln/runtime/Event.h - a point in a stream's work (cudaEvent_t): record it,
// wait for it, ask whether it passed, time the work between two events.
//
// CPU: streams run work inline, so a recorded event has always completed;
// it keeps the time it was recorded at.
#pragma once

#include "kiln/runtime/Stream.h"

namespace kiln::runtime {

class Event {
public:
  virtual ~Event() = default;
  /// Marks the point after all work enqueued on `stream` so far.
  virtual void record(Stream &stream) = 0;
  /// Makes work enqueued on `stream` after this call wait for the recorded
  /// point (the host does not block).
  virtual void wait(Stream &stream) = 0;
  /// Blocks the calling thread until the recorded work has finished (at
  /// once when never recorded).
  virtual void synchronize() = 0;
  /// True when the recorded work has finished, or nothing was recorded.
  virtual bool query() const = 0;
  /// Seconds from `start`'s recorded point to this one's; both must have
  /// been recorded and have finished (else 0).
  virtual double elapsed_seconds(const Event &start) const = 0;
};

} // namespace kiln::runtime
