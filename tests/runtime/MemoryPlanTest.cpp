// The memory planner (plan_memory) on small hand-made functions; expected
// offsets worked out by hand in the comments. Slot sizes are multiples of
// kArenaAlignment (64) unless said otherwise.
#include <gtest/gtest.h>

#include "kiln/runtime/MemoryPlan.h"

using namespace kiln::runtime;

namespace {

/// Adds launch `operands` -> one result of `bytes`; returns the result slot.
int kernel(PlanProblem &p, std::vector<int> operands, int64_t bytes, std::vector<InPlace> in_place = {}) {
  const int def = static_cast<int>(p.launches.size());
  const int slot = static_cast<int>(p.slots.size());
  p.slots.push_back(PlanSlot::produced(bytes, def));
  p.launches.push_back(PlanLaunch{std::move(operands), {slot}, std::move(in_place)});
  return slot;
}

int input(PlanProblem &p, int64_t bytes, bool donatable = false) {
  p.slots.push_back(PlanSlot::input(bytes, donatable));
  return static_cast<int>(p.slots.size()) - 1;
}

} // namespace

TEST(runtime_MemoryPlan, GreedyBySizeReusesGapsOfDeadSlots) {
  // %1 = k(%0) 1000 B   live [0, 1]   aligned 1024
  // %2 = k(%1)  200 B   live [1, 2]   aligned 256
  // %3 = k(%2) 1000 B   live [2, 3]   aligned 1024
  // %4 = k(%3)   64 B   result (owned; its 64 B pool holds none of them)
  // Biggest first (ties: earlier def): %1 @0; %3 does not overlap %1 -> @0;
  // %2 overlaps both, whose bytes are [0, 1024) -> @1024. Arena 1024 + 256.
  PlanProblem p;
  int x = input(p, 64);
  int a = kernel(p, {x}, 1000), b = kernel(p, {a}, 200), c = kernel(p, {b}, 1000), d = kernel(p, {c}, 64);
  p.outputs = {d};
  MemoryPlan plan = plan_memory(p);
  EXPECT_EQ(plan.slots[a].offset, 0);
  EXPECT_EQ(plan.slots[c].offset, 0);
  EXPECT_EQ(plan.slots[b].offset, 1024);
  EXPECT_EQ(plan.arena_bytes, 1280);
  EXPECT_EQ(plan.slots[d].storage, SlotStorage::Owned);
  EXPECT_EQ(plan.slots[a].last_use, 1);
  EXPECT_EQ(plan.slots[a].nbytes, 1000);
  EXPECT_EQ(arena_slot_bytes(1000), 1024);
  EXPECT_EQ(arena_slot_bytes(0), 64);
}

TEST(runtime_MemoryPlan, ResultPoolAndDonatedInputLendTheirMemory) {
  // %0 input 2048 B, donatable, read last by launch 0
  // %1 = k(%0) 1024 B  live [0, 1]
  // %2 = k(%1) 1024 B  live [1, 2]
  // %3 = k(%2) 4096 B  result: its buffer is free for launches [.., 1]
  // Plain plan: %1 fits %3's window -> in %3 @0; %2 is live at launch 2,
  // when %3 is written -> the arena @0. Arena 1024.
  // Donating plan: %0's buffer is free from launch 1 on -> %2 in %0 @0
  // (pools first). Arena 0.
  PlanProblem p;
  int x = input(p, 2048, /*donatable=*/true);
  int a = kernel(p, {x}, 1024), b = kernel(p, {a}, 1024), c = kernel(p, {b}, 4096);
  p.outputs = {c};
  MemoryPlan plan = plan_memory(p);
  EXPECT_EQ(plan.slots[a].pool, c);
  EXPECT_EQ(plan.slots[a].offset, 0);
  EXPECT_EQ(plan.slots[b].pool, -1);
  EXPECT_EQ(plan.slots[b].offset, 0);
  EXPECT_EQ(plan.arena_bytes, 1024);
  EXPECT_EQ(plan.donating_slots[a].pool, c);
  EXPECT_EQ(plan.donating_slots[b].pool, x);
  EXPECT_EQ(plan.donating_slots[b].offset, 0);
  EXPECT_EQ(plan.donating_arena_bytes, 0);
}

