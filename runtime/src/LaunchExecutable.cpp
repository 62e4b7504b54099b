// LaunchExecutable: the Builder (launches over slots), the memory plan in
// finish(), describe(); run() is in LaunchRun.cpp.
#include "LaunchInternal.h"

#include <algorithm>
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
  case LaunchKind::Conv:
    return "conv";
  case LaunchKind::MaxPool:
    return "max_pool";
  }
  return "?";
}

namespace {

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

bool LaunchExecutable::Builder::checkKernel(const std::string &name, const KernelHandle &kernel,
                                            const std::vector<int> &operands, size_t num_results,
                                            const std::vector<std::vector<int64_t>> &operand_strides,
                                            const std::vector<InPlace> &in_place) {
  for (int o : operands)
    if (!checkSlot(o, name.c_str()))
      return false;
  if (!error_.empty())
    return false;
  for (size_t i = 0; i < operand_strides.size() && i < operands.size(); ++i) {
    const int slot = operands[i];
    const std::vector<int64_t> &want = operand_strides[i], &have = static_strides_[slot];
    const std::vector<int64_t> &sizes = type(slot).sizes;
    bool same = strides_known_[slot] && want.size() == sizes.size() && have.size() == sizes.size();
    for (size_t d = 0; same && d < sizes.size(); ++d)
      same = sizes[d] <= 1 || want[d] < 0 || want[d] == have[d];
    if (!same)
      return fail("kernel " + name + ": operand " + std::to_string(i) + " has strides " + join(have) +
                  " but the kernel was compiled for " + join(want));
  }
  if (!kernel)
    return fail("kernel " + name + ": null function");
  for (const InPlace &pair : in_place) {
    bool repeated = false;
    for (const InPlace &other : in_place)
      repeated |= &other != &pair && (other.operand == pair.operand || other.result == pair.result);
    if (pair.operand < 0 || pair.operand >= static_cast<int>(operands.size()) || pair.result < 0 ||
        pair.result >= static_cast<int>(num_results) || repeated)
      return fail("kernel " + name + ": in-place pair (operand " + std::to_string(pair.operand) + ", result " +
                  std::to_string(pair.result) + ") is out of range for " + std::to_string(operands.size()) +
                  " operands and " + std::to_string(num_results) + " results, or repeats one of them");
  }
  return true;
}

/// A fresh contiguous result of `launch` (the launch just added).
int LaunchExecutable::Builder::addProduced(SlotType type, const std::shared_ptr<Launch> &launch) {
  std::vector<int64_t> strides = contiguous_strides(type.sizes);
  int slot = addSlot(std::move(type), -1);
  if (slot < 0)
    return -1;
  exe_->plans_[slot].storage = SlotStorage::Arena; // may become Owned in finish()
  static_strides_[slot] = std::move(strides);
  strides_known_[slot] = true;
  launch->results.push_back(slot);
  return slot;
}

std::vector<int> LaunchExecutable::Builder::addKernel(std::string name, PackedKernel fn, std::vector<int> operands,
                                                      std::vector<SlotType> results,
                                                      const std::vector<std::vector<int64_t>> &operand_strides,
                                                      bool split_rows, std::vector<InPlace> in_place) {
  return addKernel(std::move(name), KernelHandle::cpu(fn, split_rows), std::move(operands), std::move(results),
                   operand_strides, std::move(in_place));
}

std::vector<int> LaunchExecutable::Builder::addKernel(std::string name, KernelHandle kernel, std::vector<int> operands,
                                                      std::vector<SlotType> results,
                                                      const std::vector<std::vector<int64_t>> &operand_strides,
                                                      std::vector<InPlace> in_place) {
  if (!checkKernel(name, kernel, operands, results.size(), operand_strides, in_place))
    return {};
  auto launch = std::make_shared<Launch>();
  launch->kind = LaunchKind::Kernel;
  launch->name = std::move(name);
  launch->kernel = std::move(kernel);
  launch->in_place = std::move(in_place);
  launch->operands = std::move(operands);
  exe_->launches_.push_back(launch);
  last_kernel_ = launch;
  for (SlotType &t : results)
    if (addProduced(std::move(t), launch) < 0)
      return {};
  return launch->results;
}

void LaunchExecutable::Builder::addIndexCheck(int status, IndexCheck check) {
  if (!checkSlot(status, "index check"))
    return;
  const SlotType &t = type(status);
  const std::shared_ptr<Launch> &last = last_kernel_;
  if (t.dtype != DType::Int64 || t.sizes != std::vector<int64_t>{kIndexStatusElements} || !last ||
      exe_->launches_.back() != last || std::find(last->results.begin(), last->results.end(), status) == last->results.end()) {
    fail("index check: slot " + std::to_string(status) + " (" + slot_type_str(t) +
         ") is not an int64 [2] result of the last kernel added");
    return;
  }
  last->checks.emplace_back(status, std::move(check));
}

void LaunchExecutable::Builder::setKernelSymbol(std::string symbol) {
  if (last_kernel_ && !exe_->launches_.empty() && exe_->launches_.back() == last_kernel_)
    last_kernel_->symbol = std::move(symbol);
}

void LaunchExecutable::Builder::setDevice(Device device) { exe_->device_ = device; }

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
  return addProduced(std::move(tc), launch);
}

