// LaunchExecutable::run(): binds the inputs, allocates the arena and the
// results' buffers on the executable's device, and hands the launches in
// order (kernels, GEMMs, copies) to that device's backend on its default
// stream; views are bound here. Backend-neutral: no kernel calling
// convention, GEMM library or host copy is used here (runtime/src/cpu/).
#include "LaunchInternal.h"

#include <cstring>

#include <exception>
#include <string>

#include "kiln/runtime/Profiler.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CudaGraph.h"
#include "kiln/runtime/cuda/CurrentStream.h"

namespace kiln::runtime {

using detail::join;
using detail::kind_name;
using detail::nbytes_of;

/// One run: the plan it follows, the backend and stream doing the work, the
/// value of every slot and the planned buffers.
struct LaunchExecutable::RunState {
  const std::vector<SlotPlan> &plans;
  DeviceBackend &backend;
  Stream &stream;
  std::vector<TensorView> values;
  std::shared_ptr<Buffer> arena;
  std::vector<std::shared_ptr<Buffer>> owned; ///< per slot: an Owned slot's buffer
  KernelArgs args;                            ///< reused by every kernel launch
  bool capturing = false;                     ///< the stream is capturing a CUDA graph (no host reads)
};

namespace {

/// "[4, 5] strides [5, 1] float32", for error messages.
std::string view_str(const TensorView &v) {
  return slot_type_str(SlotType{v.sizes, v.dtype}) + " strides " + join(v.strides);
}

bool set_error(std::string *error, const std::string &message) {
  if (error)
    *error = message;
  return false;
}

/// The checks bindInputs makes on input `i` of type `t` ("" when fine).
std::string check_input(const TensorView &in, const SlotType &t, Device device) {
  if (in.dtype != t.dtype || in.sizes != t.sizes)
    return "expected " + slot_type_str(t) + ", got " + slot_type_str(SlotType{in.sizes, in.dtype});
  if (in.strides.size() != in.sizes.size())
    return "has " + std::to_string(in.strides.size()) + " strides for rank " + std::to_string(in.sizes.size());
  if (!in.buffer)
    return "has no buffer";
  if (in.buffer->device() != device)
    return "expected a tensor on " + device.str() + ", got " + in.buffer->device().str();
  if (in.offset < 0)
    return "negative offset";
  int64_t last = in.offset;
  bool empty = false;
  for (size_t d = 0; d < in.sizes.size(); ++d) {
    if (in.strides[d] < 0)
      return "negative stride " + join(in.strides);
    if (in.sizes[d] == 0)
      empty = true;
    else
      last += (in.sizes[d] - 1) * in.strides[d];
  }
  const int64_t capacity = static_cast<int64_t>(in.buffer->nbytes() / itemsize(in.dtype));
  if (!empty && last >= capacity)
    return "view (offset " + std::to_string(in.offset) + ", strides " + join(in.strides) + ") reaches element " +
           std::to_string(last) + " of a buffer holding " + std::to_string(capacity);
  return "";
}

/// Row-major up to dims of size <= 1 (the executable's input layout).
bool is_row_major(const TensorView &v) {
  const std::vector<int64_t> want = contiguous_strides(v.sizes);
  for (size_t d = 0; d < v.sizes.size(); ++d)
    if (v.sizes[d] > 1 && v.strides[d] != want[d])
      return false;
  return true;
}

} // namespace

bool LaunchExecutable::bindInputs(const std::vector<TensorView> &inputs, RunState &state, std::string *error) const {
  if (inputs.size() != inputs_.size())
    return set_error(error,
                     "expected " + std::to_string(inputs_.size()) + " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView &in = inputs[i];
    const std::string problem = check_input(in, types_[inputs_[i]], device_);
    if (!problem.empty())
      return set_error(error, "input " + std::to_string(i) + ": " + problem);
    TensorView &value = state.values[inputs_[i]];
    value = in;
    // Row-major inside the executable (addInput): copy anything else.
    if (!is_row_major(in) && in.numel() > 0) {
      Allocator &alloc = state.backend.allocator(device_.index);
      auto buffer = Buffer::make(static_cast<size_t>(in.numel()) * itemsize(in.dtype), alloc);
      state.backend.copy_to_contiguous(in, buffer->data(), state.stream);
      value = TensorView{buffer, 0, in.sizes, contiguous_strides(in.sizes), in.dtype};
    }
  }
  for (const auto &[slot, buffer] : constants_) {
    const SlotType &t = types_[slot];
    state.values[slot] = TensorView{buffer, 0, t.sizes, contiguous_strides(t.sizes), t.dtype};
  }
  return true;
}

/// The arena and the results' own buffers, allocated when the run starts:
/// intermediates may use a result's buffer before it is written (pools).
void LaunchExecutable::allocatePlanned(RunState &state, int64_t arena_bytes) const {
  Allocator &alloc = state.backend.allocator(device_.index);
  if (arena_bytes > 0)
    state.arena = Buffer::make(static_cast<size_t>(arena_bytes), alloc);
  state.owned.resize(types_.size());
  for (size_t s = 0; s < state.plans.size(); ++s)
    if (state.plans[s].storage == SlotStorage::Owned)
      state.owned[s] = Buffer::make(static_cast<size_t>(state.plans[s].nbytes), alloc);
}

/// A fresh contiguous tensor in the slot's planned memory.
TensorView &LaunchExecutable::materialize(RunState &state, int slot) const {
  const SlotPlan &p = state.plans[slot];
  const SlotType &t = types_[slot];
  TensorView &v = state.values[slot];
  v.dtype = t.dtype;
  v.sizes = t.sizes;
  v.strides = contiguous_strides(t.sizes);
  v.offset = 0;
  if (p.storage == SlotStorage::Arena) {
    // A pool is an Owned result not written yet, or a donated input (bound
    // at offset 0, checked by run_donating) no longer read.
    if (p.pool < 0)
      v.buffer = state.arena;
    else if (state.plans[p.pool].storage == SlotStorage::Owned)
      v.buffer = state.owned[p.pool];
    else
      v.buffer = state.values[p.pool].buffer;
    v.offset = p.offset / static_cast<int64_t>(itemsize(t.dtype));
  } else if (p.storage == SlotStorage::Owned) {
    v.buffer = state.owned[slot];
  } else {
    v.buffer = Buffer::make(static_cast<size_t>(p.nbytes), state.backend.allocator(device_.index));
  }
  return v;
}

void LaunchExecutable::runKernel(const Launch &l, RunState &state) const {
  KernelArgs &args = state.args;
  args.operands.clear();
  args.results.clear();
  for (int r : l.results)
    args.results.push_back(&materialize(state, r));
  for (int o : l.operands)
    args.operands.push_back(&state.values[o]);
  state.backend.launch(l.kernel, args, state.stream);
}

/// A convolution or max pooling primitive on the device's backend.
void LaunchExecutable::runExtern(const Launch &l, RunState &state) const {
  TensorView &out = materialize(state, l.results[0]);
  const TensorView &a = state.values[l.operands[0]];
  if (l.kind == LaunchKind::Conv) {
    state.backend.conv2d(l.conv_op, l.conv, a, state.values[l.operands[1]], out, state.stream);
    return;
  }
  const TensorView none;
  if (l.pool_op == MaxPoolOp::Forward) {
    const bool indices = out.dtype == DType::Int64;
    state.backend.max_pool2d(l.pool_op, l.pool, a, indices ? out : none, indices ? none : out, state.stream);
    return;
  }
  state.backend.max_pool2d(l.pool_op, l.pool, a, state.values[l.operands[1]], out, state.stream);
}

/// Transpose and broadcast: a new view of the base's memory.
void LaunchExecutable::bindView(const Launch &l, RunState &state) const {
  const TensorView &b = state.values[l.operands[0]];
  TensorView v = b;
  if (l.kind == LaunchKind::Transpose) {
    for (size_t i = 0; i < l.attr.size(); ++i) {
      v.sizes[i] = b.sizes[l.attr[i]];
      v.strides[i] = b.strides[l.attr[i]];
    }
  } else {
    const size_t rank = l.attr.size(), brank = b.sizes.size();
    v.sizes = l.attr;
    v.strides.assign(rank, 0);
    for (size_t i = 0; i < brank; ++i) {
      const size_t d = rank - brank + i;
      v.strides[d] = b.sizes[i] == l.attr[d] ? b.strides[i] : 0;
    }
  }
  state.values[l.results[0]] = std::move(v);
}

/// Performs one launch; a backend failure becomes `error` (naming the
/// launch, and for a GEMM its shapes and strides) and false.
bool LaunchExecutable::runLaunch(const Launch &l, RunState &state, std::string *error) const {
  try {
    switch (l.kind) {
    case LaunchKind::Kernel:
      runKernel(l, state);
      break;
    case LaunchKind::Gemm: {
      TensorView &c = materialize(state, l.results[0]);
      const TensorView &a = state.values[l.operands[0]], &b = state.values[l.operands[1]];
      try {
        state.backend.gemm(a, b, c, state.stream);
      } catch (const std::exception &e) {
        return set_error(error, l.name + ": " + view_str(a) + " x " + view_str(b) + ": " + e.what());
      }
      break;
    }
    case LaunchKind::Conv:
    case LaunchKind::MaxPool:
      runExtern(l, state);
      break;
    case LaunchKind::Transpose:
    case LaunchKind::Broadcast:
      bindView(l, state);
      break;
    case LaunchKind::Reshape: {
      const TensorView &b = state.values[l.operands[0]];
      const int r = l.results[0];
      std::vector<int64_t> strides;
      if (state.plans[r].base >= 0 && compute_view_strides(b.sizes, b.strides, l.attr, &strides)) {
        TensorView v = b;
        v.sizes = l.attr;
        v.strides = std::move(strides);
        state.values[r] = std::move(v);
      } else {
        state.backend.copy_to_contiguous(b, materialize(state, r).data(), state.stream);
      }
      break;
    }
    case LaunchKind::Copy:
      state.backend.copy_to_contiguous(state.values[l.operands[0]], materialize(state, l.results[0]).data(),
                                       state.stream);
      break;
    }
  } catch (const std::exception &e) {
    return set_error(error, std::string(kind_name(l.kind)) + " " + l.name + ": " + e.what());
  }
  return true;
}

/// Calls on_output_ready for every output whose memory launch `launch` (-1:
/// before the first) wrote; `next` walks ready_order_.
void LaunchExecutable::reportReady(size_t &next, int launch, const RunState &state, const RunHooks *hooks) const {
  for (; next < ready_order_.size() && ready_order_[next].first <= launch; ++next)
    if (hooks && hooks->on_output_ready) {
      const int k = ready_order_[next].second;
      hooks->on_output_ready(k, state.values[outputs_[k]]);
    }
}

std::vector<TensorView> LaunchExecutable::run(const std::vector<TensorView> &inputs, std::string *error,
                                              const RunHooks *hooks) const {
  return runWith(inputs, /*donating=*/false, error, hooks);
}

/// Every donatable input must be private (`inputs` holds the only reference
/// to its buffer), contiguous memory from offset 0; else run_donating runs
/// the plain plan (same results, more memory).
bool LaunchExecutable::usesDonatingPlan(const std::vector<TensorView> &inputs) const {
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
  return ok;
}

bool LaunchExecutable::checkIndices(const Launch &l, RunState &state, std::string *error) const {
  if (state.capturing) { // no host read in a capture: the capturer reads the status words after each replay
    for (const auto &[slot, check] : l.checks) {
      const IndexCheck c = check;
      const size_t n = sizeof(int64_t) * kIndexStatusElements;
      std::shared_ptr<Buffer> copy = Buffer::make(n, state.backend.allocator(device_.index));
      state.backend.copy_async(copy->data(), device_, state.values[slot].data(), device_, n, state.stream);
      cuda::deferred_index_checks().push_back(
          {copy->data(), copy, [c](int64_t bad) { return kIndexErrorPrefix + index_error(c, bad); }});
    }
    return true;
  }
  for (const auto &[slot, check] : l.checks) {
    int64_t status[kIndexStatusElements] = {0, 0};
    const TensorView &v = state.values[slot];
    state.stream.synchronize();
    if (state.backend.host_accessible()) {
      std::memcpy(status, v.data(), sizeof(status));
    } else {
      state.backend.copy(status, kCPU, v.data(), device_, sizeof(status));
    }
    if (status[0] != 0)
      return set_error(error, kIndexErrorPrefix + index_error(check, status[1]));
  }
  return true;
}

std::vector<TensorView> LaunchExecutable::run_donating(const std::vector<TensorView> &inputs, std::string *error,
                                                       const RunHooks *hooks) const {
  return runWith(inputs, usesDonatingPlan(inputs), error, hooks);
}

std::vector<TensorView> LaunchExecutable::runWith(const std::vector<TensorView> &inputs, bool donating,
                                                  std::string *error, const RunHooks *hooks) const {
  DeviceBackend *backend = find_backend(device_.type);
  if (!backend) {
    set_error(error, "no device backend registered for " + device_.str());
    return {};
  }
  // CUDA: the thread's current stream of the device (CurrentStream.h), so
  // a run follows the caller's eager work and can be captured (CudaGraph);
  // other devices: their default stream.
  std::unique_ptr<Stream> current;
  bool capturing = false;
  if (device_.type == DeviceType::CUDA) {
    const cuda::StreamHandle handle = cuda::current_stream(device_.index);
    if (handle != cuda::kDefaultStream) {
      current = cuda::borrowed_stream(device_.index, handle);
      capturing = cuda::capturing_stream(device_.index) == handle;
    }
  }
  Stream &stream = current ? *current : backend->default_stream(device_.index);
  RunState state{donating ? donating_plans_ : plans_, *backend, stream, std::vector<TensorView>(types_.size()), {},
                 {}, {}};
  state.capturing = capturing;
  if (!bindInputs(inputs, state, error))
    return {};
  allocatePlanned(state, donating ? donating_arena_bytes_ : arena_bytes_);

  Profiler &profiler = Profiler::instance();
  const bool profiling = profiler.enabled();
  size_t next_ready = 0;
  reportReady(next_ready, -1, state, hooks);
  for (size_t i = 0; i < launches_.size(); ++i) {
    const Launch &l = *launches_[i];
    const double start_us = profiling ? profiler.now_us() : 0.0;
    if (!runLaunch(l, state, error) || !checkIndices(l, state, error))
      return {};
    if (profiling && (l.kind == LaunchKind::Kernel || l.kind == LaunchKind::Gemm || l.kind == LaunchKind::Copy ||
                      l.kind == LaunchKind::Conv || l.kind == LaunchKind::MaxPool))
      profiler.record(l.kind == LaunchKind::Kernel ? l.name : kind_name(l.kind), "kernel", start_us,
                      profiler.now_us() - start_us);
    reportReady(next_ready, static_cast<int>(i), state, hooks);
  }
  if (!capturing) // a capturing stream cannot be synchronized: the replay's caller does
    stream.synchronize();

  std::vector<TensorView> results;
  results.reserve(outputs_.size());
  for (int s : outputs_)
    results.push_back(state.values[s]);
  return results;
}

} // namespace kiln::runtime
