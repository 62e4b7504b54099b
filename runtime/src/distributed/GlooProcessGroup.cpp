// The Gloo process group (make_gloo_process_group in
// kiln/runtime/distributed/ProcessGroup.h), after c10d's ProcessGroupGloo:
// one communication thread runs the collectives in call order, each with a
// tag equal to its sequence number and the group's timeout. CUDA tensors go
// through pinned host memory (HostStaging.h).
#include <atomic>
#include <csignal>
#include <signal.h>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "../cpu/Half.h"
#include "CollectiveArgs.h"
#include "HostStaging.h"
#include "kiln/runtime/distributed/ProcessGroup.h"

namespace kiln::runtime::distributed {
namespace {

using Kind = DistributedError::Kind;

/// Gloo's rendezvous store over a Kiln store. connectFullMesh calls get()
/// without waiting first, so get() must block: ours do.
class GlooStore final : public gloo::rendezvous::Store {
public:
  explicit GlooStore(std::shared_ptr<distributed::Store> store) : store_(std::move(store)) {}
  void set(const std::string &key, const std::vector<char> &data) override {
    store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string &key) override {
    auto v = store_->get(key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string> &keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override {
    store_->wait(keys, timeout);
  }

private:
  std::shared_ptr<distributed::Store> store_;
};

template <class T, class F> void reduce_as(void *out, const void *a, const void *b, size_t n, F f) {
  auto *o = static_cast<T *>(out);
  const auto *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
  for (size_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
}

template <class T> gloo::AllreduceOptions::Func typed_reduce(ReduceOp op) {
  switch (op) {
  case ReduceOp::Max: return [](void *o, const void *a, const void *b, size_t n) {
      reduce_as<T>(o, a, b, n, [](T x, T y) { return x < y ? y : x; });
    };
  case ReduceOp::Min: return [](void *o, const void *a, const void *b, size_t n) {
      reduce_as<T>(o, a, b, n, [](T x, T y) { return y < x ? y : x; });
    };
  default: return [](void *o, const void *a, const void *b, size_t n) {
      reduce_as<T>(o, a, b, n, [](T x, T y) { return static_cast<T>(x + y); });
    };
  }
}

/// 16-bit floats reduce in float and round to nearest even per step
/// (c10d's Gloo backend does the same for float16).
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
gloo::AllreduceOptions::Func sixteen_bit_reduce(ReduceOp op) {
  return [op](void *o, const void *a, const void *b, size_t n) {
    reduce_as<uint16_t>(o, a, b, n, [op](uint16_t x, uint16_t y) {
      const float fx = ToFloat(x), fy = ToFloat(y);
      const float r = op == ReduceOp::Max ? (fx < fy ? fy : fx) : op == ReduceOp::Min ? (fy < fx ? fy : fx) : fx + fy;
      return FromFloat(r);
    });
  };
}

gloo::AllreduceOptions::Func reduce_function(DType t, ReduceOp op) {
  switch (t) {
  case DType::Float32: return typed_reduce<float>(op);
  case DType::Float64: return typed_reduce<double>(op);
  case DType::Int64: return typed_reduce<int64_t>(op);
  case DType::Int32: return typed_reduce<int32_t>(op);
  case DType::Float16: return sixteen_bit_reduce<cpu::half_to_float, cpu::float_to_half>(op);
  case DType::BFloat16: return sixteen_bit_reduce<cpu::bf16_to_float, cpu::float_to_bf16>(op);
  case DType::Bool: // sum and max: logical or; min: logical and
    return op == ReduceOp::Min ? typed_reduce<uint8_t>(ReduceOp::Min) : typed_reduce<uint8_t>(ReduceOp::Max);
  }
  throw DistributedError(Kind::Invalid, "allreduce: unknown dtype");
}

/// Divides `n` elements at `p` by `d` in place (ReduceOp::Avg).
void divide(void *p, size_t n, DType t, int d) {
  switch (t) {
  case DType::Float32: for (size_t i = 0; i < n; ++i) static_cast<float *>(p)[i] /= static_cast<float>(d); return;
  case DType::Float64: for (size_t i = 0; i < n; ++i) static_cast<double *>(p)[i] /= d; return;
  case DType::Int64: for (size_t i = 0; i < n; ++i) static_cast<int64_t *>(p)[i] /= d; return;
  case DType::Int32: for (size_t i = 0; i < n; ++i) static_cast<int32_t *>(p)[i] /= d; return;
  case DType::Float16:
    for (size_t i = 0; i < n; ++i) {
      auto &h = static_cast<uint16_t *>(p)[i];
      h = cpu::float_to_half(cpu::half_to_float(h) / static_cast<float>(d));
    }
    return;
  case DType::BFloat16:
    for (size_t i = 0; i < n; ++i) {
      auto &h = static_cast<uint16_t *>(p)[i];
      h = cpu::float_to_bf16(cpu::bf16_to_float(h) / static_cast<float>(d));
    }
    return;
  case DType::Bool: break;
  }
  throw DistributedError(Kind::Invalid, std::string("allreduce: avg of ") + dtype_name(t) + " is not defined");
}

/// What a collective is, compared across ranks in fingerprint mode.
struct Fingerprint {
  int64_t sequence, op, dtype, numel, root;
  bool operator==(const Fingerprint &o) const {
    return sequence == o.sequence && op == o.op && dtype == o.dtype && numel == o.numel && root == o.root;
  }
};

const char *const kOpNames[] = {"allreduce", "broadcast", "allgather", "reduce_scatter", "barrier"};
enum OpCode : int64_t { kAllreduce, kBroadcast, kAllgather, kReduceScatter, kBarrier };

std::string fingerprint_text(const Fingerprint &f) {
  std::string s = std::string(kOpNames[f.op]) + " #" + std::to_string(f.sequence);
  if (f.op != kBarrier)
    s += " (" + std::string(dtype_name(static_cast<DType>(f.dtype))) + ", " + std::to_string(f.numel) + " elements" +
         (f.op == kBroadcast ? ", root " + std::to_string(f.root) : std::string()) + ")";
  return s;
}

/// Returns once every rank of the group has finished connectFullMesh
/// (c10d's store-based barrier after creating a group): a collective that
/// reached a rank still connecting its other pairs would find that pair
/// reset. Tickets of one counter, so groups made one after another on the
/// same store each wait for their own `size` ranks.
void store_barrier(Store &store, int rank, int size, std::chrono::milliseconds timeout) {
  const std::string key = "kiln_gloo_connected";
  const int64_t ticket = store.add(key, 1);
  const int64_t target = ((ticket - 1) / size + 1) * size;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int64_t n = store.add(key, 0); n < target; n = store.add(key, 0)) {
    if (std::chrono::steady_clock::now() > deadline)
      throw DistributedError(Kind::Timeout, "init_process_group (gloo): rank " + std::to_string(rank) + ": " +
                                                std::to_string(n - (target - size)) + " of " + std::to_string(size) +
                                                " ranks connected within " + std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

bool debug_detail() {
  const char *v = std::getenv("KILN_DISTRIBUTED_DEBUG");
  return v && std::strcmp(v, "DETAIL") == 0;
}

class GlooProcessGroup final : public ProcessGroup {
public:
  GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, const GlooOptions &options)
      : ProcessGroup(rank, size), options_(options), store_(std::move(store)) {
    if (size < 1 || rank < 0 || rank >= size)
      throw DistributedError(Kind::Invalid, "init_process_group: rank " + std::to_string(rank) +
                                                " is not in a group of size " + std::to_string(size));
    options_.check_fingerprints = options.check_fingerprints || debug_detail();
    // Gloo writes to its sockets without MSG_NOSIGNAL: a peer that died would
    // kill this process with SIGPIPE instead of failing the collective.
    // A handler the program installed is left alone.
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    attr.ai_family = AF_INET;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context_->setTimeout(options.timeout);
      GlooStore gloo_store(store_);
      context_->connectFullMesh(gloo_store, device_);
      store_barrier(*store_, rank, size, options.timeout);
    } catch (const DistributedError &e) {
      throw DistributedError(e.kind(), "init_process_group (gloo): rank " + std::to_string(rank) + " of " +
                                           std::to_string(size) + " could not meet its peers: " + e.what());
    } catch (const std::exception &e) {
      throw DistributedError(Kind::PeerLost, "init_process_group (gloo): rank " + std::to_string(rank) + " of " +
                                                 std::to_string(size) + " could not connect to its peers on " +
                                                 options.hostname + ": " + e.what() +
                                                 " (the other nodes must reach this address: set GLOO_SOCKET_IFNAME "
                                                 "to the interface they reach, or KILN_GLOO_HOSTNAME to its address)");
    }
    thread_ = std::thread([this] { loop(); });
  }

  ~GlooProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::string backend_name() const override { return "gloo"; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }

  std::shared_ptr<Work> allreduce(const TensorView &t, ReduceOp op) override {
    const size_t n = dense_numel(t, "allreduce");
    auto fn = reduce_function(t.dtype, op);
    if (op == ReduceOp::Avg && t.dtype == DType::Bool) divide(nullptr, 0, t.dtype, 1); // throws
    auto staging = std::make_shared<HostStaging>(staging_streams_);
    void *host = staging->add(t, /*read=*/true, /*written=*/true);
    return enqueue({0, kAllreduce, static_cast<int64_t>(t.dtype), static_cast<int64_t>(n), -1},
                   [this, staging, host, dtype = t.dtype, n, op, fn](uint32_t tag) {
                     staging->wait_for_inputs();
                     if (n == 0) return;
                     gloo::AllreduceOptions o(context_);
                     set_output_bytes(o, static_cast<char *>(host), n, dtype);
                     o.setReduceFunction(fn);
                     o.setTag(tag);
                     o.setTimeout(options_.timeout);
                     gloo::allreduce(o);
                     if (op == ReduceOp::Avg) divide(host, n, dtype, size());
                     staging->copy_back();
                   });
  }

  std::shared_ptr<Work> broadcast(const TensorView &t, int root) override {
    const size_t n = dense_numel(t, "broadcast");
    check_root("broadcast", root, size());
    auto staging = std::make_shared<HostStaging>(staging_streams_);
    void *host = staging->add(t, /*read=*/rank() == root, /*written=*/rank() != root);
    return enqueue({0, kBroadcast, static_cast<int64_t>(t.dtype), static_cast<int64_t>(n), root},
                   [this, staging, host, bytes = n * itemsize(t.dtype), root](uint32_t tag) {
                     staging->wait_for_inputs();
                     if (bytes == 0 || size() == 1) return;
                     gloo::BroadcastOptions o(context_);
                     o.setOutput(static_cast<char *>(host), bytes);
                     o.setRoot(root);
                     o.setTag(tag);
                     o.setTimeout(options_.timeout);
                     gloo::broadcast(o);
                     staging->copy_back();
                   });
  }

  std::shared_ptr<Work> allgather(const std::vector<TensorView> &outputs, const TensorView &input) override {
    const size_t n = dense_numel(input, "allgather");
    check_parts("allgather", outputs, input, n, size());
    auto staging = std::make_shared<HostStaging>(staging_streams_);
    void *in = staging->add(input, /*read=*/true, /*written=*/false);
    std::vector<void *> outs;
    for (const TensorView &o : outputs) outs.push_back(staging->add(o, /*read=*/false, /*written=*/true));
    return enqueue({0, kAllgather, static_cast<int64_t>(input.dtype), static_cast<int64_t>(n), -1},
                   [this, staging, in, outs, bytes = n * itemsize(input.dtype)](uint32_t tag) {
                     staging->wait_for_inputs();
                     if (bytes == 0) return;
                     std::vector<char> all(bytes * static_cast<size_t>(size()));
                     gloo::AllgatherOptions o(context_);
                     o.setInput(static_cast<char *>(in), bytes);
                     o.setOutput(all.data(), all.size());
                     o.setTag(tag);
                     o.setTimeout(options_.timeout);
                     gloo::allgather(o);
                     for (size_t r = 0; r < outs.size(); ++r) std::memcpy(outs[r], all.data() + r * bytes, bytes);
                     staging->copy_back();
                   });
  }

  std::shared_ptr<Work> reduce_scatter(const TensorView &output, const std::vector<TensorView> &inputs,
                                       ReduceOp op) override {
    const size_t n = dense_numel(output, "reduce_scatter");
    check_parts("reduce_scatter", inputs, output, n, size());
    auto fn = reduce_function(output.dtype, op);
    auto staging = std::make_shared<HostStaging>(staging_streams_);
    std::vector<void *> ins;
    for (const TensorView &i : inputs) ins.push_back(staging->add(i, /*read=*/true, /*written=*/false));
    void *out = staging->add(output, /*read=*/false, /*written=*/true);
    // Gloo 0.5 has no options-style reduce-scatter: all-reduce the
    // concatenated inputs and keep this rank's part.
    return enqueue({0, kReduceScatter, static_cast<int64_t>(output.dtype), static_cast<int64_t>(n), -1},
                   [this, staging, ins, out, dtype = output.dtype, n, op, fn](uint32_t tag) {
                     staging->wait_for_inputs();
                     const size_t bytes = n * itemsize(dtype);
                     if (bytes == 0) return;
                     std::vector<char> all(bytes * static_cast<size_t>(size()));
                     for (size_t r = 0; r < ins.size(); ++r) std::memcpy(all.data() + r * bytes, ins[r], bytes);
                     gloo::AllreduceOptions o(context_);
                     set_output_bytes(o, all.data(), n * static_cast<size_t>(size()), dtype);
                     o.setReduceFunction(fn);
                     o.setTag(tag);
                     o.setTimeout(options_.timeout);
                     gloo::allreduce(o);
                     std::memcpy(out, all.data() + static_cast<size_t>(rank()) * bytes, bytes);
                     if (op == ReduceOp::Avg) divide(out, n, dtype, size());
                     staging->copy_back();
                   });
  }

  std::shared_ptr<Work> barrier() override {
    return enqueue({0, kBarrier, 0, 0, -1}, [this](uint32_t tag) {
      gloo::BarrierOptions o(context_);
      o.setTag(tag);
      o.setTimeout(options_.timeout);
      gloo::barrier(o);
    });
  }

private:
  struct Task {
    Fingerprint fingerprint;
    std::function<void(uint32_t)> run;
    std::shared_ptr<Work> work;
  };

  static void set_output_bytes(gloo::AllreduceOptions &o, char *p, size_t n, DType t) {
    switch (itemsize(t)) {
    case 1: o.setOutput(reinterpret_cast<uint8_t *>(p), n); break;
    case 2: o.setOutput(reinterpret_cast<uint16_t *>(p), n); break;
    case 4: o.setOutput(reinterpret_cast<uint32_t *>(p), n); break;
    default: o.setOutput(reinterpret_cast<uint64_t *>(p), n); break;
    }
  }
  std::shared_ptr<Work> enqueue(Fingerprint f, std::function<void(uint32_t)> run) {
    std::lock_guard<std::mutex> lock(mu_);
    f.sequence = next_sequence_++;
    auto work = std::make_shared<Work>(fingerprint_text(f) + " on rank " + std::to_string(rank()) + " of " +
                                           std::to_string(size()),
                                       options_.timeout);
    queue_.push_back({f, std::move(run), work});
    cv_.notify_all();
    return work;
  }

  /// Every rank's fingerprint of this collective; throws Mismatch naming
  /// the first rank whose collective differs from rank 0's.
  void check_fingerprint(const Fingerprint &mine, uint32_t tag) {
    std::vector<Fingerprint> all(static_cast<size_t>(size()));
    gloo::AllgatherOptions o(context_);
    Fingerprint in = mine;
    o.setInput(reinterpret_cast<char *>(&in), sizeof in);
    o.setOutput(reinterpret_cast<char *>(all.data()), sizeof(Fingerprint) * all.size());
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    gloo::allgather(o);
    for (size_t r = 1; r < all.size(); ++r)
      if (!(all[r] == all[0]))
        throw DistributedError(Kind::Mismatch, "collective desync (KILN_DISTRIBUTED_DEBUG=DETAIL): rank 0 runs " +
                                                   fingerprint_text(all[0]) + " but rank " + std::to_string(r) +
                                                   " runs " + fingerprint_text(all[r]) +
                                                   "; every rank must make the same collectives in the same order");
  }

  void loop() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task.work->mark_started();
      std::exception_ptr error;
      if (!broken_.empty()) {
        error = std::make_exception_ptr(DistributedError(
            Kind::PeerLost, task.work->description() + ": the process group is broken by an earlier failure: " + broken_));
      } else {
        const auto tag = static_cast<uint32_t>(task.fingerprint.sequence * 2);
        try {
          if (options_.check_fingerprints && size() > 1) check_fingerprint(task.fingerprint, tag + 1);
          task.run(tag);
        } catch (const DistributedError &e) {
          if (e.kind() != Kind::Invalid) broken_ = e.what();
          error = std::current_exception();
        } catch (const std::exception &e) {
          const std::string what = e.what();
          const bool timed_out = what.find("imed out") != std::string::npos;
          broken_ = task.work->description() + " failed: " + what;
          error = std::make_exception_ptr(DistributedError(
              timed_out ? Kind::Timeout : Kind::PeerLost,
              broken_ + (timed_out ? " (after the group's timeout of " + std::to_string(options_.timeout.count()) +
                                         " ms: a peer rank is stuck or never made this collective)"
                                   : " (a peer rank exited or closed its connection; see that rank's output)")));
        }
      }
      task.work->finish(error);
    }
  }

  GlooOptions options_;
  /// Kept for the group's life: on rank 0 it is the TCPStore server the
  /// other ranks may still be reading (c10d's ProcessGroup keeps it too).
  std::shared_ptr<Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  StagingStreams staging_streams_; ///< before the thread: destroyed after it
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  int64_t next_sequence_ = 0;
  bool stop_ = false;
  std::string broken_; ///< the first transport failure (communication thread only)
  std::thread thread_;
};

} // namespace

std::unique_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const GlooOptions &options) {
  return std::make_unique<GlooProcessGroup>(std::move(store), rank, size, options);
}

} // namespace kiln::runtime::distributed