TEST(runtime_MemoryPlan, InPlacePairSharesTheDyingOperandsPlacement) {
  // %1 = k(%0)        1024 B  live [0, 1]
  // %2 = k(%1) in place over operand 0: %1 dies at launch 1 -> one
  //                   placement live [0, 2]: both @0, arena 1024 (without
  //                   the pair: %1 @0, %2 @1024, arena 2048)
  // %3 = k(%2) 64 B result
  PlanProblem p;
  int x = input(p, 64);
  int a = kernel(p, {x}, 1024), b = kernel(p, {a}, 1024, {{0, 0}}), c = kernel(p, {b}, 64);
  p.outputs = {c};
  MemoryPlan plan = plan_memory(p);
  EXPECT_EQ(plan.num_in_place, 1);
  EXPECT_EQ(plan.slots[a].offset, 0);
  EXPECT_EQ(plan.slots[b].offset, 0);
  EXPECT_EQ(plan.arena_bytes, 1024);

  // The operand read again later (launch 2 reads %1 too): no pair,
  // %1 live [0, 2] @0, %2 @1024.
  PlanProblem q;
  x = input(q, 64);
  a = kernel(q, {x}, 1024);
  b = kernel(q, {a}, 1024, {{0, 0}});
  c = kernel(q, {b, a}, 64);
  q.outputs = {c};
  plan = plan_memory(q);
  EXPECT_EQ(plan.num_in_place, 0);
  EXPECT_EQ(plan.slots[b].offset, 1024);
  EXPECT_EQ(plan.arena_bytes, 2048);
}

TEST(runtime_MemoryPlan, InPlaceOverADonatedInputInTheDonatingPlanOnly) {
  // %1 = k(%0) in place over the donatable input %0 (1024 B each).
  // Plain plan: an input is never overwritten -> %1 in the arena @0 (1024).
  // Donating plan: %1 at offset 0 of %0's buffer, arena 0.
  PlanProblem p;
  int x = input(p, 1024, /*donatable=*/true);
  int a = kernel(p, {x}, 1024, {{0, 0}}), b = kernel(p, {a}, 64);
  p.outputs = {b};
  MemoryPlan plan = plan_memory(p);
  EXPECT_EQ(plan.num_in_place, 0);
  EXPECT_EQ(plan.arena_bytes, 1024);
  EXPECT_EQ(plan.num_in_place_donating, 1);
  EXPECT_EQ(plan.donating_slots[a].pool, x);
  EXPECT_EQ(plan.donating_slots[a].offset, 0);
  EXPECT_EQ(plan.donating_arena_bytes, 0);
}

TEST(runtime_MemoryPlan, ALaunchTakesAllItsPairsOrNone) {
  // %3, %4 = k(%1, %2) with pairs (0, 0) and (1, 1); %2 is read again by
  // launch 3, so pair (1, 1) is unsafe and the kernel gets neither.
  PlanProblem p;
  int x = input(p, 64);
  int a = kernel(p, {x}, 1024), b = kernel(p, {x}, 1024);
  const int r0 = static_cast<int>(p.slots.size());
  p.slots.push_back(PlanSlot::produced(1024, 2));
  p.slots.push_back(PlanSlot::produced(1024, 2));
  p.launches.push_back(PlanLaunch{{a, b}, {r0, r0 + 1}, {{0, 0}, {1, 1}}});
  int out = kernel(p, {r0, r0 + 1, b}, 64);
  p.outputs = {out};
  MemoryPlan plan = plan_memory(p);
  EXPECT_EQ(plan.num_in_place, 0);
  EXPECT_NE(plan.slots[r0].offset, plan.slots[a].offset);
}

TEST(runtime_MemoryPlan, ViewsKeepTheirBaseAliveAndResultsEscapeThroughViews) {
  // %2 = view(%1) read by launch 2: %1 lives to 2. A result that is a view
  // of %3 makes %3 escape (owned).
  PlanProblem p;
  int x = input(p, 64);
  int a = kernel(p, {x}, 256);
  const int v = static_cast<int>(p.slots.size());
  p.slots.push_back(PlanSlot::view(256, 1, a, /*row_major=*/false));
  p.launches.push_back(PlanLaunch{{a}, {v}, {}});
  int c = kernel(p, {v}, 256);
  const int w = static_cast<int>(p.slots.size());
  p.slots.push_back(PlanSlot::view(256, 3, c, true));
  p.launches.push_back(PlanLaunch{{c}, {w}, {}});
  p.outputs = {w};
  MemoryPlan plan = plan_memory(p);
  EXPECT_EQ(plan.slots[a].last_use, 2);
  EXPECT_EQ(plan.slots[c].storage, SlotStorage::Owned);
  EXPECT_TRUE(plan.slots[c].escapes);
  EXPECT_EQ(plan.slots[v].storage, SlotStorage::View);
  // %1 [0, 2] is inside %3's pool window (launches before 2)? No: it is
  // read at 2, when %3 is written -> the arena.
  EXPECT_EQ(plan.slots[a].pool, -1);
  EXPECT_EQ(plan.arena_bytes, 256);
}
