// kiln/runtime/MemoryPlan.h - the one static memory planner: where every
// value of a compiled function lives during a run.
//
// Used by LaunchExecutable::Builder::finish (the plan a run follows) and by
// kiln-remat's peak estimate (passes/lib/Remat.cpp, replayArena), so the
// estimate cannot drift from the plan. Header-only types plus one function;
// the library (KilnMemoryPlan) depends on nothing, so passes/ links it
// without oneDNN or OpenMP.
//
//   PlanProblem p;
//   p.slots = {PlanSlot::input(64), PlanSlot::produced(256, 0), PlanSlot::produced(256, 1)};
//   p.launches = {{{0}, {1}, {}}, {{1}, {2}, {}}};  // %1 = k0(%0); %2 = k1(%1)
//   p.outputs = {2};
//   MemoryPlan plan = plan_memory(p);  // %2 owned; %1 in %2's pool at 0; arena 0 B
//
// The rules, in the order plan_memory applies them:
//   1. escapes: function results and every slot a result is a view of get
//      their own buffer per run (SlotStorage::Owned): results outlive it;
//   2. liveness: a slot is live from its defining launch to the last launch
//      that reads it or any view of it (a view keeps its base alive);
//   3. pools (memory allocated anyway, lent to intermediates first): a
//      result's buffer before the launch that writes it (results are
//      allocated when a run starts); in the donating plan also a donatable
//      input's buffer after its last read (Inductor's and XLA's reuse of
//      dead inputs and not-yet-written outputs);
//   4. in place: a launch's InPlace pairs are taken when, for every pair,
//      the operand (through row-major views of the result's bytes) is a
//      non-escaping arena slot (or, donating plan, a donated input) whose
//      memory dies at that launch and that no other operand reads; the
//      result then shares the operand's placement (all pairs or none: the
//      kernel has one branch for all pairs aliased; XLA's
//      CanShareOperandBufferWithUser);
//   5. placement: slots by decreasing size (ties: earlier definition
//      first), each into the smallest gap left by already-placed slots
//      whose live ranges overlap, in a pool whose free window holds its
//      live range (pools first: they cost nothing), else in the arena
//      (TFLite's greedy-by-size planner). Arena offsets are 64-byte aligned.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::runtime {

/// A kernel's in-place pair (LaunchExecutable::Builder::addKernel): result
/// `result` may be written over operand `operand` (indices into the
/// launch's operand and result lists).
struct InPlace {
  int operand = -1;
  int result = -1;
};

/// Where a slot's memory comes from in the plan.
enum class SlotStorage : int8_t {
  Input,    ///< bound to a function input at run time
  View,     ///< aliases its base slot (no memory of its own)
  Arena,    ///< an offset in the per-run arena, or in a pool
  Owned,    ///< its own Buffer per run (escapes the function)
  Constant, ///< a buffer built with the executable (never planned)
};

/// The memory plan of one slot (for runs, tests, logs and kiln::explain).
struct SlotPlan {
  SlotStorage storage = SlotStorage::Input;
  int64_t nbytes = 0;  ///< bytes of the slot's own memory (0 for views, inputs, constants)
  /// Arena slots only: bytes from the start of the memory the slot lives
  /// in, the arena (pool == -1) or the buffer of slot `pool`.
  int64_t offset = -1;
  /// Arena slots only: -1 = the arena; else the slot whose buffer lends the
  /// memory (an Owned result not written yet, or a donated input no longer
  /// read).
  int pool = -1;
  int base = -1;        ///< the slot this one is a view of (-1 if none)
  int def = -1;         ///< index of the defining launch (-1 for inputs and constants)
  int last_use = -1;    ///< last launch reading it or a view of it
  bool escapes = false; ///< a result, or aliased by a result
};

/// One value of the function to plan.
struct PlanSlot {
  /// Input, View, Arena (produced by a launch; becomes Owned when it
  /// escapes) or Constant. An Arena slot with a base (a reshape copied at
  /// run time) gets memory and keeps its base alive.
  SlotStorage storage = SlotStorage::Arena;
  int64_t bytes = 0;      ///< bytes of the slot's type (views included)
  int def = -1;           ///< defining launch (-1: inputs, constants)
  int base = -1;          ///< the slot it views (-1 if none)
  bool row_major = true;  ///< its strides are the row-major ones of its sizes (in-place rule)
  bool donatable = false; ///< inputs only: the donating plan may reuse its buffer after its last read

  static PlanSlot input(int64_t bytes, bool donatable = false) {
    return PlanSlot{SlotStorage::Input, bytes, -1, -1, true, donatable};
  }
  static PlanSlot produced(int64_t bytes, int def) { return PlanSlot{SlotStorage::Arena, bytes, def, -1, true, false}; }
  static PlanSlot view(int64_t bytes, int def, int base, bool row_major) {
    return PlanSlot{SlotStorage::View, bytes, def, base, row_major, false};
  }
};

/// One launch: the slots it reads and defines, and its in-place pairs
/// (kernels only; empty for GEMMs, views, copies).
struct PlanLaunch {
  std::vector<int> operands;
  std::vector<int> results;
  std::vector<InPlace> in_place;
};

/// A function: slots (inputs first, in argument order), launches in
/// program order, and the result slots (may repeat, may be inputs).
struct PlanProblem {
  std::vector<PlanSlot> slots;
  std::vector<PlanLaunch> launches;
  std::vector<int> outputs;
};

/// Both plans of a function: the plain one (run()) and the donating one
/// (run_donating(): donatable inputs lend their buffers after their last
/// read). Same storage classes in both; pools and offsets may differ.
struct MemoryPlan {
  std::vector<SlotPlan> slots;
  std::vector<SlotPlan> donating_slots;
  int64_t arena_bytes = 0;          ///< the plain plan's arena (its planned peak)
  int64_t donating_arena_bytes = 0; ///< the donating plan's arena (<= arena_bytes)
  int num_in_place = 0;             ///< results written over an operand, plain plan
  int num_in_place_donating = 0;    ///< the same, donating plan
};

/// Alignment of every arena offset and slot size (one cache line, one
/// AVX-512 vector; the CPU allocator's alignment).
constexpr int64_t kArenaAlignment = 64;

/// Bytes a slot of `nbytes` takes in the arena: rounded up to
/// kArenaAlignment, at least one alignment unit.
int64_t arena_slot_bytes(int64_t nbytes);

/// Plans `problem` (rules above). Slot ids must be valid and launch-ordered
/// (a slot's def precedes every launch reading it, a view is created after
/// its base); callers (the Builder, replayArena) guarantee it.
MemoryPlan plan_memory(const PlanProblem &problem);

} // namespace kiln::runtime
