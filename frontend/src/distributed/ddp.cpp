// DistributedDataParallel (kiln/distributed.h): the reducer after PyTorch's
// torch/csrc/distributed/c10d/reducer.cpp (Li et al., VLDB 2020): buckets of
// gradients filled by post-accumulate-grad hooks, all-reduced in bucket order
// as each fills, overlapping the rest of the backward.
#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_map>

#include "distributed_internal.h"
#include "kiln/autograd.h"
#include "kiln/error.h"
#include "kiln/ops.h"
#include "ops/dispatch.h"

namespace kiln::distributed {

namespace rd = runtime::distributed;
using dispatch::view_of;
using Clock = std::chrono::steady_clock;

namespace {

/// Only the bucket launched last is exposed by construction: it holds the
/// gradients ready last (the first layers'), so its all-reduce starts when
/// the backward is over. With bucket_cap_mb alone (25 MiB) a model of a few
/// MiB of gradients gets a 1 MiB first bucket and one bucket with the rest,
/// which is then exposed whole (kiln-bench-ddp's six 512x512 layers: 5 of
/// their 6 MiB). So the buckets after the first are also capped at a
/// quarter of all the gradients' bytes (never below the first bucket's
/// cap): at most about a quarter of the bytes are reduced after the
/// backward, for at most ~5 collectives. Models with more than 4 x 25 MiB of
/// gradients keep bucket_cap_mb, as PyTorch's DDP.
constexpr double kMinBucketsAfterTheFirst = 4;

uint64_t fnv1a(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string describe(const std::string &name, const Tensor &p) {
  return "'" + name + "' " + shape_str(p.sizes()) + " " + dtype_name(p.dtype());
}

void wait_or_throw(const std::shared_ptr<rd::Work> &w, const char *op) {
  try {
    w->wait();
  } catch (const std::exception &e) {
    throw Error(std::string("DistributedDataParallel: ") + op + ": " + e.what());
  }
}

/// `values` as a 1-D int64 tensor (at least one element) on `device`.
Tensor ints_on(const std::vector<int64_t> &values, Device device) {
  Tensor host = zeros({std::max<int64_t>(static_cast<int64_t>(values.size()), 1)}, kInt64);
  std::copy(values.begin(), values.end(), host.data_ptr<int64_t>());
  return host.to(device);
}

/// The first `n` values of the int64 tensor `t` (any device).
std::vector<int64_t> ints_of(const Tensor &t, size_t n) {
  Tensor host = t.cpu();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + n);
}

/// Every rank's int64 values of `local` (same length on every rank),
/// exchanged in tensors on `device` (the parameters': NCCL takes CUDA
/// tensors only).
std::vector<std::vector<int64_t>> gather_ints(rd::ProcessGroup &g, const std::vector<int64_t> &local, Device device,
                                              const char *op) {
  Tensor in = ints_on(local, device);
  std::vector<Tensor> outs;
  std::vector<runtime::TensorView> views;
  for (int r = 0; r < g.size(); ++r) {
    outs.push_back(zeros(in.sizes(), kInt64, device));
    views.push_back(view_of(outs.back()));
  }
  wait_or_throw(g.allgather(views, view_of(in)), op);
  std::vector<std::vector<int64_t>> all;
  for (const Tensor &t : outs) all.push_back(ints_of(t, local.size()));
  return all;
}

/// The one device of the parameters (cpu when there are none), or
/// kiln::Error naming the first parameter elsewhere; a CPU parameter on an
/// NCCL group is an error too (NCCL reduces CUDA tensors only).
Device parameters_device(const std::vector<Tensor> &params, const std::vector<std::string> &names,
                         const std::string &backend) {
  const Device device = params.empty() ? kCPU : params[0].device();
  for (size_t i = 0; i < params.size(); ++i)
    KILN_CHECK(params[i].device() == device, "DistributedDataParallel: parameter ", describe(names[i], params[i]),
               " is on ", params[i].device().str(), " but parameter ", describe(names[0], params[0]), " is on ",
               device.str(), " (expected every parameter on one device; move the module with .to(device))");
  KILN_CHECK(backend != "nccl" || params.empty() || device.type == DeviceType::CUDA,
             "DistributedDataParallel: parameter ", describe(names[0], params[0]), " is on ", device.str(),
             " but the process group is nccl, which reduces CUDA tensors only (expected the module on cuda; ",
             "move it with .to(Device(DeviceType::CUDA, rank % devices)) or use the gloo backend)");
  return device;
}

} // namespace

struct DistributedDataParallel::Reducer {
  struct Bucket {
    std::vector<size_t> params;  // indices into Reducer::params
    std::vector<int64_t> offsets; // element offsets in flat
    Tensor flat;                  // the bucket: 1-D, the params' dtype
    Tensor comm;                  // bf16_compress: the bfloat16 copy reduced instead
    int pending = 0;
    std::shared_ptr<rd::Work> work;
    BucketTiming timing;
  };

