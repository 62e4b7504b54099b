// kiln/runtime/LaunchExecutable.h - the Executable of every backend: a list
// of launches over value slots, with a static memory plan (MemoryPlan.h).
// It keeps the slots, views and the plan; kernels, GEMMs and copies go to
// the DeviceBackend of its device (Builder::setDevice, default the CPU), on
// that device's default stream.
//
// Codegen describes one compiled function with a Builder:
//
//   LaunchExecutable::Builder b;
//   int x = b.addInput({4, 8}, kFloat32);             // function argument 0
//   int w = b.addInput({16, 8}, kFloat32);            // function argument 1
//   int wt = b.addTranspose(w, {1, 0});               // view: [8, 16]
//   int y = b.addGemm(x, wt);                         // oneDNN: [4, 16]
//   int z = b.addKernel("fusion_0", fn, {y}, {{{4, 16}, kFloat32}})[0];
//   b.setOutputs({z, wt});
//   std::shared_ptr<LaunchExecutable> exe = b.finish(&error);
//
// Every slot has a static shape and dtype. Kernel, GEMM and copy results are
// fresh contiguous (row-major) tensors; transpose/broadcast/reshape results
// are views of their base (reshape copies at run time only when the base's
// strides do not allow a view, following PyTorch's view rules).
//
// The memory plan (computed by finish() with plan_memory, MemoryPlan.h):
//   - liveness: a slot is live from the launch that defines it to the last
//     launch that reads it or any view of it (a view keeps its base alive);
//   - slots that escape (function results, and everything a result is a view
//     of) get their own runtime::Buffer per run, so results outlive the run;
//   - every other produced slot gets an offset in one arena, 64-byte aligned;
//     offsets are assigned greedily by decreasing size, each placed in the
//     smallest gap left by already-placed slots whose live ranges overlap
//     (TFLite's "greedy by size" planner). Two slots used by the same launch
//     never share memory, except a kernel's in-place pair (below).
//   - memory that is allocated anyway is lent to intermediates first
//     ("pools"): a result's own buffer before the launch that writes it
//     (results are allocated when the run starts), and, in the donating
//     plan, a donated input's buffer after its last use (addInput with
//     donatable = true, run_donating()). A slot goes into a pool when its
//     whole live range fits the pool's free window and a gap of the pool
//     holds it (best fit, the same greedy order); the rest go to the arena.
//     Inductor's and XLA's buffer reuse do the same with dead inputs
//     (donation) and not-yet-written outputs.
//   - in place: a kernel added with InPlace pairs (an elementwise kernel
//     compiled to run correctly when each pair's operand and result are at
//     one address) writes a pair's result over its operand when the
//     operand's memory dies at that launch: the operand (through row-major views) is
//     a non-escaping arena slot (or, in the donating plan, a donated input)
//     of the result's bytes, read by no later launch — for all of the
//     launch's pairs, else for none (the kernel has one branch for all
//     pairs aliased). The two then share one placement, live from the
//     operand's definition to the result's last use (XLA's
//     CanShareOperandBufferWithUser, the same idea).
// The arena is one Buffer allocated per run (runs are independent and may
// proceed concurrently: run() is const and keeps all its state local).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/Executable.h"
#include "kiln/runtime/IndexCheck.h"
#include "kiln/runtime/MemoryPlan.h"

namespace kiln::runtime {

/// Static type of a value slot: shape (sizes, elements) and dtype.
struct SlotType {
  std::vector<int64_t> sizes;
  DType dtype = DType::Float32;
};

/// What one entry of the launch list does.
enum class LaunchKind : int8_t {
  Kernel,    ///< a JIT kernel (PackedKernel), destination-passing results
  Gemm,      ///< [M, K] x [K, N] -> [M, N] (or batched [B, M, K] x [B, K, N]): f32 through runtime::sgemm,
             ///< bf16 and f16 through runtime::gemm16_batched; the result has the operands' dtype
  Transpose, ///< view: permuted sizes/strides
  Broadcast, ///< view: numpy right-aligned expand (stride 0)
  Reshape,   ///< view when strides allow, else a contiguous copy
  Copy,      ///< contiguous copy of any strided view
  Conv,      ///< one convolution primitive (Conv.h, DeviceBackend::conv2d): a fresh contiguous result
  MaxPool,   ///< one max pooling primitive (Conv.h, DeviceBackend::max_pool2d): a fresh contiguous result
};

class LaunchExecutable final : public Executable {
public:
  class Builder;

