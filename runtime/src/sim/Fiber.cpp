// Fiber stacks and the context switch (Fiber.h).
#include "Fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <new>

#if defined(KILN_SIM_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
// kiln_sim_switch_stack(void **save_sp, void *new_sp): pushes the callee-
// saved registers and the SSE/x87 control words, stores the stack pointer,
// loads the other one and pops its registers. kiln_sim_fiber_start is where
// a new fiber's first switch returns to: entry(arg) from r13(r12).
asm(R"(
  .text
  .globl kiln_sim_switch_stack
  .type kiln_sim_switch_stack,@function
kiln_sim_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kiln_sim_switch_stack, .-kiln_sim_switch_stack

  .globl kiln_sim_fiber_start
  .type kiln_sim_fiber_start,@function
kiln_sim_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size kiln_sim_fiber_start, .-kiln_sim_fiber_start
  .section .note.GNU-stack,"",@progbits
  .text
)");
extern "C" void kiln_sim_switch_stack(void **save_sp, void *new_sp);
extern "C" void kiln_sim_fiber_start();
#endif

namespace kiln::runtime::sim::detail {
namespace {

size_t page_size() {
  static const size_t size = size_t(sysconf(_SC_PAGESIZE));
  return size;
}

FiberStack *map_stack() {
  const size_t guard = page_size();
  const size_t total = guard + kFiberStackBytes;
  void *mapping = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) throw std::bad_alloc();
  mprotect(mapping, guard, PROT_NONE); // overflow faults instead of corrupting the next stack
  auto *s = new FiberStack;
  s->mapping = mapping;
  s->mapping_bytes = total;
  s->bottom = static_cast<char *>(mapping) + guard;
  s->bytes = kFiberStackBytes;
  return s;
}

} // namespace

bool FiberStack::guards(const void *address) const {
  const char *a = static_cast<const char *>(address);
  const char *start = static_cast<const char *>(mapping);
  return a >= start && a < bottom;
}

StackPool::~StackPool() {
  for (FiberStack *s : all_) {
    munmap(s->mapping, s->mapping_bytes);
    delete s;
  }
}

FiberStack *StackPool::take() {
  if (free_.empty()) {
    all_.push_back(map_stack());
    return all_.back();
  }
  FiberStack *s = free_.back();
  free_.pop_back();
#if defined(KILN_SIM_ASAN)
  // The last fiber on it may have been abandoned mid-call (a failure) or
  // died inside the switch: its frames' redzones are still poisoned.
  __asan_unpoison_memory_region(s->bottom, s->bytes);
#endif
  return s;
}

void StackPool::give_back(FiberStack *stack) { free_.push_back(stack); }

const FiberStack *StackPool::guarding(const void *address) const {
  for (const FiberStack *s : all_)
    if (s->guards(address)) return s;
  return nullptr;
}

#if defined(__x86_64__)
void fiber_prepare(FiberContext &context, FiberStack &stack, void (*entry)(void *), void *arg) {
  constexpr size_t kAbiAlignment = 16;
  uintptr_t top = reinterpret_cast<uintptr_t>(stack.bottom + stack.bytes) & ~uintptr_t(kAbiAlignment - 1);
  // The frame kiln_sim_switch_stack pops: control words, r15, r14, r13,
  // r12, rbx, rbp, return address (8 slots: `top` stays 16-byte aligned
  // after the final ret, as a call site expects).
  auto *frame = reinterpret_cast<uint64_t *>(top) - 8;
  uint32_t mxcsr = 0;
  uint16_t fpu_control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpu_control));
  frame[0] = uint64_t(mxcsr) | uint64_t(fpu_control) << 32;
  frame[1] = frame[2] = 0;
  frame[3] = reinterpret_cast<uint64_t>(entry);
  frame[4] = reinterpret_cast<uint64_t>(arg);
  frame[5] = frame[6] = 0;
  frame[7] = reinterpret_cast<uint64_t>(&kiln_sim_fiber_start);
  context.sp = frame;
  context.stack_bottom = stack.bottom;
  context.stack_bytes = stack.bytes;
}
#else
namespace {
// makecontext passes int arguments: the entry and its argument travel in a
// heap pair split into two 32-bit halves.
struct Start {
  void (*entry)(void *);
  void *arg;
};
void start_from_halves(unsigned lo, unsigned hi) {
  auto *start = reinterpret_cast<Start *>(uintptr_t(hi) << 32 | lo);
  Start s = *start;
  delete start;
  s.entry(s.arg);
}
} // namespace

void fiber_prepare(FiberContext &context, FiberStack &stack, void (*entry)(void *), void *arg) {
  getcontext(&context.uc);
  context.uc.uc_stack.ss_sp = stack.bottom;
  context.uc.uc_stack.ss_size = stack.bytes;
  context.uc.uc_link = nullptr;
  auto bits = reinterpret_cast<uintptr_t>(new Start{entry, arg});
  makecontext(&context.uc, reinterpret_cast<void (*)()>(&start_from_halves), 2, unsigned(bits),
              unsigned(uint64_t(bits) >> 32));
  context.stack_bottom = stack.bottom;
  context.stack_bytes = stack.bytes;
}
#endif

void fiber_switch(FiberContext &from, FiberContext &to, bool from_finished) {
#if defined(KILN_SIM_ASAN)
  __sanitizer_start_switch_fiber(from_finished ? nullptr : &from.fake_stack, to.stack_bottom, to.stack_bytes);
#endif
#if defined(__x86_64__)
  kiln_sim_switch_stack(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
#if defined(KILN_SIM_ASAN)
  __sanitizer_finish_switch_fiber(from.fake_stack, nullptr, nullptr);
#endif
}

void fiber_started(FiberContext &scheduler) {
#if defined(KILN_SIM_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &scheduler.stack_bottom, &scheduler.stack_bytes);
#else
  (void)scheduler;
#endif
}

void fiber_landed() {
#if defined(KILN_SIM_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
}

} // namespace kiln::runtime::sim::detail