  std::shared_ptr<rd::ProcessGroup> group;
  DDPOptions options;
  std::vector<Tensor> params;     // requiring grad, registration order
  std::vector<std::string> names;
  std::vector<Tensor> module_buffers;
  /// Where the buckets and the reducer's bookkeeping tensors (the model
  /// check, the rebuilt order, the unused-parameter flags) live: the
  /// parameters' device.
  Device device = kCPU;
  /// The parameters' AccumulateGrad nodes hold the hooks; the graph keeps
  /// them only weakly between backwards, so the reducer owns them (as c10d's).
  std::vector<std::shared_ptr<autograd::AccumulateGrad>> accumulators;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of, slot_of; // param -> bucket, position in bucket
  std::vector<char> ready, used;
  std::vector<char> early_marked;        // made ready by the early hook, post hook still to come
  size_t awaiting_post = 0;              // how many of those
  std::vector<size_t> ready_order;        // the first backward's, for the rebuild
  size_t next_launch = 0;
  bool expecting = false; // a synced backward of a DDP forward is under way
  bool sync = true;       // false inside no_sync()
  int backwards = 0;
  bool rebuilt = false;
  std::vector<BucketTiming> last;

  void assign_buckets(const std::vector<size_t> &order) {
    buckets.clear();
    bucket_of.assign(params.size(), 0);
    slot_of.assign(params.size(), 0);
    std::unordered_map<int, size_t> open; // dtype -> bucket being filled
    std::vector<int64_t> bytes;
    double total_bytes = 0;
    for (size_t i : order) total_bytes += static_cast<double>(params[i].numel() * itemsize(params[i].dtype()));
    const double first_cap = options.first_bucket_cap_mb * 1024 * 1024;
    const double later_cap =
        std::min(options.bucket_cap_mb * 1024 * 1024, std::max(first_cap, total_bytes / kMinBucketsAfterTheFirst));
    for (size_t i : order) {
      const int dtype = static_cast<int>(params[i].dtype());
      const int64_t b = params[i].numel() * static_cast<int64_t>(itemsize(params[i].dtype()));
      auto it = open.find(dtype);
      if (it == open.end()) {
        buckets.emplace_back();
        bytes.push_back(0);
        it = open.emplace(dtype, buckets.size() - 1).first;
      }
      Bucket &bk = buckets[it->second];
      bucket_of[i] = it->second;
      slot_of[i] = bk.params.size();
      bk.params.push_back(i);
      bytes[it->second] += b;
      const double cap = it->second == 0 ? first_cap : later_cap;
      if (static_cast<double>(bytes[it->second]) >= cap) open.erase(it);
    }
    for (Bucket &bk : buckets) {
      int64_t n = 0;
      for (size_t i : bk.params) {
        bk.offsets.push_back(n);
        n += params[i].numel();
      }
      bk.flat = zeros({n}, params[bk.params[0]].dtype(), params[bk.params[0]].device());
    }
  }

  /// Same names, shapes and dtypes on every rank, else kiln::Error naming the
  /// first difference (on every rank: they all see the same gathered data).
  void check_same_model() {
    std::vector<int64_t> hashes{static_cast<int64_t>(params.size())};
    for (size_t i = 0; i < params.size(); ++i) hashes.push_back(static_cast<int64_t>(fnv1a(describe(names[i], params[i]))));
    auto counts = gather_ints(*group, {hashes[0]}, device, "checking the model");
    for (int r = 1; r < group->size(); ++r)
      KILN_CHECK(counts[r][0] == counts[0][0], "DistributedDataParallel: rank 0 has ", counts[0][0],
                 " parameters but rank ", r, " has ", counts[r][0], "; every rank must build the same model");
    auto all = gather_ints(*group, hashes, device, "checking the model");
    for (size_t k = 1; k < hashes.size(); ++k)
      for (int r = 1; r < group->size(); ++r)
        if (all[r][k] != all[0][k]) {
          // Name the difference: gather the descriptions of parameter k-1.
          constexpr int64_t kChars = 256;
          std::string mine = describe(names[k - 1], params[k - 1]);
          std::vector<int64_t> packed(kChars, 0);
          for (size_t c = 0; c < mine.size() && c < static_cast<size_t>(kChars); ++c) packed[c] = mine[c];
          auto texts = gather_ints(*group, packed, device, "checking the model");
          auto text = [&](int q) {
            std::string s;
            for (int64_t c : texts[q]) if (c) s += static_cast<char>(c);
            return s;
          };
          throw Error("DistributedDataParallel: parameter " + std::to_string(k - 1) + " differs across ranks: rank 0 has " +
                      text(0) + ", rank " + std::to_string(r) + " has " + text(r) +
                      "; every rank must build the same model");
        }
  }

