// kiln/runtime/Profiler.h - a process-wide trace of launches, written as
// Chrome trace JSON (chrome://tracing, Perfetto: "X" complete events, times
// in microseconds).
//
// Enable with the environment variable KILN_PROFILE=<path> (written when the
// process exits) or programmatically with start()/stop_and_write(). Each
// compiled kernel, GEMM and copy becomes one event (category "kernel"); the
// frontend adds one event per compiled forward/backward call (category
// "step"). Thread-safe; when disabled, the cost is one relaxed atomic load
// per launch.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::runtime {

class Profiler {
public:
  struct Event {
    std::string name;
    std::string category;
    double start_us;
    double duration_us;
  };

  /// The process-wide profiler (reads KILN_PROFILE on first use).
  static Profiler &instance();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  /// Clears the events and starts recording.
  void start();
  /// Stops recording and writes the Chrome trace to `path`; returns false
  /// (with a message in *error) if the file cannot be written.
  bool stop_and_write(const std::string &path, std::string *error = nullptr);
  /// Microseconds since the profiler was created (the trace's time origin).
  double now_us() const;
  void record(std::string name, std::string category, double start_us, double duration_us);
  std::vector<Event> events() const;

private:
  Profiler();
  std::atomic<bool> enabled_{false};
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::chrono::steady_clock::time_point origin_;
};

}  // namespace kiln::runtime
