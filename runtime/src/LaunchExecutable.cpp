// LaunchExecutable: the Builder (launches over slots), the memory plan in
// finish(), describe(); run() is in LaunchRun.cpp.
#include "LaunchInternal.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>


namespace kiln::runtime {

using detail::join;
using detail::kind_name;
using detail::nbytes_of;
using detail::numel_of;

std::string detail::join(const std::vector<int64_t> &v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

const char *detail::kind_name(LaunchKind k) {
  switch (k) {
  case LaunchKind::Kernel:
    return "kernel";
  case LaunchKind::Gemm:
    return "gemm";
  case LaunchKind::Transpose:
    return "transpose";
  case LaunchKind::Broadcast:
    return "broadcast";
  case LaunchKind::Reshape:
    return "reshape";
  case LaunchKind::Copy:
    return "copy";
  }
  return "?";
}

namespace {

constexpr int64_t kArenaAlignment = 64;

int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

const char *storage_name(SlotStorage s) {
  switch (s) {
  case SlotStorage::Input:
    return "input";
  case SlotStorage::View:
    return "view";
  case SlotStorage::Arena:
    return "arena";
  case SlotStorage::Owned:
    return "owned";
  case SlotStorage::Constant:
    return "constant";
  }
  return "?";
}

/// Memory lent to intermediates: slot `owner`'s buffer of `capacity` bytes,
/// free for slots whose live range lies inside launches [begin, end].
struct Pool {
  int owner;
  int64_t capacity;
  int begin, end;
};

/// Assigns `slots` (sorted biggest first) to pools or the arena (see the
/// header: greedy by size, best fit) and returns the arena's bytes.
/// `preplaced`: slots already at offset 0 of pool i (slot, i), outside the
/// pool's window (a result written over a donated input at its last read).
int64_t place_slots(std::vector<SlotPlan> &plans, const std::vector<int> &slots, const std::vector<Pool> &pools,
                    const std::vector<std::pair<int, int>> &preplaced = {}) {
  auto aligned = [](int64_t n) { return align_up(std::max<int64_t>(n, 1), kArenaAlignment); };
  // Placed slots per memory: index 0 the arena, 1 + i pool i.
  std::vector<std::vector<int>> placed(pools.size() + 1);
  for (auto [slot, pool] : preplaced) {
    plans[slot].pool = pools[pool].owner;
    plans[slot].arena_offset = 0;
    placed[pool + 1].push_back(slot);
  }
  int64_t arena = 0;
  // The smallest gap of `memory` (capacity `limit`, or unbounded) holding
  // slot p, among placed slots overlapping p in time: {offset, gap} or {-1, _}.
  auto best_fit = [&](const SlotPlan &p, const std::vector<int> &in, int64_t limit) {
    std::vector<std::pair<int64_t, int64_t>> busy; // [offset, end)
    for (int q : in) {
      const SlotPlan &o = plans[q];
      if (o.def <= p.last_use && p.def <= o.last_use)
        busy.emplace_back(o.arena_offset, o.arena_offset + aligned(o.nbytes));
    }
    std::sort(busy.begin(), busy.end());
    const int64_t need = aligned(p.nbytes);
    int64_t best = -1, best_gap = std::numeric_limits<int64_t>::max(), prev_end = 0;
    auto consider = [&](int64_t begin) {
      int64_t gap = begin - prev_end;
      // The last slot in a pool needs only its own bytes (the pool's buffer
      // is not padded).
      bool fits = gap >= need || (limit >= 0 && begin == limit && gap >= p.nbytes);
      if (fits && gap < best_gap) {
        best = prev_end;
        best_gap = gap;
      }
    };
    for (auto [begin, end] : busy) {
      consider(begin);
      prev_end = std::max(prev_end, end);
    }
    if (limit >= 0)
      consider(limit);
    else if (best < 0)
      best = prev_end, best_gap = std::numeric_limits<int64_t>::max();
    return std::make_pair(best, best_gap);
  };
  for (int s : slots) {
    SlotPlan &p = plans[s];
    int where = -1;
    int64_t offset = -1, gap = std::numeric_limits<int64_t>::max();
    for (size_t i = 0; i < pools.size(); ++i) {
      const Pool &pool = pools[i];
      if (p.def < pool.begin || p.last_use > pool.end || p.nbytes > pool.capacity)
        continue;
      auto [o, g] = best_fit(p, placed[i + 1], pool.capacity);
      if (o >= 0 && g < gap) {
        where = static_cast<int>(i);
        offset = o;
        gap = g;
      }
    }
    if (where < 0) {
      offset = best_fit(p, placed[0], -1).first;
      arena = std::max(arena, offset + aligned(p.nbytes));
    }
    p.pool = where < 0 ? -1 : pools[where].owner;
    p.arena_offset = offset;
    placed[where + 1].push_back(s);
  }
  return arena;
}

} // namespace

std::vector<int64_t> contiguous_strides(const std::vector<int64_t> &sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  int64_t s = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

bool compute_view_strides(const std::vector<int64_t> &sizes, const std::vector<int64_t> &strides,
                          const std::vector<int64_t> &new_sizes, std::vector<int64_t> *new_strides) {
  // Port of PyTorch's at::detail::computeStride (aten/src/ATen/TensorUtils.cpp).
  const int64_t numel = numel_of(sizes);
  if (numel <= 1 || sizes.empty()) {
    *new_strides = contiguous_strides(new_sizes);
    return true;
  }
  std::vector<int64_t> out(new_sizes.size(), 1);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= sizes[tensor_d];
    if (tensor_d == 0 || (sizes[tensor_d - 1] != 1 && strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel)
        return false;
      if (tensor_d > 0) {
        chunk_base_stride = strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1)
    return false;
  *new_strides = std::move(out);
  return true;
}

std::string slot_type_str(const SlotType &type) { return std::string(dtype_name(type.dtype)) + " " + join(type.sizes); }

// ---- Builder -----------------------------------------------------------------

LaunchExecutable::Builder::Builder() : exe_(new LaunchExecutable()) {}
LaunchExecutable::Builder::~Builder() = default;

bool LaunchExecutable::Builder::fail(std::string message) {
  if (error_.empty())
    error_ = std::move(message);
  return false;
}

bool LaunchExecutable::Builder::checkSlot(int slot, const char *what) {
  if (!error_.empty())
    return false;
  if (slot < 0 || slot >= static_cast<int>(exe_->types_.size()))
    return fail(std::string(what) + ": slot " + std::to_string(slot) + " does not exist");
  return true;
}

const SlotType &LaunchExecutable::Builder::type(int slot) const { return exe_->types_.at(slot); }

int LaunchExecutable::Builder::addSlot(SlotType type, int base) {
  for (int64_t s : type.sizes)
    if (s < 0) {
      fail("negative size in " + slot_type_str(type));
      return -1;
    }
  SlotPlan plan;
  plan.base = base;
  plan.def = static_cast<int>(exe_->launches_.size()) - 1; // the launch just added
  exe_->types_.push_back(std::move(type));
  exe_->plans_.push_back(plan);
  static_strides_.emplace_back();
  strides_known_.push_back(false);
  return static_cast<int>(exe_->types_.size()) - 1;
}

int LaunchExecutable::Builder::addInput(std::vector<int64_t> sizes, DType dtype, bool donatable) {
  if (!error_.empty())
    return -1;
  if (!exe_->launches_.empty()) {
    fail("addInput after the first launch");
    return -1;
  }
  int slot = addSlot(SlotType{std::move(sizes), dtype}, -1);
  if (slot < 0)
    return -1;
  exe_->plans_[slot].storage = SlotStorage::Input;
  exe_->plans_[slot].def = -1;
  exe_->inputs_.push_back(slot);
  exe_->donatable_.push_back(donatable);
  static_strides_[slot] = contiguous_strides(exe_->types_[slot].sizes);
  strides_known_[slot] = true;
  return slot;
}

std::vector<int> LaunchExecutable::Builder::addKernel(std::string name, PackedKernel fn, std::vector<int> operands,
                                                      std::vector<SlotType> results,
                                                      const std::vector<std::vector<int64_t>> &operand_strides,
                                                      bool split_rows, std::vector<InPlace> in_place) {
  for (int o : operands)
    if (!checkSlot(o, name.c_str()))
      return {};
  if (!error_.empty())
    return {};
  for (size_t i = 0; i < operand_strides.size() && i < operands.size(); ++i) {
    const int slot = operands[i];
    const std::vector<int64_t> &want = operand_strides[i], &have = static_strides_[slot];
    const std::vector<int64_t> &sizes = type(slot).sizes;
    bool same = strides_known_[slot] && want.size() == sizes.size() && have.size() == sizes.size();
    for (size_t d = 0; same && d < sizes.size(); ++d)
      same = sizes[d] <= 1 || want[d] < 0 || want[d] == have[d];
    if (!same) {
      fail("kernel " + name + ": operand " + std::to_string(i) + " has strides " + join(have) +
           " but the kernel was compiled for " + join(want));
      return {};
    }
  }
  if (!fn) {
    fail("kernel " + name + ": null function");
    return {};
  }
  auto launch = std::make_shared<Launch>();
  launch->kind = LaunchKind::Kernel;
  launch->name = name;
  launch->fn = fn;
  launch->split_rows = split_rows;
  for (const InPlace &pair : in_place) {
    bool repeated = false;
    for (const InPlace &other : in_place)
      repeated |= &other != &pair && (other.operand == pair.operand || other.result == pair.result);
    if (pair.operand < 0 || pair.operand >= static_cast<int>(operands.size()) || pair.result < 0 ||
        pair.result >= static_cast<int>(results.size()) || repeated) {
      fail("kernel " + name + ": in-place pair (operand " + std::to_string(pair.operand) + ", result " +
           std::to_string(pair.result) + ") is out of range for " + std::to_string(operands.size()) +
           " operands and " + std::to_string(results.size()) + " results, or repeats one of them");
      return {};
    }
  }
  launch->in_place = std::move(in_place);
  launch->operands = std::move(operands);
  exe_->launches_.push_back(launch);
  for (SlotType &t : results) {
    std::vector<int64_t> strides = contiguous_strides(t.sizes);
    int slot = addSlot(std::move(t), -1);
    if (slot < 0)
      return {};
    exe_->plans_[slot].storage = SlotStorage::Arena; // may become Owned in finish()
    static_strides_[slot] = std::move(strides);
    strides_known_[slot] = true;
    launch->results.push_back(slot);
  }
  return launch->results;
}

int LaunchExecutable::Builder::addGemm(int a, int b) {
  if (!checkSlot(a, "gemm") || !checkSlot(b, "gemm"))
    return -1;
  const SlotType &ta = type(a), &tb = type(b);
  const size_t rank = ta.sizes.size();
  const bool gemm_dtype = ta.dtype == DType::Float32 || ta.dtype == DType::Float64 || ta.dtype == DType::BFloat16 ||
                          ta.dtype == DType::Float16;
  if (!gemm_dtype || tb.dtype != ta.dtype || (rank != 2 && rank != 3) ||
      tb.sizes.size() != rank || ta.sizes[rank - 1] != tb.sizes[rank - 2] ||
      (rank == 3 && ta.sizes[0] != tb.sizes[0])) {
    fail("gemm: expected [M, K] x [K, N] or [B, M, K] x [B, K, N] of one dtype (float32, float64, bfloat16 or float16), got " +
         slot_type_str(ta) + " x " + slot_type_str(tb));
    return -1;
  }
  SlotType tc{{ta.sizes[rank - 2], tb.sizes[rank - 1]}, ta.dtype};
  if (rank == 3)
    tc.sizes.insert(tc.sizes.begin(), ta.sizes[0]);
  auto launch = std::make_shared<Launch>();
  launch->kind = LaunchKind::Gemm;
  launch->name = "gemm";
  launch->operands = {a, b};
  exe_->launches_.push_back(launch);
  std::vector<int64_t> strides = contiguous_strides(tc.sizes);
  int slot = addSlot(std::move(tc), -1);
  exe_->plans_[slot].storage = SlotStorage::Arena;
  static_strides_[slot] = std::move(strides);
  strides_known_[slot] = true;
  launch->results = {slot};
  return slot;
}

int LaunchExecutable::Builder::addTranspose(int base, std::vector<int64_t> perm) {
  if (!checkSlot(base, "transpose"))
    return -1;
  const SlotType &tb = type(base);
  const size_t rank = tb.sizes.size();
  std::vector<bool> seen(rank, false);
  bool ok = perm.size() == rank;
  for (int64_t p : perm) {
    if (!ok || p < 0 || p >= static_cast<int64_t>(rank) || seen[p]) {
      ok = false;
      break;
    }
    seen[p] = true;
  }
  if (!ok) {
    fail("transpose: " + join(perm) + " is not a permutation for " + slot_type_str(tb));
    return -1;
  }
  SlotType tr{std::vector<int64_t>(rank), tb.dtype};
  for (size_t i = 0; i < rank; ++i)
    tr.sizes[i] = tb.sizes[perm[i]];
  auto launch = std::make_shared<Launch>();
  launch->kind = LaunchKind::Transpose;
  launch->name = "transpose";
  launch->operands = {base};
  launch->attr = perm;
  exe_->launches_.push_back(launch);
  bool known = strides_known_[base];
  std::vector<int64_t> strides;
  if (known) {
    strides.resize(rank);
    for (size_t i = 0; i < rank; ++i)
      strides[i] = static_strides_[base][perm[i]];
  }
  int slot = addSlot(std::move(tr), base);
  exe_->plans_[slot].storage = SlotStorage::View;
  static_strides_[slot] = std::move(strides);
  strides_known_[slot] = known;
  launch->results = {slot};
  return slot;
}

int LaunchExecutable::Builder::addBroadcast(int base, std::vector<int64_t> sizes) {
  if (!checkSlot(base, "broadcast"))
    return -1;
  const SlotType &tb = type(base);
  const size_t rank = sizes.size(), brank = tb.sizes.size();
  bool ok = brank <= rank;
  for (size_t i = 0; ok && i < brank; ++i) {
    int64_t bs = tb.sizes[brank - 1 - i], ts = sizes[rank - 1 - i];
    ok = bs == ts || bs == 1;
  }
  if (!ok) {
    fail("broadcast: cannot expand " + slot_type_str(tb) + " to " + join(sizes));
    return -1;
  }
  auto launch = std::make_shared<Launch>();
  launch->kind = LaunchKind::Broadcast;
  launch->name = "broadcast";
  launch->operands = {base};
  launch->attr = sizes;
  exe_->launches_.push_back(launch);
  bool known = strides_known_[base];
  std::vector<int64_t> strides;
  if (known) {
    strides.assign(rank, 0);
    for (size_t i = 0; i < brank; ++i) {
      size_t d = rank - brank + i;
      strides[d] = tb.sizes[i] == sizes[d] ? static_strides_[base][i] : 0;
    }
  }
  int slot = addSlot(SlotType{std::move(sizes), tb.dtype}, base);
  exe_->plans_[slot].storage = SlotStorage::View;
  static_strides_[slot] = std::move(strides);
  strides_known_[slot] = known;
  launch->results = {slot};
  return slot;
}

int LaunchExecutable::Builder::addReshape(int base, std::vector<int64_t> sizes) {
  if (!checkSlot(base, "reshape"))
    return -1;
  const SlotType &tb = type(base);
  if (numel_of(sizes) != numel_of(tb.sizes)) {
    fail("reshape: " + slot_type_str(tb) + " has a different element count than " + join(sizes));
    return -1;
  }
  auto launch = std::make_shared<Launch>();
  launch->kind = LaunchKind::Reshape;
  launch->name = "reshape";
  launch->operands = {base};
  launch->attr = sizes;
  exe_->launches_.push_back(launch);
  // Statically viewable: a pure view. Otherwise (strides unknown until run
  // time, or known not to allow a view) the slot gets memory for a copy.
  std::vector<int64_t> strides;
  bool view = strides_known_[base] && compute_view_strides(tb.sizes, static_strides_[base], sizes, &strides);
  bool must_copy = strides_known_[base] && !view;
  int slot = addSlot(SlotType{sizes, tb.dtype}, base);
  exe_->plans_[slot].storage = view ? SlotStorage::View : SlotStorage::Arena;
  if (must_copy) {
    // Known to copy: the result does not alias the base.
    exe_->plans_[slot].base = -1;
    strides = contiguous_strides(sizes);
  }
  static_strides_[slot] = std::move(strides);
  strides_known_[slot] = view || must_copy;
  launch->results = {slot};
  return slot;
}

int LaunchExecutable::Builder::addConstant(SlotType type, const void *data) {
  if (!error_.empty())
    return -1;
  if (data == nullptr) {
    fail("addConstant: null data");
    return -1;
  }
  const int64_t bytes = nbytes_of(type);
  std::vector<int64_t> strides = contiguous_strides(type.sizes);
  int slot = addSlot(std::move(type), -1);
  if (slot < 0)
    return -1;
  auto buffer = Buffer::make(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  std::memcpy(buffer->data(), data, static_cast<size_t>(bytes));
  exe_->plans_[slot].storage = SlotStorage::Constant;
  exe_->plans_[slot].def = -1;
  exe_->constants_.emplace_back(slot, std::move(buffer));
  static_strides_[slot] = std::move(strides);
  strides_known_[slot] = true;
  return slot;
}

int LaunchExecutable::Builder::addCopy(int src) {
  if (!checkSlot(src, "copy"))
    return -1;
  SlotType t = type(src);
  auto launch = std::make_shared<Launch>();
  launch->kind = LaunchKind::Copy;
  launch->name = "copy";
  launch->operands = {src};
  exe_->launches_.push_back(launch);
  std::vector<int64_t> strides = contiguous_strides(t.sizes);
  int slot = addSlot(std::move(t), -1);
  exe_->plans_[slot].storage = SlotStorage::Arena;
  static_strides_[slot] = std::move(strides);
  strides_known_[slot] = true;
  launch->results = {slot};
  return slot;
}

void LaunchExecutable::Builder::setOutputs(std::vector<int> slots) {
  for (int s : slots)
    if (!checkSlot(s, "outputs"))
      return;
  exe_->outputs_ = std::move(slots);
}

void LaunchExecutable::Builder::keepAlive(std::shared_ptr<const void> owner) { exe_->keep_alive_ = std::move(owner); }

std::shared_ptr<LaunchExecutable> LaunchExecutable::Builder::finish(std::string *error) {
  if (!error_.empty()) {
    if (error)
      *error = error_;
    return nullptr;
  }
  LaunchExecutable &exe = *exe_;
  std::vector<SlotPlan> &plans = exe.plans_;
  const int num_slots = static_cast<int>(plans.size());

  // Escapes: results and everything they are views of.
  for (int s : exe.outputs_)
    for (int v = s; v >= 0 && !plans[v].escapes; v = plans[v].base)
      plans[v].escapes = true;

  // Liveness: last direct use, then views extend their bases (a view is
  // created after its base, so one reverse sweep propagates chains).
  for (int i = 0; i < static_cast<int>(exe.launches_.size()); ++i)
    for (int o : exe.launches_[i]->operands)
      plans[o].last_use = std::max(plans[o].last_use, i);
  for (int s = num_slots - 1; s >= 0; --s) {
    SlotPlan &p = plans[s];
    p.last_use = std::max(p.last_use, p.def);
    if (p.base >= 0)
      plans[p.base].last_use = std::max(plans[p.base].last_use, p.last_use);
  }

  // Storage classes and sizes.
  std::vector<int> arena_slots;
  for (int s = 0; s < num_slots; ++s) {
    SlotPlan &p = plans[s];
    if (p.storage != SlotStorage::Arena)
      continue;
    p.nbytes = nbytes_of(exe.types_[s]);
    if (p.escapes)
      p.storage = SlotStorage::Owned;
    else
      arena_slots.push_back(s);
  }

  // Pools lent by results: an Owned slot's buffer (allocated when the run
  // starts) is free before the launch that writes it.
  std::vector<Pool> pools;
  for (int s = 0; s < num_slots; ++s)
    if (plans[s].storage == SlotStorage::Owned && plans[s].nbytes > 0)
      pools.push_back(Pool{s, plans[s].nbytes, std::numeric_limits<int>::min(), plans[s].def - 1});
  // The donating plan also has the donatable inputs' buffers after their
  // last use (not those a result aliases: they outlive the run).
  std::vector<Pool> donating_pools = pools;
  std::vector<int> donated_pool(num_slots, -1); // input slot -> its index in donating_pools
  for (size_t i = 0; i < exe.inputs_.size(); ++i) {
    const int s = exe.inputs_[i];
    if (exe.donatable_[i] && !plans[s].escapes && nbytes_of(exe.types_[s]) > 0) {
      donated_pool[s] = static_cast<int>(donating_pools.size());
      donating_pools.push_back(Pool{s, nbytes_of(exe.types_[s]), plans[s].last_use + 1, std::numeric_limits<int>::max()});
    }
  }

  // In place: a result takes over its operand's memory when the operand
  // (through row-major views of the same bytes) dies at that launch.
  // `into[r]`: the slot whose placement result r shares (-1: its own).
  std::vector<int> into(num_slots, -1), donating_into(num_slots, -1);
  std::vector<std::pair<int, int>> preplaced; // donating plan: (slot, pool)
  auto owner = [](const std::vector<int> &into, int s) {
    while (into[s] >= 0)
      s = into[s];
    return s;
  };
  auto root_of = [&](int s) { // the slot whose memory a view chain uses
    while (plans[s].base >= 0)
      s = plans[s].base;
    return s;
  };
  for (int i = 0; i < static_cast<int>(exe.launches_.size()); ++i) {
    const Launch &l = *exe.launches_[i];
    if (l.kind != LaunchKind::Kernel)
      continue;
    // All of the launch's pairs or none (the kernel has one branch for
    // every pair aliased, codegen's kiln-in-place-branch).
    std::vector<std::pair<int, int>> over; // (result, operand root)
    for (const InPlace &pair : l.in_place) {
      const int r = l.results[pair.result];
      const int64_t bytes = nbytes_of(exe.types_[r]);
      bool row_major = true;
      for (int v = l.operands[pair.operand]; row_major && v >= 0; v = plans[v].base)
        row_major = static_strides_[v] == contiguous_strides(exe.types_[v].sizes) && nbytes_of(exe.types_[v]) == bytes;
      const int o = root_of(l.operands[pair.operand]);
      // Another operand of this launch reading the same memory would see it
      // overwritten.
      bool shared = false;
      for (size_t j = 0; j < l.operands.size(); ++j)
        shared |= root_of(l.operands[j]) == o && static_cast<int>(j) != pair.operand;
      if (!row_major || shared || plans[r].storage != SlotStorage::Arena || plans[o].last_use != i ||
          plans[o].escapes || (plans[o].storage != SlotStorage::Arena && plans[o].storage != SlotStorage::Input))
        break;
      over.emplace_back(r, o);
    }
    if (over.size() != l.in_place.size())
      continue;
    // The plain plan writes over arena slots only; the donating plan also
    // over donated inputs. A plan takes the launch's pairs only if it can
    // take all of them.
    const bool plain = std::all_of(over.begin(), over.end(),
                                   [&](auto p) { return plans[p.second].storage == SlotStorage::Arena; });
    const bool donating = std::all_of(over.begin(), over.end(), [&](auto p) {
      return plans[p.second].storage == SlotStorage::Arena || donated_pool[p.second] >= 0;
    });
    for (auto [r, o] : over) {
      if (plain)
        into[r] = o;
      if (donating) {
        if (plans[o].storage == SlotStorage::Arena)
          donating_into[r] = o;
        else
          preplaced.emplace_back(r, donated_pool[o]);
      }
    }
  }
  // Each shared placement is planned once, for its first slot, over the
  // union of the live ranges.
  auto plan_in_place = [&](std::vector<SlotPlan> &plans, const std::vector<int> &into,
                           const std::vector<std::pair<int, int>> &preplaced, const std::vector<Pool> &pools,
                           int *count) {
    std::vector<int> slots;
    for (int s : arena_slots)
      if (into[s] < 0)
        slots.push_back(s);
    for (int s : arena_slots)
      if (into[s] >= 0) {
        SlotPlan &root = plans[owner(into, s)];
        root.last_use = std::max(root.last_use, plans[s].last_use);
        ++*count;
      }
    std::vector<bool> first(plans.size(), false);
    for (auto [s, pool] : preplaced) {
      first[s] = true;
      ++*count;
    }
    slots.erase(std::remove_if(slots.begin(), slots.end(), [&](int s) { return first[s]; }), slots.end());
    // Greedy by size: biggest first, each into the smallest gap among the
    // already-placed slots whose live ranges overlap its own, in a pool when
    // one can hold it, else in the arena.
    std::stable_sort(slots.begin(), slots.end(), [&](int a, int b) {
      if (plans[a].nbytes != plans[b].nbytes)
        return plans[a].nbytes > plans[b].nbytes;
      return plans[a].def < plans[b].def;
    });
    const int64_t arena = place_slots(plans, slots, pools, preplaced);
    for (int s : arena_slots)
      if (into[s] >= 0) {
        const SlotPlan &root = plans[owner(into, s)];
        plans[s].pool = root.pool;
        plans[s].arena_offset = root.arena_offset;
      }
    return arena;
  };
  exe.donating_plans_ = plans;
  exe.arena_bytes_ = plan_in_place(plans, into, {}, pools, &exe.num_in_place_);
  exe.donating_arena_bytes_ =
      plan_in_place(exe.donating_plans_, donating_into, preplaced, donating_pools, &exe.num_in_place_donating_);

  std::shared_ptr<LaunchExecutable> out = std::move(exe_);
  exe_.reset(new LaunchExecutable());
  static_strides_.clear();
  strides_known_.clear();
  return out;
}

// ---- LaunchExecutable ----------------------------------------------------------

int LaunchExecutable::num_split_kernels() const {
  int n = 0;
  for (const auto &l : launches_)
    n += l->kind == LaunchKind::Kernel && l->split_rows;
  return n;
}

int LaunchExecutable::num_launches() const {
  int n = 0;
  for (const auto &l : launches_) {
    switch (l->kind) {
    case LaunchKind::Kernel:
    case LaunchKind::Gemm:
    case LaunchKind::Copy:
      ++n;
      break;
    case LaunchKind::Reshape:
      if (plans_[l->results[0]].storage != SlotStorage::View)
        ++n;
      break;
    default:
      break;
    }
  }
  return n;
}

int64_t LaunchExecutable::owned_bytes() const {
  int64_t n = 0;
  for (const SlotPlan &p : plans_)
    if (p.storage == SlotStorage::Owned)
      n += p.nbytes;
  return n;
}

int64_t LaunchExecutable::unplanned_bytes() const {
  int64_t n = 0;
  for (const SlotPlan &p : plans_)
    if (p.storage == SlotStorage::Arena)
      n += align_up(std::max<int64_t>(p.nbytes, 1), kArenaAlignment);
  return n;
}

std::string LaunchExecutable::describe() const {
  std::ostringstream os;
  os << "inputs:";
  for (int s : inputs_)
    os << " %" << s;
  os << "\n";
  for (size_t i = 0; i < launches_.size(); ++i) {
    const Launch &l = *launches_[i];
    os << i << ": ";
    for (size_t r = 0; r < l.results.size(); ++r)
      os << (r ? ", %" : "%") << l.results[r];
    os << " = " << kind_name(l.kind);
    if (l.kind == LaunchKind::Kernel)
      os << " @" << l.name;
    for (size_t o = 0; o < l.operands.size(); ++o)
      os << (o ? ", %" : " %") << l.operands[o];
    if (!l.attr.empty())
      os << " " << join(l.attr);
    os << "\n";
  }
  for (size_t s = 0; s < plans_.size(); ++s) {
    const SlotPlan &p = plans_[s];
    os << "%" << s << ": " << slot_type_str(types_[s]) << " " << storage_name(p.storage);
    if (p.storage == SlotStorage::Arena)
      os << (p.pool >= 0 ? " in %" + std::to_string(p.pool) : std::string()) << " @" << p.arena_offset;
    const SlotPlan &d = donating_plans_[s];
    if (d.storage == SlotStorage::Arena && (d.pool != p.pool || d.arena_offset != p.arena_offset))
      os << " (donating: " << (d.pool >= 0 ? "in %" + std::to_string(d.pool) + " " : std::string()) << "@"
         << d.arena_offset << ")";
    if (p.base >= 0)
      os << " base %" << p.base;
    os << " live [" << p.def << ", " << p.last_use << "]" << (p.escapes ? " escapes" : "") << "\n";
  }
  os << "outputs:";
  for (int s : outputs_)
    os << " %" << s;
  os << "\narena: " << arena_bytes_ << " bytes";
  if (donating_arena_bytes_ != arena_bytes_)
    os << " (donating: " << donating_arena_bytes_ << " bytes)";
  os << "\n";
  return os.str();
}

} // namespace kiln::runtime