  void broadcast_from_rank0(const std::vector<Tensor> &tensors) {
    if (group->size() == 1) return;
    std::vector<std::shared_ptr<rd::Work>> works;
    for (const Tensor &t : tensors) {
      Tensor c = t;
      KILN_CHECK(c.is_contiguous(), "DistributedDataParallel: a parameter or buffer of shape ", shape_str(c.sizes()),
                 " is not contiguous");
      c.bump_version();
      works.push_back(group->broadcast(comm_view(c, "DistributedDataParallel"), 0));
    }
    for (auto &w : works) wait_or_throw(w, "broadcasting rank 0's state");
  }

  /// Called by each parameter's post-accumulate-grad hook (`early` null:
  /// .grad() is final), or earlier by its early hook with the gradient this
  /// backward adds (`early`: a compiled backward announcing it from
  /// on_output_ready while its later launches still run; .grad() is the old
  /// value then, and the post hook that follows is a no-op).
  void mark_ready(size_t i, const Tensor *early = nullptr) {
    if (!expecting) return;
    if (!early && early_marked[i]) {
      // Its AccumulateGrad has now written .grad: finalize may overwrite it.
      early_marked[i] = 0;
      --awaiting_post;
      if (next_launch == buckets.size() && awaiting_post == 0) finalize();
      return;
    }
    KILN_CHECK(!ready[i], "DistributedDataParallel: parameter ", names[i],
               " was marked ready twice in one backward (a second backward through the same forward needs "
               "a new forward)");
    Bucket &bk = buckets[bucket_of[i]];
    {
      autograd::NoGradGuard no_grad;
      Tensor g = params[i].grad();
      if (early) g = g.defined() ? g + early->view(g.sizes()) : *early;
      Tensor slice = bk.flat.narrow(0, bk.offsets[slot_of[i]], params[i].numel());
      if (g.defined()) slice.copy_((g.contiguous() * (1.0 / group->size())).flatten());
      else slice.copy_(zeros({params[i].numel()}, slice.dtype(), slice.device()));
    }
    if (early) early_marked[i] = 1, ++awaiting_post;
    ready[i] = 1;
    if (backwards == 0) ready_order.push_back(i);
    if (--bk.pending == 0) {
      bk.timing.ready = Clock::now();
      launch_ready();
    }
  }