namespace {

bool is_float(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::BFloat16 || t == DType::Float16;
}

/// The output size of one spatial axis of a convolution or pool.
int64_t window_count(int64_t in, int64_t k, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
}

} // namespace

int LaunchExecutable::Builder::addConv(ConvOp op, const Conv2dParams &p, int a, int b, SlotType result) {
  if (!checkSlot(a, "conv2d") || !checkSlot(b, "conv2d"))
    return -1;
  const SlotType &ta = type(a), &tb = type(b);
  // x [N, C, H, W], w [O, C/groups, kH, kW], y [N, O, OH, OW], by op.
  const SlotType *x = &ta, *w = &tb, *y = &result;
  if (op == ConvOp::InputGrad)
    x = &result, y = &ta;
  if (op == ConvOp::WeightGrad)
    w = &result, y = &tb;
  bool ok = is_float(ta.dtype) && tb.dtype == ta.dtype && result.dtype == ta.dtype && x->sizes.size() == 4 &&
            w->sizes.size() == 4 && y->sizes.size() == 4 && p.groups >= 1;
  ok = ok && w->sizes[1] * p.groups == x->sizes[1] && y->sizes[0] == x->sizes[0] && y->sizes[1] == w->sizes[0];
  for (int axis = 0; ok && axis < 2; ++axis)
    ok = y->sizes[2 + axis] == window_count(x->sizes[2 + axis], w->sizes[2 + axis], p.stride[axis],
                                            p.padding[axis], p.dilation[axis]);
  if (!ok) {
    fail("conv2d: inconsistent input " + slot_type_str(*x) + ", weight " + slot_type_str(*w) + ", output " +
         slot_type_str(*y) + " (groups " + std::to_string(p.groups) + ")");
    return -1;
  }
  auto launch = std::make_shared<Launch>();
  launch->kind = LaunchKind::Conv;
  launch->name = op == ConvOp::Forward ? "conv2d" : op == ConvOp::InputGrad ? "conv2d_input_grad" : "conv2d_weight_grad";
  launch->operands = {a, b};
  launch->conv_op = op;
  launch->conv = p;
  exe_->launches_.push_back(launch);
  return addProduced(std::move(result), launch);
}

int LaunchExecutable::Builder::addMaxPool(MaxPoolOp op, const Pool2dParams &p, int a, int indices, SlotType result) {
  if (!checkSlot(a, "max_pool2d") || (op != MaxPoolOp::Forward && !checkSlot(indices, "max_pool2d")))
    return -1;
  const SlotType &ta = type(a);
  const bool float_data = ta.dtype == DType::Float32 || ta.dtype == DType::Float64 || ta.dtype == DType::BFloat16 ||
                          ta.dtype == DType::Float16;
  const bool result_ok = op == MaxPoolOp::Forward ? (result.dtype == ta.dtype || result.dtype == DType::Int64)
                                                  : result.dtype == ta.dtype;
  const bool indices_ok = op == MaxPoolOp::Forward || type(indices).dtype == DType::Int64;
  if (!float_data || !result_ok || !indices_ok || ta.sizes.size() != 4 || result.sizes.size() != 4) {
    fail("max_pool2d: expected a floating-point [N, C, H, W] operand, int64 indices and a rank-4 result, got " +
         slot_type_str(ta) + " -> " + slot_type_str(result));
    return -1;
  }
  auto launch = std::make_shared<Launch>();
  launch->kind = LaunchKind::MaxPool;
  launch->name = op == MaxPoolOp::Forward ? "max_pool2d" : op == MaxPoolOp::Backward ? "max_pool2d_backward"
                                                                                      : "max_pool2d_gather";
  launch->operands = {a};
  if (op != MaxPoolOp::Forward)
    launch->operands.push_back(indices);
  launch->pool_op = op;
  launch->pool = p;
  exe_->launches_.push_back(launch);
  return addProduced(std::move(result), launch);
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
  const auto *first = static_cast<const unsigned char *>(data);
  constant_bytes_.emplace_back(slot, std::vector<unsigned char>(first, first + bytes));
  exe_->plans_[slot].storage = SlotStorage::Constant;
  exe_->plans_[slot].def = -1;
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
  return addProduced(std::move(t), launch);
}

void LaunchExecutable::Builder::setOutputs(std::vector<int> slots) {
  for (int s : slots)
    if (!checkSlot(s, "outputs"))
      return;
  exe_->outputs_ = std::move(slots);
}

void LaunchExecutable::Builder::keepAlive(std::shared_ptr<const void> owner) { exe_->keep_alive_ = std::move(owner); }

