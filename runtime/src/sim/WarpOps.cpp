// Warp operations (shuffles, ballot, __syncwarp) and the analysis of a
// block whose live threads are all blocked (BlockRunner.h).
#include "BlockRunner.h"

#include <cstdio>

namespace kiln::runtime::sim::detail {
namespace {

const char *warp_op_name(int kind) {
  switch (kind) {
  case KILN_SIM_SHFL_IDX:
    return "__shfl_sync";
  case KILN_SIM_SHFL_UP:
    return "__shfl_up_sync";
  case KILN_SIM_SHFL_DOWN:
    return "__shfl_down_sync";
  case KILN_SIM_SHFL_XOR:
    return "__shfl_xor_sync";
  case KILN_SIM_BALLOT:
    return "__ballot_sync";
  default:
    return "__syncwarp";
  }
}

std::string hex_mask(unsigned mask) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", mask);
  return text;
}

bool is_shuffle(int kind) { return kind <= KILN_SIM_SHFL_XOR; }

bool same_call(const KilnSimWarpOp &a, const KilnSimWarpOp &b) { return a.kind == b.kind && a.line == b.line; }

std::string call_text(const KilnSimWarpOp &op) {
  return std::string(warp_op_name(op.kind)) + " on line " + std::to_string(op.line);
}

/// The lane a shuffle reads for `lane` (CUDA C Programming Guide, "Warp
/// Shuffle Functions": within segments of `width` lanes; up/down/xor past
/// the segment return the lane's own value).
uint32_t shuffle_source(const KilnSimWarpOp &op, uint32_t lane) {
  const uint32_t width = uint32_t(op.width);
  const uint32_t segment = lane / width * width;
  const int arg = op.lane_arg;
  switch (op.kind) {
  case KILN_SIM_SHFL_IDX:
    return segment + (uint32_t(arg) & (width - 1));
  case KILN_SIM_SHFL_UP:
    return arg >= 0 && lane >= segment + uint32_t(arg) ? lane - uint32_t(arg) : lane;
  case KILN_SIM_SHFL_DOWN:
    return arg >= 0 && lane + uint32_t(arg) < segment + width ? lane + uint32_t(arg) : lane;
  default: {
    const uint32_t source = lane ^ uint32_t(arg);
    return source < segment + width && source < kWarpSize ? source : lane;
  }
  }
}

} // namespace

bool BlockRunner::check_warp_op(const KilnSimWarpOp &op) {
  const uint32_t lane = current_->linear % kWarpSize;
  const uint32_t base = current_->linear - lane;
  const std::string call = call_text(op);
  if (!(op.mask >> lane & 1u)) {
    fail(call + ": the calling lane " + std::to_string(lane) + " is not in its mask " + hex_mask(op.mask));
    return false;
  }
  for (uint32_t l = 0; l < kWarpSize; ++l)
    if ((op.mask >> l & 1u) && base + l >= threads_.size()) {
      fail(call + ": mask " + hex_mask(op.mask) + " names lane " + std::to_string(l) +
           ", which does not exist (the block has " + std::to_string(threads_.size()) + " threads)");
      return false;
    }
  const bool power_of_two = op.width > 0 && (op.width & (op.width - 1)) == 0;
  if (is_shuffle(op.kind) && (!power_of_two || op.width > int(kWarpSize))) {
    fail(call + ": width " + std::to_string(op.width) + " is not a power of two in [1, 32]");
    return false;
  }
  return true;
}

void BlockRunner::warp_op(KilnSimWarpOp *op) {
  if (!check_warp_op(*op)) abandon();
  SimThread &t = *current_;
  t.state = ThreadState::AtWarpOp;
  t.op = op;
  if (!try_complete_warp_op(*op, t.linear / kWarpSize * kWarpSize)) abandon();
  switch_to_scheduler();
}

bool BlockRunner::try_complete_warp_op(const KilnSimWarpOp &op, uint32_t base) {
  for (uint32_t l = 0; l < kWarpSize; ++l) {
    if (!(op.mask >> l & 1u)) continue;
    const SimThread &other = threads_[base + l];
    if (other.state != ThreadState::AtWarpOp || !same_call(*other.op, op)) return true; // not there yet
    if (other.op->mask != op.mask || other.op->width != op.width) {
      fail(call_text(op) + ": lanes disagree: mask " + hex_mask(op.mask) + " width " + std::to_string(op.width) +
           " here, mask " + hex_mask(other.op->mask) + " width " + std::to_string(other.op->width) + " on lane " +
           std::to_string(l));
      return false;
    }
  }
  if (is_shuffle(op.kind) && !deliver_shuffle(base, op.mask)) return false;
  unsigned ballot = 0;
  for (uint32_t l = 0; l < kWarpSize; ++l)
    if ((op.mask >> l & 1u) && threads_[base + l].op->value != 0) ballot |= 1u << l;
  for (uint32_t l = 0; l < kWarpSize; ++l) {
    if (!(op.mask >> l & 1u)) continue;
    SimThread &other = threads_[base + l];
    if (op.kind == KILN_SIM_BALLOT) other.op->result = ballot;
    other.op = nullptr;
    make_ready(other);
  }
  progress();
  return true;
}

