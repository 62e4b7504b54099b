// The memory planner (MemoryPlan.h): escapes, liveness, pools, in-place
// pairs, greedy-by-size best-fit placement.
#include "kiln/runtime/MemoryPlan.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace kiln::runtime {
namespace {

/// Memory lent to intermediates: slot `owner`'s buffer of `capacity` bytes,
/// free for slots whose live range lies inside launches [begin, end].
struct Pool {
  int owner;
  int64_t capacity;
  int begin, end;
};

/// What the in-place step decided for one plan: `into[r]`, the slot whose
/// placement result r shares (-1: its own); `preplaced`, results at offset
/// 0 of a donated input's pool (slot, pool index).
struct InPlaceChoice {
  std::vector<int> into;
  std::vector<std::pair<int, int>> preplaced;
};

/// The smallest gap among `busy` ([offset, end) of placed slots overlapping
/// in time) that holds `need` bytes, in a memory of `limit` bytes (-1:
/// unbounded, the arena). {offset, gap}; offset -1 when nothing fits. The
/// last slot in a pool needs only its own `nbytes` (the pool's buffer is not
/// padded).
std::pair<int64_t, int64_t> smallest_gap(std::vector<std::pair<int64_t, int64_t>> busy, int64_t need, int64_t nbytes,
                                         int64_t limit) {
  std::sort(busy.begin(), busy.end());
  int64_t best = -1, best_gap = std::numeric_limits<int64_t>::max(), prev_end = 0;
  auto consider = [&](int64_t begin) {
    const int64_t gap = begin - prev_end;
    const bool fits = gap >= need || (limit >= 0 && begin == limit && gap >= nbytes);
    if (fits && gap < best_gap) {
      best = prev_end;
      best_gap = gap;
    }
  };
  for (auto [begin, end] : busy) {
    consider(begin);
    prev_end = std::max(prev_end, end);
  }
  if (limit >= 0) {
    consider(limit);
  } else if (best < 0) {
    best = prev_end;
    best_gap = std::numeric_limits<int64_t>::max();
  }
  return {best, best_gap};
}

/// Best fit for slot p among the slots placed in one memory.
std::pair<int64_t, int64_t> best_fit(const std::vector<SlotPlan> &plans, const SlotPlan &p,
                                     const std::vector<int> &placed, int64_t limit) {
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (int q : placed) {
    const SlotPlan &o = plans[q];
    if (o.def <= p.last_use && p.def <= o.last_use)
      busy.emplace_back(o.offset, o.offset + arena_slot_bytes(o.nbytes));
  }
  return smallest_gap(std::move(busy), arena_slot_bytes(p.nbytes), p.nbytes, limit);
}

/// Assigns `slots` (sorted biggest first) to pools or the arena and returns
/// the arena's bytes. `preplaced`: slots already at offset 0 of pool i.
int64_t place_slots(std::vector<SlotPlan> &plans, const std::vector<int> &slots, const std::vector<Pool> &pools,
                    const std::vector<std::pair<int, int>> &preplaced) {
  std::vector<std::vector<int>> placed(pools.size() + 1); // 0: the arena, 1 + i: pool i
  for (auto [slot, pool] : preplaced) {
    plans[slot].pool = pools[pool].owner;
    plans[slot].offset = 0;
    placed[pool + 1].push_back(slot);
  }
  int64_t arena = 0;
  for (int s : slots) {
    SlotPlan &p = plans[s];
    int where = -1;
    int64_t offset = -1, gap = std::numeric_limits<int64_t>::max();
    for (size_t i = 0; i < pools.size(); ++i) {
      const Pool &pool = pools[i];
      if (p.def < pool.begin || p.last_use > pool.end || p.nbytes > pool.capacity)
        continue;
      auto [o, g] = best_fit(plans, p, placed[i + 1], pool.capacity);
      if (o >= 0 && g < gap) {
        where = static_cast<int>(i);
        offset = o;
        gap = g;
      }
    }
    if (where < 0) {
      offset = best_fit(plans, p, placed[0], -1).first;
      arena = std::max(arena, offset + arena_slot_bytes(p.nbytes));
    }
    p.pool = where < 0 ? -1 : pools[where].owner;
    p.offset = offset;
    placed[where + 1].push_back(s);
  }
  return arena;
}

/// Step 1-2: initial plans, escapes and liveness. A view is created after
/// its base, so one reverse sweep propagates view chains.
std::vector<SlotPlan> liveness(const PlanProblem &problem) {
  const int num_slots = static_cast<int>(problem.slots.size());
  std::vector<SlotPlan> plans(num_slots);
  for (int s = 0; s < num_slots; ++s) {
    plans[s].storage = problem.slots[s].storage;
    plans[s].base = problem.slots[s].base;
    plans[s].def = problem.slots[s].def;
  }
  for (int s : problem.outputs)
    for (int v = s; v >= 0 && !plans[v].escapes; v = plans[v].base)
      plans[v].escapes = true;
  for (int i = 0; i < static_cast<int>(problem.launches.size()); ++i)
    for (int o : problem.launches[i].operands)
      plans[o].last_use = std::max(plans[o].last_use, i);
  for (int s = num_slots - 1; s >= 0; --s) {
    SlotPlan &p = plans[s];
    p.last_use = std::max(p.last_use, p.def);
    if (p.base >= 0)
      plans[p.base].last_use = std::max(plans[p.base].last_use, p.last_use);
  }
  return plans;
}

/// Step 3: sizes and storage of produced slots (escaping ones become
/// Owned); returns the non-escaping ones (the slots to place).
std::vector<int> classify(const PlanProblem &problem, std::vector<SlotPlan> &plans) {
  std::vector<int> arena_slots;
  for (size_t s = 0; s < plans.size(); ++s) {
    SlotPlan &p = plans[s];
    if (p.storage != SlotStorage::Arena)
      continue;
    p.nbytes = problem.slots[s].bytes;
    if (p.escapes)
      p.storage = SlotStorage::Owned;
    else
      arena_slots.push_back(static_cast<int>(s));
  }
  return arena_slots;
}

/// Step 4: results lend their buffers before the launch that writes them;
/// `donated_pool[s]`: the index in `donating` of input s's pool (-1: none).
void make_pools(const PlanProblem &problem, const std::vector<SlotPlan> &plans, std::vector<Pool> &plain,
                std::vector<Pool> &donating, std::vector<int> &donated_pool) {
  for (size_t s = 0; s < plans.size(); ++s)
    if (plans[s].storage == SlotStorage::Owned && plans[s].nbytes > 0)
      plain.push_back(Pool{static_cast<int>(s), plans[s].nbytes, std::numeric_limits<int>::min(), plans[s].def - 1});
  donating = plain;
  donated_pool.assign(plans.size(), -1);
  // Not the inputs a result aliases: they outlive the run.
  for (size_t s = 0; s < plans.size(); ++s) {
    const PlanSlot &slot = problem.slots[s];
    if (slot.storage == SlotStorage::Input && slot.donatable && !plans[s].escapes && slot.bytes > 0) {
      donated_pool[s] = static_cast<int>(donating.size());
      donating.push_back(Pool{static_cast<int>(s), slot.bytes, plans[s].last_use + 1, std::numeric_limits<int>::max()});
    }
  }
}

/// The slot whose memory a view chain uses.
int root_of(const std::vector<SlotPlan> &plans, int s) {
  while (plans[s].base >= 0)
    s = plans[s].base;
  return s;
}

/// The operand root result r may be written over at launch i (pair `pair`
/// of launch `l`), or -1.
int in_place_operand(const PlanProblem &problem, const std::vector<SlotPlan> &plans, const PlanLaunch &l, int i,
                     const InPlace &pair) {
  const int r = l.results[pair.result];
  const int64_t bytes = problem.slots[r].bytes;
  bool row_major = true;
  for (int v = l.operands[pair.operand]; row_major && v >= 0; v = plans[v].base)
    row_major = problem.slots[v].row_major && problem.slots[v].bytes == bytes;
  const int o = root_of(plans, l.operands[pair.operand]);
  // Another operand of this launch reading the same memory would see it
  // overwritten.
  bool shared = false;
  for (size_t j = 0; j < l.operands.size(); ++j)
    shared |= root_of(plans, l.operands[j]) == o && static_cast<int>(j) != pair.operand;
  const bool storage_ok = plans[o].storage == SlotStorage::Arena || plans[o].storage == SlotStorage::Input;
  if (!row_major || shared || plans[r].storage != SlotStorage::Arena || plans[o].last_use != i || plans[o].escapes ||
      !storage_ok)
    return -1;
  return o;
}

/// Step 5: the in-place pairs each plan takes. The plain plan writes over
/// arena slots only, the donating plan also over donated inputs; a plan
/// takes a launch's pairs only if it can take all of them.
void choose_in_place(const PlanProblem &problem, const std::vector<SlotPlan> &plans,
                     const std::vector<int> &donated_pool, InPlaceChoice &plain, InPlaceChoice &donating) {
  plain.into.assign(plans.size(), -1);
  donating.into.assign(plans.size(), -1);
  for (int i = 0; i < static_cast<int>(problem.launches.size()); ++i) {
    const PlanLaunch &l = problem.launches[i];
    std::vector<std::pair<int, int>> over; // (result, operand root)
    for (const InPlace &pair : l.in_place) {
      const int o = in_place_operand(problem, plans, l, i, pair);
      if (o < 0)
        break;
      over.emplace_back(l.results[pair.result], o);
    }
    if (over.size() != l.in_place.size())
      continue;
    const bool all_arena = std::all_of(over.begin(), over.end(),
                                       [&](auto p) { return plans[p.second].storage == SlotStorage::Arena; });
    const bool all_donatable = std::all_of(over.begin(), over.end(), [&](auto p) {
      return plans[p.second].storage == SlotStorage::Arena || donated_pool[p.second] >= 0;
    });
    for (auto [r, o] : over) {
      if (all_arena)
        plain.into[r] = o;
      if (!all_donatable)
        continue;
      if (plans[o].storage == SlotStorage::Arena)
        donating.into[r] = o;
      else
        donating.preplaced.emplace_back(r, donated_pool[o]);
    }
  }
}

/// Step 6: places one plan. Each shared placement is planned once, for its
/// first slot, over the union of the live ranges; returns the arena bytes
/// and counts the in-place results in `*count`.
int64_t place_plan(std::vector<SlotPlan> &plans, const std::vector<int> &arena_slots, const InPlaceChoice &choice,
                   const std::vector<Pool> &pools, int *count) {
  auto owner = [&](int s) {
    while (choice.into[s] >= 0)
      s = choice.into[s];
    return s;
  };
  std::vector<int> slots;
  for (int s : arena_slots)
    if (choice.into[s] < 0)
      slots.push_back(s);
  for (int s : arena_slots)
    if (choice.into[s] >= 0) {
      SlotPlan &root = plans[owner(s)];
      root.last_use = std::max(root.last_use, plans[s].last_use);
      ++*count;
    }
  std::vector<bool> preplaced(plans.size(), false);
  for (auto [s, pool] : choice.preplaced) {
    preplaced[s] = true;
    ++*count;
  }
  slots.erase(std::remove_if(slots.begin(), slots.end(), [&](int s) { return preplaced[s]; }), slots.end());
  std::stable_sort(slots.begin(), slots.end(), [&](int a, int b) {
    if (plans[a].nbytes != plans[b].nbytes)
      return plans[a].nbytes > plans[b].nbytes;
    return plans[a].def < plans[b].def;
  });
  const int64_t arena = place_slots(plans, slots, pools, choice.preplaced);
  for (int s : arena_slots)
    if (choice.into[s] >= 0) {
      const SlotPlan &root = plans[owner(s)];
      plans[s].pool = root.pool;
      plans[s].offset = root.offset;
    }
  return arena;
}

} // namespace

int64_t arena_slot_bytes(int64_t nbytes) {
  const int64_t n = std::max<int64_t>(nbytes, 1);
  return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

MemoryPlan plan_memory(const PlanProblem &problem) {
  MemoryPlan plan;
  plan.slots = liveness(problem);
  const std::vector<int> arena_slots = classify(problem, plan.slots);
  std::vector<Pool> pools, donating_pools;
  std::vector<int> donated_pool;
  make_pools(problem, plan.slots, pools, donating_pools, donated_pool);
  InPlaceChoice plain, donating;
  choose_in_place(problem, plan.slots, donated_pool, plain, donating);
  plan.donating_slots = plan.slots;
  plan.arena_bytes = place_plan(plan.slots, arena_slots, plain, pools, &plan.num_in_place);
  plan.donating_arena_bytes =
      place_plan(plan.donating_slots, arena_slots, donating, donating_pools, &plan.num_in_place_donating);
  return plan;
}

} // namespace kiln::runtime