  /// Runs the launches in order. `inputs` must match the slot types given to
  /// Builder::addInput (sizes and dtype exactly; any non-negative strides and
  /// offset that stay inside the buffer). On mismatch, returns {} and sets
  /// `*error` (e.g. "input 1: expected float32 [4, 8], got float32 [8, 4]").
  /// Inputs must live on device(). `hooks` (optional): RunHooks.h; with
  /// hooks the run synchronizes the stream before returning, as without.
  std::vector<TensorView> run(const std::vector<TensorView> &inputs, std::string *error = nullptr,
                              const RunHooks *hooks = nullptr) const override;
  /// run() with the donating plan: the caller gives up the memory of every
  /// input added with `donatable`. Each must be contiguous at offset 0 of a
  /// buffer holding at least its type's bytes, and `inputs` must hold the
  /// only reference to that buffer (use_count 1: a tensor still held
  /// elsewhere is never overwritten); otherwise (checked) the plain plan
  /// runs instead, so the result is the same either way.
  std::vector<TensorView> run_donating(const std::vector<TensorView> &inputs, std::string *error = nullptr,
                                       const RunHooks *hooks = nullptr) const override;
  /// Bytes of the per-run arena (the sum of the plan's peak, 64-byte aligned).
  int64_t arena_bytes() const override { return arena_bytes_; }
  /// Bytes of the arena under the donating plan (<= arena_bytes()).
  int64_t donating_arena_bytes() const override { return donating_arena_bytes_; }
  /// Kernel + GEMM + copy launches per run (views are free and not counted;
  /// a reshape that must copy at run time is counted as one launch).
  int num_launches() const override;
  /// The launches num_launches() counts, in run order: each one's kind and
  /// the bytes of its first result (for reports: a Copy, or a Reshape that
  /// copies, reads and writes that many bytes).
  struct CountedLaunch {
    LaunchKind kind;
    int64_t result_bytes;
  };
  std::vector<CountedLaunch> counted_launches() const;

  /// Kernel launches that may run split over threads (Builder::addKernel's
  /// `split_rows`).
  int num_split_kernels() const;
  /// Kernel results the plan writes over an operand (Builder::addKernel's
  /// `in_place`): in the plain plan, and in the donating plan.
  int num_in_place() const { return num_in_place_; }
  int num_in_place_donating() const { return num_in_place_donating_; }
  /// The CPU backend's row-split threshold (kCpuSplitMinBytes, DeviceBackend.h).
  static constexpr int64_t kSplitMinBytes = kCpuSplitMinBytes;
  /// The device whose backend runs the launches (Builder::setDevice).
  Device device() const { return device_; }

  /// Bytes of memory owned by escaping slots per run (results).
  int64_t owned_bytes() const;
  /// Sum of all non-escaping produced slots' sizes: what the arena would
  /// need without reuse (arena_bytes() <= this).
  int64_t unplanned_bytes() const;
  const std::vector<SlotType> &slot_types() const { return types_; }
  const std::vector<SlotPlan> &slot_plans() const { return plans_; }
  /// Whether input `i` (argument order) was added donatable.
  bool input_donatable(size_t i) const { return i < donatable_.size() && donatable_[i]; }
  /// The plan run_donating() uses (same storage classes; pools may be donated inputs).
  const std::vector<SlotPlan> &donating_slot_plans() const { return donating_plans_; }
  /// A human-readable listing of launches and the plan, one line each.
  std::string describe() const;

  struct Launch;   // defined in LaunchInternal.h
  struct RunState; // one run's values and buffers (LaunchRun.cpp)
  /// Encodes an executable as data and rebuilds it (the export artifact's
  /// launch list, runtime/src/artifact/LaunchCodec.cpp).
  friend struct LaunchCodec;

private:
  LaunchExecutable() = default;
  bool usesDonatingPlan(const std::vector<TensorView> &inputs) const;
  std::vector<TensorView> runWith(const std::vector<TensorView> &inputs, bool donating, std::string *error,
                                  const RunHooks *hooks) const;
  bool bindInputs(const std::vector<TensorView> &inputs, RunState &state, std::string *error) const;
  void allocatePlanned(RunState &state, int64_t arena_bytes) const;
  TensorView &materialize(RunState &state, int slot) const;
  bool runLaunch(const Launch &l, RunState &state, std::string *error) const;
  bool checkIndices(const Launch &l, RunState &state, std::string *error) const;
  void runKernel(const Launch &l, RunState &state) const;
  void runExtern(const Launch &l, RunState &state) const;
  void bindView(const Launch &l, RunState &state) const;
  void reportReady(size_t &next, int launch, const RunState &state, const RunHooks *hooks) const;