  /// Launches the buckets that are full, in bucket order (every rank must
  /// make the same collectives in the same order).
  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      Bucket &bk = buckets[next_launch++];
      if (options.comm_hook == "bf16_compress" && bk.flat.dtype() == kFloat32) {
        bk.comm = bk.flat.to(kBFloat16).contiguous();
        bk.work = group->allreduce(comm_view(bk.comm, "DistributedDataParallel"), rd::ReduceOp::Sum);
      } else {
        bk.work = group->allreduce(comm_view(bk.flat, "DistributedDataParallel"), rd::ReduceOp::Sum);
      }
    }
    // Finalizing writes the reduced gradients into .grad, so it waits for
    // the AccumulateGrads of early-marked parameters, which write it too.
    if (next_launch == buckets.size() && awaiting_post == 0) finalize();
  }

  /// The last bucket is launched: wait for all and write the averaged
  /// gradients into .grad() (c10d's finalize_backward).
  void finalize() {
    expecting = false;
    ++backwards;
    last.clear();
    for (Bucket &bk : buckets) {
      wait_or_throw(bk.work, "all-reducing gradients");
      bk.timing.start = bk.work->start_time();
      bk.timing.end = bk.work->end_time();
      last.push_back(bk.timing);
      if (bk.comm.defined()) {
        autograd::NoGradGuard no_grad;
        bk.flat.copy_(bk.comm.to(bk.flat.dtype()));
        bk.comm = Tensor();
      }
    }
    std::vector<char> globally_used(params.size(), 1);
    if (options.find_unused_parameters) {
      Tensor u = ints_on(std::vector<int64_t>(used.begin(), used.end()), device);
      wait_or_throw(group->allreduce(view_of(u), rd::ReduceOp::Max), "finding unused parameters");
      const std::vector<int64_t> any = ints_of(u, params.size());
      for (size_t i = 0; i < params.size(); ++i) globally_used[i] = any[i] != 0;
    }
    autograd::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!globally_used[i]) continue; // torch leaves a gradient no rank made untouched
      Bucket &bk = buckets[bucket_of[i]];
      Tensor view = bk.flat.narrow(0, bk.offsets[slot_of[i]], params[i].numel()).view(params[i].sizes());
      Tensor g = params[i].grad();
      if (options.gradient_as_bucket_view) params[i].set_grad(view);
      else if (g.defined() && g.is_contiguous()) g.copy_(view);
      else params[i].set_grad(view.clone());
    }
  }

  /// Before a forward whose backward will reduce: new counters; with
  /// find_unused_parameters the parameters the outputs do not reach are
  /// ready now (with zeros).
  void prepare_for_backward(const std::vector<Tensor> &outputs) {
    KILN_CHECK(!expecting, "DistributedDataParallel: the previous backward did not reduce every gradient (",
               count_unready(), " parameters got none, e.g. ", first_unready(),
               "); if the forward does not use every parameter, pass DDPOptions::find_unused_parameters = true");
    if (!sync) return;
    ready.assign(params.size(), 0);
    used.assign(params.size(), 1);
    early_marked.assign(params.size(), 0);
    awaiting_post = 0;
    for (Bucket &bk : buckets) bk.pending = static_cast<int>(bk.params.size());
    next_launch = 0;
    expecting = true;
    if (!options.find_unused_parameters) return;
    std::unordered_map<const void *, size_t> index;
    for (size_t i = 0; i < params.size(); ++i) index[params[i].impl()] = i;
    std::vector<char> reached(params.size(), 0);
    std::set<const autograd::Node *> seen;
    std::vector<std::shared_ptr<autograd::Node>> stack;
    for (const Tensor &o : outputs)
      if (o.defined() && o.requires_grad())
        if (auto e = autograd::gradient_edge(o); e.valid()) stack.push_back(e.fn);
    while (!stack.empty()) {
      auto n = stack.back();
      stack.pop_back();
      if (!seen.insert(n.get()).second) continue;
      if (auto *acc = dynamic_cast<autograd::AccumulateGrad *>(n.get()))
        if (auto leaf = acc->leaf.lock())
          if (auto it = index.find(leaf.get()); it != index.end()) reached[it->second] = 1;
      for (const auto &e : n->next_edges)
        if (e.valid()) stack.push_back(e.fn);
    }
    for (size_t i = 0; i < params.size(); ++i)
      if (!reached[i]) {
        used[i] = 0;
        Bucket &bk = buckets[bucket_of[i]];
        bk.flat.narrow(0, bk.offsets[slot_of[i]], params[i].numel()).zero_();
        ready[i] = 1;
        if (backwards == 0) ready_order.push_back(i);
        if (--bk.pending == 0) bk.timing.ready = Clock::now();
      }
    // Buckets made only of unused parameters are launched by the first
    // ready gradient (in order); if nothing is used at all, now.
    if (std::all_of(used.begin(), used.end(), [](char u) { return !u; })) launch_ready();
  }

  size_t count_unready() const { return static_cast<size_t>(std::count(ready.begin(), ready.end(), 0)); }
  std::string first_unready() const {
    for (size_t i = 0; i < ready.size(); ++i)
      if (!ready[i]) return names[i];
    return "?";
  }

  /// Once, before the second forward: buckets in the order gradients became
  /// ready in the first backward (rank 0's, so every rank agrees).
  void maybe_rebuild() {
    if (rebuilt || backwards == 0) return;
    rebuilt = true;
    std::vector<int64_t> order(params.size());
    for (size_t i = 0; i < params.size(); ++i) order[i] = i < ready_order.size() ? static_cast<int64_t>(ready_order[i]) : -1;
    Tensor t = ints_on(order, device);
    wait_or_throw(group->broadcast(view_of(t), 0), "rebuilding the buckets");
    const std::vector<int64_t> broadcast_order = ints_of(t, params.size());
    std::vector<size_t> rank0_order;
    std::vector<char> placed(params.size(), 0);
    for (size_t i = 0; i < params.size(); ++i) {
      const int64_t p = broadcast_order[i];
      if (p >= 0 && static_cast<size_t>(p) < params.size() && !placed[p]) rank0_order.push_back(static_cast<size_t>(p)), placed[p] = 1;
    }
    for (size_t i = params.size(); i-- > 0;)
      if (!placed[i]) rank0_order.push_back(i);
    assign_buckets(rank0_order);
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options)
    : module_(std::move(module)), reducer_(std::make_shared<Reducer>()) {
  KILN_CHECK(module_ != nullptr, "DistributedDataParallel: no module");
  KILN_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0,
             "DistributedDataParallel: bucket caps must be > 0 MiB (got ", options.first_bucket_cap_mb, " and ",
             options.bucket_cap_mb, ")");
  KILN_CHECK(options.comm_hook.empty() || options.comm_hook == "bf16_compress",
             "DistributedDataParallel: comm_hook '", options.comm_hook, "' (expected '' or 'bf16_compress')");
  register_module("module", module_);
  Reducer &r = *reducer_;
  r.group = default_group("DistributedDataParallel");
  r.options = options;
  for (auto &[name, p] : module_->named_parameters())
    if (p.requires_grad()) {
      r.names.push_back(name);
      r.params.push_back(p);
    }
  r.module_buffers = module_->buffers();
  r.device = parameters_device(r.params, r.names, r.group->backend_name());
  r.check_same_model();
  {
    autograd::NoGradGuard no_grad;
    r.broadcast_from_rank0(r.params);
    r.broadcast_from_rank0(r.module_buffers);
  }
  std::vector<size_t> reverse;
  for (size_t i = r.params.size(); i-- > 0;) reverse.push_back(i);
  r.assign_buckets(reverse);
  std::weak_ptr<Reducer> weak = reducer_;
  for (size_t i = 0; i < r.params.size(); ++i) {
    r.accumulators.push_back(autograd::grad_accumulator(r.params[i]));
    r.accumulators.back()->post_hooks.push_back([weak, i](const Tensor &) {
      if (auto rr = weak.lock()) rr->mark_ready(i);
    });
    // A compiled backward announces each gradient as its launch finishes
    // (autograd::announce_gradient): its bucket fills, and is all-reduced,
    // while the rest of that backward runs. The first backward's order of
    // announcements is the compiled launch order, which the bucket rebuild
    // then follows.
    r.accumulators.back()->early_hooks.push_back([weak, i](const Tensor &g) {
      if (auto rr = weak.lock()) rr->mark_ready(i, &g);
    });
  }
  train(module_->is_training());
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::train(bool on) { nn::Module::train(on); }