/// The planner's view of the function: each slot's storage class, bytes,
/// definition, base and whether its strides are row-major.
PlanProblem LaunchExecutable::Builder::planProblem() const {
  const LaunchExecutable &exe = *exe_;
  PlanProblem problem;
  for (size_t s = 0; s < exe.types_.size(); ++s) {
    const SlotPlan &p = exe.plans_[s];
    PlanSlot slot;
    slot.storage = p.storage;
    slot.bytes = nbytes_of(exe.types_[s]);
    slot.def = p.def;
    slot.base = p.base;
    slot.row_major = static_strides_[s] == contiguous_strides(exe.types_[s].sizes);
    problem.slots.push_back(slot);
  }
  for (size_t i = 0; i < exe.inputs_.size(); ++i)
    problem.slots[exe.inputs_[i]].donatable = exe.donatable_[i];
  for (const auto &l : exe.launches_)
    problem.launches.push_back(PlanLaunch{l->operands, l->results, l->in_place});
  problem.outputs = exe.outputs_;
  return problem;
}

/// Copies the constants' host bytes into buffers on the executable's device.
bool LaunchExecutable::Builder::placeConstants(std::string *error) {
  LaunchExecutable &exe = *exe_;
  if (constant_bytes_.empty())
    return true;
  DeviceBackend *backend = find_backend(exe.device_.type);
  if (!backend) {
    if (error)
      *error = "no device backend registered for " + exe.device_.str();
    return false;
  }
  for (auto &[slot, bytes] : constant_bytes_) {
    auto buffer = Buffer::make(std::max<size_t>(bytes.size(), 1), backend->allocator(exe.device_.index));
    backend->copy(buffer->data(), exe.device_, bytes.data(), kCPU, bytes.size());
    exe.constants_.emplace_back(slot, std::move(buffer));
  }
  constant_bytes_.clear();
  return true;
}

/// RunHooks order: each output with the last launch of its view chain (the
/// one writing its memory or a view launch shaping it; -1 for inputs and
/// constants), sorted by launch, then output index. The output's value is
/// bound once that launch has run.
void LaunchExecutable::Builder::orderOutputsByReadiness() {
  LaunchExecutable &exe = *exe_;
  exe.ready_order_.clear();
  for (size_t i = 0; i < exe.outputs_.size(); ++i) {
    int s = exe.outputs_[i];
    int last = exe.plans_[s].def;
    while (exe.plans_[s].storage == SlotStorage::View) {
      s = exe.plans_[s].base;
      last = std::max(last, exe.plans_[s].def);
    }
    exe.ready_order_.emplace_back(last, static_cast<int>(i));
  }
  std::sort(exe.ready_order_.begin(), exe.ready_order_.end());
}

std::shared_ptr<LaunchExecutable> LaunchExecutable::Builder::finish(std::string *error) {
  if (!error_.empty()) {
    if (error)
      *error = error_;
    return nullptr;
  }
  if (!placeConstants(error))
    return nullptr;
  LaunchExecutable &exe = *exe_;
  MemoryPlan plan = plan_memory(planProblem());
  exe.plans_ = std::move(plan.slots);
  exe.donating_plans_ = std::move(plan.donating_slots);
  exe.arena_bytes_ = plan.arena_bytes;
  exe.donating_arena_bytes_ = plan.donating_arena_bytes;
  exe.num_in_place_ = plan.num_in_place;
  exe.num_in_place_donating_ = plan.num_in_place_donating;
  orderOutputsByReadiness();

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
    n += l->kind == LaunchKind::Kernel && l->kernel.split_rows;
  return n;
}

std::vector<LaunchExecutable::CountedLaunch> LaunchExecutable::counted_launches() const {
  std::vector<CountedLaunch> out;
  for (const auto &l : launches_) {
    const bool counted = l->kind == LaunchKind::Kernel || l->kind == LaunchKind::Gemm || l->kind == LaunchKind::Copy ||
                         l->kind == LaunchKind::Conv || l->kind == LaunchKind::MaxPool ||
                         (l->kind == LaunchKind::Reshape && plans_[l->results[0]].storage != SlotStorage::View);
    if (!counted)
      continue;
    int64_t bytes = 0;
    if (!l->results.empty()) {
      const SlotType &t = types_[l->results[0]];
      bytes = static_cast<int64_t>(itemsize(t.dtype));
      for (int64_t d : t.sizes)
        bytes *= d;
    }
    out.push_back(CountedLaunch{l->kind, bytes});
  }
  return out;
}

int LaunchExecutable::num_launches() const {
  int n = 0;
  for (const auto &l : launches_) {
    switch (l->kind) {
    case LaunchKind::Kernel:
    case LaunchKind::Gemm:
    case LaunchKind::Copy:
    case LaunchKind::Conv:
    case LaunchKind::MaxPool:
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
      n += arena_slot_bytes(p.nbytes);
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
      os << (p.pool >= 0 ? " in %" + std::to_string(p.pool) : std::string()) << " @" << p.offset;
    const SlotPlan &d = donating_plans_[s];
    if (d.storage == SlotStorage::Arena && (d.pool != p.pool || d.offset != p.offset))
      os << " (donating: " << (d.pool >= 0 ? "in %" + std::to_string(d.pool) + " " : std::string()) << "@"
         << d.offset << ")";
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