  std::vector<SlotType> types_;
  std::vector<SlotPlan> plans_;
  std::vector<SlotPlan> donating_plans_;
  std::vector<bool> donatable_; ///< per input (argument order)
  std::vector<std::shared_ptr<const Launch>> launches_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
  std::vector<std::pair<int, std::shared_ptr<Buffer>>> constants_; ///< slot, data (on device_)
  std::vector<std::pair<int, int>> ready_order_; ///< (launch writing it or -1, output index), sorted (RunHooks)
  Device device_ = kCPU;
  int64_t arena_bytes_ = 0;
  int64_t donating_arena_bytes_ = 0;
  int num_in_place_ = 0;
  int num_in_place_donating_ = 0;
  std::shared_ptr<const void> keep_alive_;
};

/// Describes one function as launches over slots; finish() plans memory.
/// Slot ids are dense ints in creation order. Every add* validates its
/// operands (slot ids, ranks, shapes, dtypes); the first error is kept and
/// returned by finish(), later calls return -1 / empty vectors.
class LaunchExecutable::Builder {
public:
  Builder();
  ~Builder();

  /// The next function argument (arguments are numbered in call order).
  /// Inputs are row-major inside the executable: run() binds a contiguous
  /// input as is and copies any other (transposed, expanded, sliced) into a
  /// contiguous buffer first, so every slot's strides are known here and
  /// kernels can be specialized on them.
  /// `donatable`: run_donating() may reuse the input's buffer for
  /// intermediates after the input's last use (e.g. a compiled backward's
  /// saved activations, which nothing reads after it).
  int addInput(std::vector<int64_t> sizes, DType dtype, bool donatable = false);
  /// A JIT kernel in MLIR's packed convention: its flattened argument list is
  /// one memref descriptor per operand (the operand's strided view), then
  /// one per result (a fresh contiguous tensor of `results[i]`). Each
  /// descriptor is: allocated ptr = the buffer's start, aligned ptr = the
  /// view's first element, offset 0, sizes[r], strides[r] (elements), so
  /// identity-layout memrefs (static offset 0) see the right data. Returns
  /// the result slots. `name` is for describe() and errors.
  /// `operand_strides` (optional, one per operand): the strides the kernel
  /// was compiled for (its memref layouts); an operand whose strides differ
  /// in a dim of size > 1 is an error (a codegen bug, never a silent misread).
  /// `split_rows`: the kernel reads every size of dim 0 from its memref
  /// descriptors and dim 0 is one parallel loop over all operands and
  /// results (codegen's isRowSplittable), so run() may call it on disjoint
  /// ranges of dim 0 from several OpenMP threads (each call gets its slice:
  /// pointer advanced by begin * stride[0], sizes[0] = end - begin), when the
  /// launch touches at least kSplitMinBytes. Row-independent work: the result
  /// does not depend on the thread count.
  /// `in_place`: pairs (each operand and each result at most once) whose
  /// result the kernel computes the same when it is at the address of the
  /// operand (an elementwise kernel reading that operand and writing that
  /// result at the same index, codegen's inPlacePairs); the plan then may
  /// give each pair one placement (see the memory plan above).
  std::vector<int> addKernel(std::string name, PackedKernel fn, std::vector<int> operands,
                             std::vector<SlotType> results,
                             const std::vector<std::vector<int64_t>> &operand_strides = {}, bool split_rows = false,
                             std::vector<InPlace> in_place = {});
  /// The same with a kernel library's handle (its split_rows flag replaces
  /// the argument above); the device's backend launches it.
  std::vector<int> addKernel(std::string name, KernelHandle kernel, std::vector<int> operands,
                             std::vector<SlotType> results,
                             const std::vector<std::vector<int64_t>> &operand_strides = {},
                             std::vector<InPlace> in_place = {});
  /// The device the executable runs on (default: the CPU). Its backend must
  /// be registered when finish() runs (constants are copied there) and when
  /// the executable runs.
  void setDevice(Device device);
  /// Element strides of a slot, as run() will see them (known for every slot).
  const std::vector<int64_t> &strides(int slot) const { return static_strides_.at(slot); }
  /// GEMM: a [M, K], b [K, N] (any strides) -> fresh [M, N]; or
  /// batched: a [B, M, K], b [B, K, N] -> fresh [B, M, N] on strided views
  /// (any batch strides, 0 included). a and b have one dtype, float32
  /// (sgemm_batched: one oneDNN matmul for the batch), bfloat16
  /// (gemm16_batched: one oneDNN matmul for
  /// the batch, f32 accumulation, bf16 result) or float16 (gemm16_batched:
  /// through f32 sgemm, f16 result); the result has that dtype. Other dtypes
  /// or shapes fail the builder.
  int addGemm(int a, int b);
  /// A convolution primitive (Conv.h): operands a, b (any strides) and a
  /// fresh result of `result` (ConvOp says which of the three is the input,
  /// the weight and the output). All rank 4 and of one float dtype; the
  /// output's spatial sizes must follow from the input, weight and `p`.
  int addConv(ConvOp op, const Conv2dParams &p, int a, int b, SlotType result);
  /// A max pooling primitive (Conv.h): Forward reads `a` = x and makes
  /// `result` (float: the values; Int64: the indices); Backward reads `a` =
  /// grad y and `indices`, makes grad x; Gather reads `a` [N, C, H, W] and
  /// `indices`, makes [N, C, OH, OW]. `indices` is -1 for Forward.
  int addMaxPool(MaxPoolOp op, const Pool2dParams &p, int a, int indices, SlotType result);
  /// View: result.sizes[i] = base.sizes[perm[i]].
  int addTranspose(int base, std::vector<int64_t> perm);
  /// View: numpy broadcast of `base` to `sizes` (right-aligned; each base
  /// dim equals the target dim or is 1).
  int addBroadcast(int base, std::vector<int64_t> sizes);
  /// Same elements, row-major order, new `sizes`: a view when possible.
  int addReshape(int base, std::vector<int64_t> sizes);
  /// A fresh contiguous copy of `src`.
  int addCopy(int src);
  /// After the launch that produced `status` (a kernel result of type
  /// int64 [2], an index check's status word, IndexCheck.h) the run reads
  /// it; when an index was out of range the run fails with
  /// kIndexErrorPrefix + index_error(check, index). Read on the host
  /// directly when the backend is host accessible, else through a copy
  /// (which waits for the stream).
  void addIndexCheck(int status, IndexCheck check);
  /// The symbol of the last kernel added in its kernel library (fusions
  /// whose kernels print alike share one), when it differs from the launch
  /// name: what an exported artifact links the launch to (kiln::export_compiled).
  void setKernelSymbol(std::string symbol);
  /// A constant known when the executable is built: a contiguous tensor of
  /// `type` whose bytes are `data` (nbytes(type) of them, copied). Used for
  /// the runtime scalars of shape-generic kernels (e.g. a mean's 1/N when N
  /// is a dynamic dimension). Not a function argument; never planned.
  int addConstant(SlotType type, const void *data);
  /// The function's results, in order (slots may repeat or be inputs).
  void setOutputs(std::vector<int> slots);
  /// Anything that must outlive the executable's kernels (e.g. the
  /// ExecutionEngine that owns the JIT code).
  void keepAlive(std::shared_ptr<const void> owner);

