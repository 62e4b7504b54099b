// Faults on a simulated thread: SIGSEGV/SIGBUS/SIGFPE/SIGILL raised by a
// kernel on a fiber are caught on the worker's alternate signal stack and
// turned into the thread's failure by jumping back to the block's
// scheduler (siglongjmp); any other fault goes to the previous handler.
#include "BlockRunner.h"
#include "Faults.h"
#include "kiln/runtime/sim/SimMemory.h"

#include <dlfcn.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#if defined(KILN_SIM_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace kiln::runtime::sim::detail {
namespace {

constexpr int kCaughtSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
constexpr int kSignalCount = sizeof(kCaughtSignals) / sizeof(kCaughtSignals[0]);
struct sigaction previous_actions[kSignalCount];

/// x86-64 page-fault error code bit 1: the access was a write.
constexpr unsigned long kPageFaultWriteBit = 2;

void chain_to_previous(int sig, siginfo_t *info, void *context) {
  // A fault this thread already passed on came back (the previous handler
  // returned, or reinstalled ours): take the default action.
  static thread_local bool chained = false;
  if (chained) {
    signal(sig, SIG_DFL);
    if (info->si_code <= 0) raise(sig);
    return;
  }
  chained = true;
  for (int i = 0; i < kSignalCount; ++i) {
    if (kCaughtSignals[i] != sig) continue;
    const struct sigaction &old = previous_actions[i];
    if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction) {
      old.sa_sigaction(sig, info, context);
      return;
    }
    if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
      old.sa_handler(sig);
      return;
    }
    // The default action: restore it and return, so the access faults
    // again; a sent signal (no faulting instruction) is sent again.
    sigaction(sig, &old, nullptr);
    if (info->si_code <= 0) raise(sig);
    return;
  }
}

void on_fault(int sig, siginfo_t *info, void *context) {
  BlockRunner *runner = BlockRunner::on_this_thread();
  if (!runner || !runner->in_fiber()) {
    chain_to_previous(sig, info, context);
    return;
  }
  Fault &f = runner->fault();
  f.signal = sig;
  f.address = reinterpret_cast<uintptr_t>(info->si_addr);
#if defined(__x86_64__)
  const auto *uc = static_cast<const ucontext_t *>(context);
  f.pc = uintptr_t(uc->uc_mcontext.gregs[REG_RIP]);
  f.write = sig == SIGSEGV ? int((uc->uc_mcontext.gregs[REG_ERR] & kPageFaultWriteBit) != 0) : -1;
#endif
#if defined(KILN_SIM_ASAN)
  FiberContext &s = runner->scheduler_context();
  __sanitizer_start_switch_fiber(nullptr, s.stack_bottom, s.stack_bytes);
#endif
  siglongjmp(runner->fault_landing(), 1);
}

std::string hex(uintptr_t v) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

/// "in function f (library+0x1234)" for a program counter.
std::string where(uintptr_t pc) {
  Dl_info info{};
  if (!pc || !dladdr(reinterpret_cast<void *>(pc), &info)) return "";
  std::string text = " in ";
  text += info.dli_sname ? info.dli_sname : "an unnamed function";
  if (info.dli_fname) {
    const char *base = std::strrchr(info.dli_fname, '/');
    text += std::string(" (") + (base ? base + 1 : info.dli_fname) + "+" +
            hex(pc - reinterpret_cast<uintptr_t>(info.dli_fbase)) + ")";
  }
  return text;
}

} // namespace

void install_fault_handlers() {
  // Checked at every launch: a library that installed its own handler after
  // ours (LLVM's crash handlers, a test framework) is chained, not lost.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  for (int i = 0; i < kSignalCount; ++i) {
    struct sigaction current;
    if (sigaction(kCaughtSignals[i], nullptr, &current) != 0) continue;
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &on_fault) continue;
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_sigaction = &on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(kCaughtSignals[i], &action, &previous_actions[i]);
  }
}

AltSignalStack::AltSignalStack() : memory_(new char[kBytes]) {
  stack_t ss{};
  ss.ss_sp = memory_;
  ss.ss_size = kBytes;
  sigaltstack(&ss, nullptr);
}

AltSignalStack::~AltSignalStack() {
  stack_t ss{};
  ss.ss_flags = SS_DISABLE;
  sigaltstack(&ss, nullptr);
  delete[] memory_;
}

std::string BlockRunner::fault_problem() const {
  const Fault &f = fault_;
  const std::string in = where(f.pc);
  if (f.signal == SIGFPE) return "arithmetic exception (integer division by zero or overflow)" + in;
  if (f.signal == SIGILL) return "illegal instruction (a trap)" + in;
  const char *access = f.write == 1 ? "store to " : f.write == 0 ? "load from " : "access to ";
  const auto *a = reinterpret_cast<const char *>(f.address);
  if (a >= smem_end_ && a < smem_mapping_ + smem_mapping_bytes_)
    return "out-of-bounds " + std::string(access) + "dynamic shared memory: " +
           std::to_string(a - reinterpret_cast<const char *>(smem_base_)) + " bytes from its start, the launch gave " +
           std::to_string(spec_->dynamic_shared_bytes) + " bytes" + in;
  if (stacks_.guarding(a))
    return "stack overflow (a simulated thread has a " + std::to_string(kFiberStackBytes / 1024) + " KiB stack)" + in;
  return "invalid " + std::string(access) + hex(f.address) + ": " + describe_address(f.address) + in;
}

} // namespace kiln::runtime::sim::detail