std::vector<Tensor> DistributedDataParallel::forward(const std::vector<Tensor> &inputs) {
  Reducer &r = *reducer_;
  const bool will_reduce = is_training() && autograd::GradMode::is_enabled();
  if (will_reduce && r.sync) r.maybe_rebuild();
  if (r.options.broadcast_buffers && !r.module_buffers.empty()) {
    autograd::NoGradGuard no_grad;
    r.broadcast_from_rank0(r.module_buffers);
  }
  std::vector<Tensor> outputs = module_->forward(inputs);
  if (will_reduce) r.prepare_for_backward(outputs);
  return outputs;
}

Tensor DistributedDataParallel::forward(const Tensor &input) {
  auto out = forward(std::vector<Tensor>{input});
  KILN_CHECK(out.size() == 1, "DistributedDataParallel: the module returned ", out.size(),
             " outputs; call forward({inputs}) for several");
  return out[0];
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel &ddp) : ddp_(ddp), prev_(ddp.reducer_->sync) {
  ddp.reducer_->sync = false;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.reducer_->sync = prev_; }

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_indices() const {
  std::vector<std::vector<size_t>> out;
  for (const auto &b : reducer_->buckets) out.push_back(b.params);
  return out;
}

std::vector<DistributedDataParallel::BucketTiming> DistributedDataParallel::last_timings() const {
  return reducer_->last;
}

} // namespace kiln::distributed