  /// Static shape/dtype of a slot (valid after it was added).
  const SlotType &type(int slot) const;
  /// The first error so far ("" if none).
  const std::string &error() const { return error_; }

  /// Plans memory and returns the executable, or null with `*error` set.
  /// The builder is left empty.
  std::shared_ptr<LaunchExecutable> finish(std::string *error);

private:
  int addSlot(SlotType type, int base);
  bool checkSlot(int slot, const char *what);
  bool fail(std::string message);
  bool checkKernel(const std::string &name, const KernelHandle &kernel, const std::vector<int> &operands,
                   size_t num_results, const std::vector<std::vector<int64_t>> &operand_strides,
                   const std::vector<InPlace> &in_place);
  int addProduced(SlotType type, const std::shared_ptr<Launch> &launch);
  PlanProblem planProblem() const;
  bool placeConstants(std::string *error);
  void orderOutputsByReadiness();

  std::shared_ptr<LaunchExecutable> exe_;
  std::shared_ptr<Launch> last_kernel_; ///< the last addKernel's launch (addIndexCheck attaches to it)
  std::vector<std::pair<int, std::vector<unsigned char>>> constant_bytes_; ///< slot, host bytes (finish copies them)
  std::vector<std::vector<int64_t>> static_strides_; // empty when unknown until run time
  std::vector<bool> strides_known_;
  std::string error_;
};

/// Strides of a contiguous row-major tensor of `sizes` (elements).
std::vector<int64_t> contiguous_strides(const std::vector<int64_t> &sizes);

/// PyTorch's view rule (THTensor_compute_stride): the strides that view a
/// tensor of `sizes`/`strides` with `new_sizes` without copying, or false
/// when a copy is needed.
bool compute_view_strides(const std::vector<int64_t> &sizes, const std::vector<int64_t> &strides,
                          const std::vector<int64_t> &new_sizes, std::vector<int64_t> *new_strides);

/// "float32 [4, 8]".
std::string slot_type_str(const SlotType &type);

} // namespace kiln::runtime
