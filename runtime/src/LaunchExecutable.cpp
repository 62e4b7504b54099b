// LaunchExecutable: launches over slots, the memory plan, and run().
#include "kiln/runtime/LaunchExecutable.h"
#include "kiln/runtime/Profiler.h"

#include <algorithm>
#include <cstring>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <limits>
#include <sstream>

#include "kiln/runtime/Gemm.h"

namespace kiln::runtime {

struct LaunchExecutable::Launch {
  LaunchKind kind = LaunchKind::Kernel;
  std::string name;          ///< kernel symbol (Kernel only)
  PackedKernel fn = nullptr; ///< Kernel only
  std::vector<int> operands;
  std::vector<int> results;
  std::vector<int64_t> attr; ///< permutation (Transpose) or target sizes
  bool split_rows = false;   ///< Kernel only: may run on slices of dim 0 (addKernel)
};

namespace {

constexpr int64_t kArenaAlignment = 64;

int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

int64_t numel_of(const std::vector<int64_t> &sizes) {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return n;
}

int64_t nbytes_of(const SlotType &t) { return numel_of(t.sizes) * static_cast<int64_t>(itemsize(t.dtype)); }

std::string join(const std::vector<int64_t> &v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

const char *kind_name(LaunchKind k) {
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
int64_t place_slots(std::vector<SlotPlan> &plans, const std::vector<int> &slots, const std::vector<Pool> &pools) {
  auto aligned = [](int64_t n) { return align_up(std::max<int64_t>(n, 1), kArenaAlignment); };
  // Placed slots per memory: index 0 the arena, 1 + i pool i.
  std::vector<std::vector<int>> placed(pools.size() + 1);
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

/// Copies the elements of `src` (any strides) into `dst`, contiguous.
template <size_t N> void copy_elements(const TensorView &src, char *dst) {
  const size_t rank = src.sizes.size();
  const int64_t total = src.numel();
  if (total == 0)
    return;
  const char *base = static_cast<const char *>(src.data());
  if (rank == 0) {
    std::memcpy(dst, base, N);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  const int64_t inner = src.sizes[rank - 1];
  const int64_t inner_stride = src.strides[rank - 1];
  int64_t outer_offset = 0; // elements, for all dims but the last
  for (int64_t done = 0; done < total; done += inner) {
    const char *row = base + outer_offset * static_cast<int64_t>(N);
    if (inner_stride == 1) {
      std::memcpy(dst, row, static_cast<size_t>(inner) * N);
      dst += inner * static_cast<int64_t>(N);
    } else {
      for (int64_t j = 0; j < inner; ++j, dst += N)
        std::memcpy(dst, row + j * inner_stride * static_cast<int64_t>(N), N);
    }
    // Advance the outer index (odometer over dims rank-2 .. 0).
    for (int64_t d = static_cast<int64_t>(rank) - 2; d >= 0; --d) {
      if (++index[d] < src.sizes[d]) {
        outer_offset += src.strides[d];
        break;
      }
      outer_offset -= (index[d] - 1) * src.strides[d];
      index[d] = 0;
    }
  }
}

void copy_to_contiguous(const TensorView &src, void *dst) {
  char *out = static_cast<char *>(dst);
  switch (itemsize(src.dtype)) {
  case 1:
    copy_elements<1>(src, out);
    break;
  case 2:
    copy_elements<2>(src, out);
    break;
  case 4:
    copy_elements<4>(src, out);
    break;
  case 8:
    copy_elements<8>(src, out);
    break;
  }
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
                                                      bool split_rows) {
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
  const bool gemm_dtype = ta.dtype == DType::Float32 || ta.dtype == DType::BFloat16 || ta.dtype == DType::Float16;
  if (!gemm_dtype || tb.dtype != ta.dtype || (rank != 2 && rank != 3) ||
      tb.sizes.size() != rank || ta.sizes[rank - 1] != tb.sizes[rank - 2] ||
      (rank == 3 && ta.sizes[0] != tb.sizes[0])) {
    fail("gemm: expected [M, K] x [K, N] or [B, M, K] x [B, K, N] of one dtype (float32, bfloat16 or float16), got " +
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

  // Greedy by size: biggest first, each into the smallest gap among the
  // already-placed slots whose live ranges overlap its own, in a pool when
  // one can hold it, else in the arena.
  std::stable_sort(arena_slots.begin(), arena_slots.end(), [&](int a, int b) {
    if (plans[a].nbytes != plans[b].nbytes)
      return plans[a].nbytes > plans[b].nbytes;
    return plans[a].def < plans[b].def;
  });
  // Pools lent by results: an Owned slot's buffer (allocated when the run
  // starts) is free before the launch that writes it.
  std::vector<Pool> pools;
  for (int s = 0; s < num_slots; ++s)
    if (plans[s].storage == SlotStorage::Owned && plans[s].nbytes > 0)
      pools.push_back(Pool{s, plans[s].nbytes, std::numeric_limits<int>::min(), plans[s].def - 1});
  exe.arena_bytes_ = place_slots(plans, arena_slots, pools);
  // The donating plan adds the donatable inputs' buffers after their last
  // use (not those a result aliases: they outlive the run).
  exe.donating_plans_ = plans;
  for (size_t i = 0; i < exe.inputs_.size(); ++i) {
    const int s = exe.inputs_[i];
    if (exe.donatable_[i] && !plans[s].escapes && nbytes_of(exe.types_[s]) > 0)
      pools.push_back(Pool{s, nbytes_of(exe.types_[s]), plans[s].last_use + 1, std::numeric_limits<int>::max()});
  }
  exe.donating_arena_bytes_ = place_slots(exe.donating_plans_, arena_slots, pools);

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

namespace {

/// Calls kernel `l` on rows [begin, end) of dim 0 of every operand and
/// result (the whole tensors when `slice` is false). Packed args: per
/// memref, allocated ptr, aligned ptr, offset, sizes, strides. The aligned
/// pointer already includes the view's offset and the descriptor offset is
/// 0: result memrefs have a static offset of 0 (identity layout), so the
/// kernel would ignore a nonzero one.
void call_kernel(const LaunchExecutable::Launch &l, const std::vector<TensorView> &values, bool slice, int64_t begin,
                 int64_t end) {
  const size_t num_memrefs = l.operands.size() + l.results.size();
  size_t num_scalars = 0;
  for (int s : l.operands)
    num_scalars += 1 + 2 * values[s].sizes.size();
  for (int s : l.results)
    num_scalars += 1 + 2 * values[s].sizes.size();
  // Per thread, reused across launches (no allocation per launch); `args`
  // points into the other two, which are sized before any pointer is taken.
  thread_local std::vector<void *> pointers, args;
  thread_local std::vector<int64_t> scalars;
  pointers.assign(2 * num_memrefs, nullptr);
  scalars.assign(num_scalars, 0);
  args.clear();
  args.reserve(2 * num_memrefs + num_scalars);
  size_t pi = 0, si = 0;
  auto push = [&](const TensorView &v) {
    const bool cut = slice && !v.sizes.empty();
    pointers[pi] = v.buffer->data();
    pointers[pi + 1] = static_cast<char *>(v.data()) +
                       (cut ? begin * v.strides[0] * static_cast<int64_t>(itemsize(v.dtype)) : 0);
    args.push_back(&pointers[pi]);
    args.push_back(&pointers[pi + 1]);
    pi += 2;
    scalars[si] = 0;
    args.push_back(&scalars[si++]);
    for (size_t d = 0; d < v.sizes.size(); ++d) {
      scalars[si] = cut && d == 0 ? end - begin : v.sizes[d];
      args.push_back(&scalars[si++]);
    }
    for (int64_t st : v.strides) {
      scalars[si] = st;
      args.push_back(&scalars[si++]);
    }
  };
  for (int s : l.operands)
    push(values[s]);
  for (int s : l.results)
    push(values[s]);
  l.fn(args.data());
}

/// Threads a split_rows launch runs on: the OpenMP threads (oneDNN's and the
/// eager kernels' pool), at most one per row, 1 below kSplitMinBytes.
int split_threads(const LaunchExecutable::Launch &l, const std::vector<TensorView> &values) {
  if (!l.split_rows || l.results.empty())
    return 1;
#ifdef _OPENMP
  int64_t bytes = 0;
  for (int s : l.operands)
    bytes += numel_of(values[s].sizes) * static_cast<int64_t>(itemsize(values[s].dtype));
  for (int s : l.results)
    bytes += numel_of(values[s].sizes) * static_cast<int64_t>(itemsize(values[s].dtype));
  const int64_t rows = values[l.results[0]].sizes.empty() ? 1 : values[l.results[0]].sizes[0];
  if (bytes < LaunchExecutable::kSplitMinBytes || rows < 2 || omp_in_parallel())
    return 1;
  return static_cast<int>(std::min<int64_t>(omp_get_max_threads(), rows));
#else
  (void)values;
  return 1;
#endif
}

} // namespace

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

bool LaunchExecutable::bindInputs(const std::vector<TensorView> &inputs, std::vector<TensorView> &values,
                                  std::string *error) const {
  auto fail = [&](const std::string &msg) {
    if (error)
      *error = msg;
    return false;
  };
  if (inputs.size() != inputs_.size())
    return fail("expected " + std::to_string(inputs_.size()) + " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView &in = inputs[i];
    const SlotType &t = types_[inputs_[i]];
    const std::string where = "input " + std::to_string(i) + ": ";
    if (in.dtype != t.dtype || in.sizes != t.sizes)
      return fail(where + "expected " + slot_type_str(t) + ", got " + slot_type_str(SlotType{in.sizes, in.dtype}));
    if (in.strides.size() != in.sizes.size())
      return fail(where + "has " + std::to_string(in.strides.size()) + " strides for rank " +
                  std::to_string(in.sizes.size()));
    if (!in.buffer)
      return fail(where + "has no buffer");
    if (in.offset < 0)
      return fail(where + "negative offset");
    int64_t last = in.offset;
    bool empty = false;
    for (size_t d = 0; d < in.sizes.size(); ++d) {
      if (in.strides[d] < 0)
        return fail(where + "negative stride " + join(in.strides));
      if (in.sizes[d] == 0)
        empty = true;
      else
        last += (in.sizes[d] - 1) * in.strides[d];
    }
    const int64_t capacity = static_cast<int64_t>(in.buffer->nbytes() / itemsize(in.dtype));
    if (!empty && last >= capacity)
      return fail(where + "view (offset " + std::to_string(in.offset) + ", strides " + join(in.strides) +
                  ") reaches element " + std::to_string(last) + " of a buffer holding " + std::to_string(capacity));
    values[inputs_[i]] = in;
    // Row-major inside the executable (addInput): copy anything else.
    const std::vector<int64_t> want = contiguous_strides(in.sizes);
    bool contiguous = true;
    for (size_t d = 0; d < in.sizes.size(); ++d)
      if (in.sizes[d] > 1 && in.strides[d] != want[d])
        contiguous = false;
    if (!contiguous && !empty) {
      auto buffer = Buffer::make(static_cast<size_t>(in.numel()) * itemsize(in.dtype));
      copy_to_contiguous(in, buffer->data());
      values[inputs_[i]] = TensorView{buffer, 0, in.sizes, want, in.dtype};
    }
  }
  return true;
}

std::vector<TensorView> LaunchExecutable::run(const std::vector<TensorView> &inputs, std::string *error) const {
  return runWith(inputs, plans_, arena_bytes_, error);
}

std::vector<TensorView> LaunchExecutable::run_donating(const std::vector<TensorView> &inputs,
                                                       std::string *error) const {
  // Every donatable input must be private (`inputs` holds the only
  // reference to its buffer), contiguous memory from offset 0; else the
  // plain plan (same results, more memory).
  bool ok = inputs.size() == inputs_.size();
  for (size_t i = 0; ok && i < inputs.size(); ++i) {
    if (!donatable_[i])
      continue;
    const TensorView &in = inputs[i];
    const SlotType &t = types_[inputs_[i]];
    ok = in.buffer && in.buffer.use_count() == 1 && in.offset == 0 && in.sizes == t.sizes && in.dtype == t.dtype &&
         static_cast<int64_t>(in.buffer->nbytes()) >= nbytes_of(t) && in.strides.size() == t.sizes.size();
    const std::vector<int64_t> want = contiguous_strides(t.sizes);
    for (size_t d = 0; ok && d < t.sizes.size(); ++d)
      ok = t.sizes[d] <= 1 || in.strides[d] == want[d];
    for (size_t j = 0; ok && j < inputs.size(); ++j)
      ok = j == i || inputs[j].buffer != in.buffer;
  }
  if (!ok)
    return runWith(inputs, plans_, arena_bytes_, error);
  return runWith(inputs, donating_plans_, donating_arena_bytes_, error);
}

std::vector<TensorView> LaunchExecutable::runWith(const std::vector<TensorView> &inputs,
                                                  const std::vector<SlotPlan> &plans, int64_t arena_bytes,
                                                  std::string *error) const {
  std::vector<TensorView> values(types_.size());
  if (!bindInputs(inputs, values, error))
    return {};
  for (const auto &[slot, buffer] : constants_) {
    const SlotType &t = types_[slot];
    values[slot] = TensorView{buffer, 0, t.sizes, contiguous_strides(t.sizes), t.dtype};
  }

  std::shared_ptr<Buffer> arena;
  if (arena_bytes > 0)
    arena = Buffer::make(static_cast<size_t>(arena_bytes));
  // Results' own buffers, allocated now: intermediates may use them before
  // they are written (pools).
  std::vector<std::shared_ptr<Buffer>> owned(types_.size());
  for (size_t s = 0; s < plans.size(); ++s)
    if (plans[s].storage == SlotStorage::Owned)
      owned[s] = Buffer::make(static_cast<size_t>(plans[s].nbytes));

  // A fresh contiguous tensor in the slot's planned memory.
  auto materialize = [&](int slot) -> TensorView & {
    const SlotPlan &p = plans[slot];
    const SlotType &t = types_[slot];
    TensorView &v = values[slot];
    v.dtype = t.dtype;
    v.sizes = t.sizes;
    v.strides = contiguous_strides(t.sizes);
    if (p.storage == SlotStorage::Arena) {
      // A pool is an Owned result not written yet, or a donated input
      // (bound at offset 0, checked by run_donating) no longer read.
      v.buffer = p.pool < 0 ? arena : plans[p.pool].storage == SlotStorage::Owned ? owned[p.pool] : values[p.pool].buffer;
      v.offset = p.arena_offset / static_cast<int64_t>(itemsize(t.dtype));
    } else if (p.storage == SlotStorage::Owned) {
      v.buffer = owned[slot];
      v.offset = 0;
    } else {
      v.buffer = Buffer::make(static_cast<size_t>(p.nbytes));
      v.offset = 0;
    }
    return v;
  };

  Profiler &profiler = Profiler::instance();
  const bool profiling = profiler.enabled();
  for (const auto &lp : launches_) {
    const Launch &l = *lp;
    const double start_us = profiling ? profiler.now_us() : 0.0;
    switch (l.kind) {
    case LaunchKind::Kernel: {
      for (int r : l.results)
        materialize(r);
      const int threads = split_threads(l, values);
      if (threads <= 1) {
        call_kernel(l, values, /*slice=*/false, 0, 0);
        break;
      }
      // Contiguous blocks of rows, one per thread (static schedule).
      const int64_t rows = values[l.results[0]].sizes[0];
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static, 1)
#endif
      for (int t = 0; t < threads; ++t)
        call_kernel(l, values, /*slice=*/true, rows * t / threads, rows * (t + 1) / threads);
      break;
    }
    case LaunchKind::Gemm: {
      const TensorView &a = values[l.operands[0]], &b = values[l.operands[1]];
      TensorView &c = materialize(l.results[0]);
      // Rank 3: strided matrix views with any batch stride (0 for a
      // broadcast operand); f32 runs one sgemm per batch entry, 16-bit
      // dtypes one gemm16_batched call.
      const size_t r = a.sizes.size();
      const int64_t batches = r == 3 ? a.sizes[0] : 1;
      const int64_t sa = r == 3 ? a.strides[0] : 0, sb = r == 3 ? b.strides[0] : 0;
      const int64_t M = a.sizes[r - 2], N = b.sizes[r - 1];
      if (a.dtype != DType::Float32) {  // bfloat16 (one oneDNN matmul for the batch) or float16 (via f32)
        Matrix16View ma{static_cast<const uint16_t *>(a.data()), M, a.sizes[r - 1], a.strides[r - 2],
                        a.strides[r - 1]};
        Matrix16View mb{static_cast<const uint16_t *>(b.data()), b.sizes[r - 2], N, b.strides[r - 2],
                        b.strides[r - 1]};
        gemm16_batched(a.dtype, batches, ma, sa, mb, sb, a.dtype, c.data(), std::max<int64_t>(N, 1), M * N);
        break;
      }
      const float *pa = static_cast<const float *>(a.data()), *pb = static_cast<const float *>(b.data());
      float *pc = static_cast<float *>(c.data());
      for (int64_t i = 0; i < batches; ++i) {
        MatrixView ma{pa + i * sa, M, a.sizes[r - 1], a.strides[r - 2], a.strides[r - 1]};
        MatrixView mb{pb + i * sb, b.sizes[r - 2], N, b.strides[r - 2], b.strides[r - 1]};
        sgemm(ma, mb, pc + i * M * N, std::max<int64_t>(N, 1));
      }
      break;
    }
    case LaunchKind::Transpose: {
      const TensorView &b = values[l.operands[0]];
      TensorView v = b;
      for (size_t i = 0; i < l.attr.size(); ++i) {
        v.sizes[i] = b.sizes[l.attr[i]];
        v.strides[i] = b.strides[l.attr[i]];
      }
      values[l.results[0]] = std::move(v);
      break;
    }
    case LaunchKind::Broadcast: {
      const TensorView &b = values[l.operands[0]];
      const size_t rank = l.attr.size(), brank = b.sizes.size();
      TensorView v = b;
      v.sizes = l.attr;
      v.strides.assign(rank, 0);
      for (size_t i = 0; i < brank; ++i) {
        size_t d = rank - brank + i;
        v.strides[d] = b.sizes[i] == l.attr[d] ? b.strides[i] : 0;
      }
      values[l.results[0]] = std::move(v);
      break;
    }
    case LaunchKind::Reshape: {
      const TensorView &b = values[l.operands[0]];
      const int r = l.results[0];
      std::vector<int64_t> strides;
      if (plans[r].base >= 0 && compute_view_strides(b.sizes, b.strides, l.attr, &strides)) {
        TensorView v = b;
        v.sizes = l.attr;
        v.strides = std::move(strides);
        values[r] = std::move(v);
      } else {
        TensorView &v = materialize(r);
        copy_to_contiguous(b, v.data());
      }
      break;
    }
    case LaunchKind::Copy: {
      TensorView &v = materialize(l.results[0]);
      copy_to_contiguous(values[l.operands[0]], v.data());
      break;
    }
    }
    if (profiling && (l.kind == LaunchKind::Kernel || l.kind == LaunchKind::Gemm || l.kind == LaunchKind::Copy))
      profiler.record(l.kind == LaunchKind::Kernel ? l.name : kind_name(l.kind), "kernel", start_us,
                      profiler.now_us() - start_us);
  }

  std::vector<TensorView> results;
  results.reserve(outputs_.size());
  for (int s : outputs_)
    results.push_back(values[s]);
  return results;
}

} // namespace kiln::runtime
