// The simulator's fault handling (Faults.cpp). Not installed.
#pragma once

namespace kiln::runtime::sim::detail {

/// Installs the SIGSEGV/SIGBUS/SIGFPE/SIGILL handlers where they are not
/// installed (called at every launch); faults off the simulator's fibers go
/// to the handlers found before.
void install_fault_handlers();

/// An alternate signal stack for the calling OS thread (the handler must
/// not run on a fiber stack that just overflowed).
class AltSignalStack {
public:
  AltSignalStack();
  ~AltSignalStack();
  AltSignalStack(const AltSignalStack &) = delete;
  AltSignalStack &operator=(const AltSignalStack &) = delete;

private:
  static constexpr unsigned long kBytes = 64 * 1024;
  char *memory_;
};

} // namespace kiln::runtime::sim::detail