bool BlockRunner::deliver_shuffle(uint32_t base, unsigned mask) {
  // Read every source before writing any result (the values are the lanes'
  // operands; results go to separate fields, so order does not matter).
  for (uint32_t l = 0; l < kWarpSize; ++l) {
    if (!(mask >> l & 1u)) continue;
    KilnSimWarpOp &op = *threads_[base + l].op;
    const uint32_t source = shuffle_source(op, l);
    if (!(mask >> source & 1u)) {
      fail_for(base + l, call_text(op) + ": lane " + std::to_string(l) + " reads lane " + std::to_string(source) +
                             ", which is not in the mask " + hex_mask(mask));
      return false;
    }
    op.result = threads_[base + source].op->value;
  }
  return true;
}

// ---- all live threads blocked ----------------------------------------------

std::string BlockRunner::describe_wait(const SimThread &t) const {
  std::string who = "thread " + to_string(thread_coordinates(t.linear, spec_->block));
  if (t.state == ThreadState::AtBarrier) return who + " at __syncthreads on line " + std::to_string(t.barrier_line);
  if (t.state == ThreadState::AtWarpOp) return who + " at " + call_text(*t.op) + " (mask " + hex_mask(t.op->mask) + ")";
  return who;
}

std::optional<Failure> BlockRunner::warp_op_blocked(const SimThread &t) const {
  const uint32_t base = t.linear / kWarpSize * kWarpSize;
  for (uint32_t l = 0; l < kWarpSize; ++l) {
    if (!(t.op->mask >> l & 1u)) continue;
    const SimThread &other = threads_[base + l];
    if (other.state == ThreadState::Exited)
      return Failure{t.linear, call_text(*t.op) + " with mask " + hex_mask(t.op->mask) + ": lane " +
                                   std::to_string(l) + " (thread " +
                                   to_string(thread_coordinates(other.linear, spec_->block)) +
                                   ") named in the mask has exited without taking part"};
    if (other.state == ThreadState::AtWarpOp && !same_call(*other.op, *t.op))
      return Failure{t.linear, call_text(*t.op) + " with mask " + hex_mask(t.op->mask) + ": lane " +
                                   std::to_string(l) + " is at " + call_text(*other.op) +
                                   " instead (every lane in the mask must execute the same call)"};
  }
  return std::nullopt;
}

Failure BlockRunner::analyze_blocked() const {
  // 1. A warp operation waiting for a lane that exited or is elsewhere.
  for (const SimThread &t : threads_)
    if (t.state == ThreadState::AtWarpOp)
      if (auto f = warp_op_blocked(t)) return *f;
  // 2. A barrier some thread will never reach (it exited), or barriers at
  //    different call sites.
  const SimThread *waiting = nullptr;
  for (const SimThread &t : threads_)
    if (t.state == ThreadState::AtBarrier && !waiting) waiting = &t;
  if (waiting) {
    for (const SimThread &t : threads_)
      if (t.state == ThreadState::Exited)
        return Failure{t.linear, "exited without reaching the __syncthreads on line " +
                                     std::to_string(waiting->barrier_line) + " where " + describe_wait(*waiting) +
                                     " waits (every thread of the block must reach every __syncthreads)"};
    for (const SimThread &t : threads_)
      if (t.state == ThreadState::AtBarrier && t.barrier_line != waiting->barrier_line)
        return Failure{t.linear, "waits at the __syncthreads on line " + std::to_string(t.barrier_line) + " while " +
                                     describe_wait(*waiting) + " (every thread must reach the same barrier)"};
  }
  // 3. Otherwise threads wait on each other: a deadlock.
  std::string waits;
  const SimThread *first = nullptr;
  int listed = 0;
  constexpr int kListedWaits = 4; // enough to see the cycle
  for (const SimThread &t : threads_) {
    if (t.state == ThreadState::Exited) continue;
    if (!first) first = &t;
    if (listed++ < kListedWaits) waits += (waits.empty() ? "" : "; ") + describe_wait(t);
  }
  return Failure{first ? first->linear : 0,
                 "deadlock: every live thread of the block is blocked: " + waits + (listed > kListedWaits ? "; ..." : "")};
}

} // namespace kiln::runtime::sim::detail
