// Fibers for the simulator's threads: 64 KiB stacks with a guard page and
// a small hand-written context switch (x86-64 System V; ucontext elsewhere),
// annotated for ASan when the process runs with it (TOOLCHAIN.md: glibc's
// swapcontext makes ASan report false positives without annotations).
// Not installed.
#pragma once

#include <cstddef>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define KILN_SIM_ASAN 1
#endif
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace kiln::runtime::sim::detail {

/// A fiber's stack: generated kernels need little (TOOLCHAIN.md), so 1024
/// threads in flight are 64 MiB per block; pages are touched lazily.
inline constexpr size_t kFiberStackBytes = 64 * 1024;

struct FiberStack {
  void *mapping = nullptr; ///< guard page + stack
  size_t mapping_bytes = 0;
  char *bottom = nullptr; ///< lowest usable byte (just above the guard page)
  size_t bytes = 0;
  /// True when `address` is in the guard page (a stack overflow).
  bool guards(const void *address) const;
};

/// A saved execution context: a fiber's, or the scheduler's own.
struct FiberContext {
#if defined(__x86_64__)
  void *sp = nullptr;
#else
  ucontext_t uc;
#endif
  const void *stack_bottom = nullptr; ///< for ASan's switch annotations
  size_t stack_bytes = 0;
  void *fake_stack = nullptr;
};

/// Stacks kept for reuse by one OS thread (never freed while it lives).
class StackPool {
public:
  ~StackPool();
  FiberStack *take();
  void give_back(FiberStack *stack);
  /// The stack whose guard page holds `address`, or null.
  const FiberStack *guarding(const void *address) const;

private:
  std::vector<FiberStack *> all_, free_;
};

/// Makes `context` start `entry(arg)` on `stack` when first switched to.
/// `entry` must never return: it switches away for good instead.
void fiber_prepare(FiberContext &context, FiberStack &stack, void (*entry)(void *), void *arg);
/// Saves the running context in `from` and resumes `to`. `from_finished`:
/// `from` will never be resumed (tells ASan its stack is dead).
void fiber_switch(FiberContext &from, FiberContext &to, bool from_finished = false);
/// First thing a new fiber's entry does: completes the switch into it
/// (ASan) and records the stack it came from in `scheduler`.
void fiber_started(FiberContext &scheduler);
/// The scheduler's first step after the signal handler jumped back to it
/// from a faulting fiber (ASan: completes the switch the handler started).
void fiber_landed();

} // namespace kiln::runtime::sim::detail
