// The NCCL process group (make_nccl_process_group in
// kiln/runtime/distributed/ProcessGroup.h), after c10d's ProcessGroupNCCL:
// the communicator made from rank 0's ncclUniqueId passed through the store;
// each collective enqueued on the caller's current stream of the device and
// followed by an event; a watchdog thread that completes Works when their
// events complete and aborts the communicator on an asynchronous NCCL error
// or a timeout. libnccl.so.2 comes from the run-time symbol table
// (runtime/src/cuda/Libraries.h, NcclSymbols.def).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <list>
#include <thread>

#include "CollectiveArgs.h"
#include "NcclTypes.h"
#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/cuda/CachingHostAllocator.h"
#include "kiln/runtime/cuda/Availability.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CurrentStream.h"

namespace kiln::runtime::distributed {

using Kind = DistributedError::Kind;

namespace nccl {

cuda::ncclDataType_t data_type(DType t) {
  switch (t) {
  case DType::Float32: return kFloat32;
  case DType::Float64: return kFloat64;
  case DType::Float16: return kFloat16;
  case DType::BFloat16: return kBfloat16;
  case DType::Int64: return kInt64;
  case DType::Int32: return kInt32;
  case DType::Bool: return kUint8;
  }
  return kUint8; // unreachable: every DType is listed
}

cuda::ncclRedOp_t reduce_op(ReduceOp op, DType t, const char *what) {
  if (t == DType::Bool) {
    if (op == ReduceOp::Avg)
      throw DistributedError(Kind::Invalid, std::string(what) + ": avg of bool is not defined");
    return op == ReduceOp::Min ? kMin : kMax;
  }
  switch (op) {
  case ReduceOp::Sum: return kSum;
  case ReduceOp::Avg: return kAvg;
  case ReduceOp::Max: return kMax;
  case ReduceOp::Min: return kMin;
  }
  return kSum;
}

std::string unavailable_reason(const cuda::LoadedLibrary<cuda::NcclSymbols> &library) {
  const std::string prefix = "NCCL is not available: ";
  if (!library.loaded()) return prefix + library.error;
  const char *sim = std::getenv("KILN_CUDA_SIM");
  const DeviceBackend *registered = registered_backend(DeviceType::CUDA);
  if ((sim && std::string(sim) == "1") || (registered && registered->host_accessible()))
    return prefix + "the CUDA device is the CUDA-on-CPU simulator (KILN_CUDA_SIM=1) and NCCL needs a GPU; use the "
                    "gloo backend, which stages CUDA tensors through host memory";
  if (!cuda::is_available()) return prefix + cuda::availability_reason();
  std::string why;
  if (!cuda::ensure_cuda_backend(&why)) return prefix + why;
  return "";
}

} // namespace nccl

std::string nccl_unavailable_reason() {
  try {
    return nccl::unavailable_reason(cuda::nccl_library());
  } catch (const std::exception &e) {
    return std::string("NCCL is not available: ") + e.what();
  }
}

namespace {

/// How often the watchdog looks at the events of collectives in flight and
/// at ncclCommGetAsyncError: a Work completes at most this long after its
/// GPU work (DDP waits for every bucket at the end of backward, so this is
/// added once per step), and an idle group polls nothing (it sleeps on a
/// condition variable). c10d's watchdog sleeps 100 ms between polls because
/// its Work.wait() blocks the stream, not the host; Kiln's blocks the host.
constexpr auto kWatchdogPoll = std::chrono::microseconds(200);

/// Store keys: a ticket counter that numbers the groups made on one store
/// (each rank of group k takes a ticket in (k*size, (k+1)*size]), and the
/// unique id of group k.
constexpr const char *kGroupTicketKey = "kiln_nccl_group_tickets";
constexpr const char *kUniqueIdKeyPrefix = "kiln_nccl_unique_id/";

std::string nccl_error(const cuda::NcclSymbols &nccl, cuda::ncclResult_t result) {
  const char *text = nccl.ncclGetErrorString(result);
  return std::string(text ? text : "unknown NCCL error") + " (ncclResult_t " + std::to_string(result) + ")";
}

std::string work_text(const char *op, int64_t sequence, DType t, size_t n, int rank, int size, int device) {
  std::string s = std::string(op) + " #" + std::to_string(sequence);
  if (std::strcmp(op, "barrier") != 0)
    s += " (" + std::string(dtype_name(t)) + ", " + std::to_string(n) + " elements)";
  return s + " on rank " + std::to_string(rank) + " of " + std::to_string(size) + " (nccl, cuda:" +
         std::to_string(device) + ")";
}

/// What a collective is, compared across ranks in fingerprint mode (as the
/// Gloo group's): int64s, so NCCL all-gathers them as ncclInt64.
struct Fingerprint {
  int64_t sequence, op, dtype, numel, root;
  bool operator==(const Fingerprint &o) const {
    return sequence == o.sequence && op == o.op && dtype == o.dtype && numel == o.numel && root == o.root;
  }
};
constexpr const char *kOpNames[] = {"allreduce", "broadcast", "allgather", "reduce_scatter", "barrier"};

int64_t op_code(const char *op) {
  for (size_t i = 0; i < std::size(kOpNames); ++i)
    if (std::strcmp(op, kOpNames[i]) == 0) return static_cast<int64_t>(i);
  return -1;
}

std::string fingerprint_text(const Fingerprint &f) {
  const bool known = f.op >= 0 && f.op < static_cast<int64_t>(std::size(kOpNames));
  std::string s = std::string(known ? kOpNames[f.op] : "unknown collective") + " #" + std::to_string(f.sequence);
  const bool has_dtype = f.dtype >= 0 && f.dtype <= static_cast<int64_t>(DType::Bool);
  if (known && std::strcmp(kOpNames[f.op], "barrier") != 0)
    s += " (" + std::string(has_dtype ? dtype_name(static_cast<DType>(f.dtype)) : "?") + ", " +
         std::to_string(f.numel) + " elements" + (f.root >= 0 ? ", root " + std::to_string(f.root) : std::string()) +
         ")";
  return s;
}

bool debug_detail() {
  const char *v = std::getenv("KILN_DISTRIBUTED_DEBUG");
  return v && std::strcmp(v, "DETAIL") == 0;
}

class NcclProcessGroup final : public ProcessGroup {
public:
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, const NcclOptions &options)
      : ProcessGroup(rank, size), options_(options), store_(std::move(store)) {
    options_.check_fingerprints = options.check_fingerprints || debug_detail();
    const std::string who = "init_process_group (nccl): rank " + std::to_string(rank) + " of " + std::to_string(size);
    if (size < 1 || rank < 0 || rank >= size)
      throw DistributedError(Kind::Invalid, "init_process_group: rank " + std::to_string(rank) +
                                                " is not in a group of size " + std::to_string(size));
    const std::string why = nccl_unavailable_reason();
    if (!why.empty()) throw DistributedError(Kind::Invalid, who + ": " + why);
    nccl_ = &cuda::nccl();
    select_device(who);
    api_->set_current();
    const cuda::ncclUniqueId id = exchange_unique_id(who);
    const cuda::ncclResult_t r = nccl_->ncclCommInitRank(&comm_, size, id, rank);
    if (r != cuda::ncclSuccess) {
      comm_ = nullptr;
      throw DistributedError(Kind::PeerLost, who + ": ncclCommInitRank on cuda:" + std::to_string(device_) +
                                                 " failed: " + nccl_error(*nccl_, r) +
                                                 " (NCCL_DEBUG=WARN prints NCCL's own report)");
    }
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join(); // returns once every Work completed, failed or timed out
    if (comm_) nccl_->ncclCommDestroy(comm_);
  }

  std::string backend_name() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }

  std::shared_ptr<Work> allreduce(const TensorView &t, ReduceOp op) override {
    const size_t n = checked_numel(t, "allreduce");
    const auto type = nccl::data_type(t.dtype);
    const auto nccl_op = nccl::reduce_op(op, t.dtype, "allreduce");
    return launch("allreduce", t.dtype, n, {t.buffer}, [&](cuda::CUstream s, std::vector<std::shared_ptr<Buffer>> &) {
      return n == 0 ? cuda::ncclSuccess : nccl_->ncclAllReduce(t.data(), t.data(), n, type, nccl_op, comm_, s);
    });
  }

  std::shared_ptr<Work> broadcast(const TensorView &t, int root) override {
    const size_t n = checked_numel(t, "broadcast");
    check_root("broadcast", root, size());
    const auto type = nccl::data_type(t.dtype);
    return launch(
        "broadcast", t.dtype, n, {t.buffer},
        [&](cuda::CUstream s, std::vector<std::shared_ptr<Buffer>> &) {
          return n == 0 ? cuda::ncclSuccess : nccl_->ncclBroadcast(t.data(), t.data(), n, type, root, comm_, s);
        },
        root);
  }

  /// NCCL gathers into one buffer: a flat scratch of size() * n elements
  /// on the same stream, then one device-to-device copy per output (c10d
  /// does the same when the outputs are not one flat tensor).
  std::shared_ptr<Work> allgather(const std::vector<TensorView> &outputs, const TensorView &input) override {
    const size_t n = checked_numel(input, "allgather");
    check_parts("allgather", outputs, input, n, size());
    for (const TensorView &o : outputs) check_device(o, "allgather");
    const auto type = nccl::data_type(input.dtype);
    const size_t bytes = n * itemsize(input.dtype);
    return launch("allgather", input.dtype, n, buffers_of(outputs, input),
                  [&](cuda::CUstream s, std::vector<std::shared_ptr<Buffer>> &keep) {
                    if (bytes == 0) return cuda::ncclSuccess;
                    auto flat = scratch(bytes * static_cast<size_t>(size()));
                    keep.push_back(flat);
                    const auto r = nccl_->ncclAllGather(input.data(), flat->data(), n, type, comm_, s);
                    if (r != cuda::ncclSuccess) return r;
                    for (size_t i = 0; i < outputs.size(); ++i)
                      api_->memcpy_async(outputs[i].data(), static_cast<char *>(flat->data()) + i * bytes, bytes,
                                         cuda::CopyKind::DeviceToDevice, stream_of(s));
                    return r;
                  });
  }

  std::shared_ptr<Work> reduce_scatter(const TensorView &output, const std::vector<TensorView> &inputs,
                                       ReduceOp op) override {
    const size_t n = checked_numel(output, "reduce_scatter");
    check_parts("reduce_scatter", inputs, output, n, size());
    for (const TensorView &i : inputs) check_device(i, "reduce_scatter");
    const auto type = nccl::data_type(output.dtype);
    const auto nccl_op = nccl::reduce_op(op, output.dtype, "reduce_scatter");
    const size_t bytes = n * itemsize(output.dtype);
    return launch("reduce_scatter", output.dtype, n, buffers_of(inputs, output),
                  [&](cuda::CUstream s, std::vector<std::shared_ptr<Buffer>> &keep) {
                    if (bytes == 0) return cuda::ncclSuccess;
                    auto flat = scratch(bytes * static_cast<size_t>(size()));
                    keep.push_back(flat);
                    for (size_t i = 0; i < inputs.size(); ++i)
                      api_->memcpy_async(static_cast<char *>(flat->data()) + i * bytes, inputs[i].data(), bytes,
                                         cuda::CopyKind::DeviceToDevice, stream_of(s));
                    return nccl_->ncclReduceScatter(flat->data(), output.data(), n, type, nccl_op, comm_, s);
                  });
  }

  /// An all-reduce of one zeroed float on the device (c10d's barrier).
  std::shared_ptr<Work> barrier() override {
    return launch("barrier", DType::Float32, 1, {}, [&](cuda::CUstream s, std::vector<std::shared_ptr<Buffer>> &keep) {
      auto one = scratch(sizeof(float));
      keep.push_back(one);
      api_->memset_async(one->data(), 0, sizeof(float), stream_of(s));
      return nccl_->ncclAllReduce(one->data(), one->data(), 1, nccl::kFloat32, nccl::kSum, comm_, s);
    });
  }

private:
  using Clock = std::chrono::steady_clock;
  using Enqueue = std::function<cuda::ncclResult_t(cuda::CUstream, std::vector<std::shared_ptr<Buffer>> &)>;

  /// A collective enqueued on the GPU and not yet seen complete.
  struct InFlight {
    std::shared_ptr<Work> work;
    cuda::EventHandle done = 0; ///< recorded after the collective
    Clock::time_point deadline;
    std::vector<std::shared_ptr<Buffer>> keep; ///< tensors and scratch, alive until `done`
  };

  void select_device(const std::string &who) {
    DeviceBackend *backend = find_backend(DeviceType::CUDA);
    const int count = backend ? backend->device_count() : 0;
    device_ = options_.device >= 0 ? options_.device : (count > 0 ? rank() % count : 0);
    api_ = cuda::device_api(device_);
    if (!api_)
      throw DistributedError(Kind::Invalid, who + ": cuda:" + std::to_string(device_) + " does not exist (" +
                                                std::to_string(count) + " CUDA devices)");
    allocator_ = &backend->allocator(device_);
  }

  /// Rank 0 makes the id and sets it; the others get it (blocking up to
  /// the store's timeout).
  cuda::ncclUniqueId exchange_unique_id(const std::string &who) {
    cuda::ncclUniqueId id{};
    try {
      const int64_t ticket = store_->add(kGroupTicketKey, 1);
      const std::string key = kUniqueIdKeyPrefix + std::to_string((ticket - 1) / size());
      if (rank() == 0) {
        const cuda::ncclResult_t r = nccl_->ncclGetUniqueId(&id);
        if (r != cuda::ncclSuccess)
          throw DistributedError(Kind::PeerLost, "ncclGetUniqueId failed: " + nccl_error(*nccl_, r));
        const auto *bytes = reinterpret_cast<const uint8_t *>(&id);
        store_->set(key, std::vector<uint8_t>(bytes, bytes + sizeof id));
      } else {
        const std::vector<uint8_t> bytes = store_->get(key);
        if (bytes.size() != sizeof id)
          throw DistributedError(Kind::Protocol, "the unique id under '" + key + "' has " +
                                                     std::to_string(bytes.size()) + " bytes, expected " +
                                                     std::to_string(sizeof id));
        std::memcpy(&id, bytes.data(), sizeof id);
      }
    } catch (const DistributedError &e) {
      throw DistributedError(e.kind(), who + ": could not share NCCL's unique id through the store: " + e.what());
    }
    return id;
  }

  void check_device(const TensorView &v, const char *op) const {
    const Device d = v.buffer ? v.buffer->device() : kCPU;
    if (d.type != DeviceType::CUDA || d.index != device_)
      throw DistributedError(Kind::Invalid, std::string(op) + ": a tensor on " + d.str() +
                                                " (expected cuda:" + std::to_string(device_) +
                                                ", this rank's NCCL device; Gloo takes CPU tensors)");
  }
  size_t checked_numel(const TensorView &v, const char *op) const {
    const size_t n = dense_numel(v, op);
    check_device(v, op);
    return n;
  }

  static std::vector<std::shared_ptr<Buffer>> buffers_of(const std::vector<TensorView> &views, const TensorView &one) {
    std::vector<std::shared_ptr<Buffer>> out{one.buffer};
    for (const TensorView &v : views) out.push_back(v.buffer);
    return out;
  }
  /// Device memory from the caching allocator, filed under the current
  /// stream (the one the collective runs on), so its reuse is ordered.
  std::shared_ptr<Buffer> scratch(size_t bytes) { return Buffer::make(bytes, *allocator_); }
  static cuda::StreamHandle stream_of(cuda::CUstream s) { return reinterpret_cast<cuda::StreamHandle>(s); }

  /// Enqueues one collective on the current stream and files it for the
  /// watchdog. An argument NCCL rejects throws Invalid; any other NCCL
  /// failure breaks the group (PeerLost).
  std::shared_ptr<Work> launch(const char *op, DType t, size_t n, std::vector<std::shared_ptr<Buffer>> keep,
                               const Enqueue &enqueue, int root = -1) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t sequence = next_sequence_++;
    const std::string what = work_text(op, sequence, t, n, rank(), size(), device_);
    if (!broken_.empty())
      throw DistributedError(Kind::PeerLost, what + ": the process group is broken by an earlier failure: " + broken_);
    api_->set_current();
    const cuda::StreamHandle stream = cuda::current_stream(device_);
    if (options_.check_fingerprints)
      check_fingerprint(what, {sequence, op_code(op), static_cast<int64_t>(t), static_cast<int64_t>(n), root}, stream);
    auto work = std::make_shared<Work>(what, options_.timeout);
    work->mark_started();
    const cuda::ncclResult_t r = enqueue(reinterpret_cast<cuda::CUstream>(stream), keep);
    if (r != cuda::ncclSuccess && r != nccl::kInProgress) {
      const std::string message = what + " failed: " + nccl_error(*nccl_, r);
      if (r == 4 || r == 5) throw DistributedError(Kind::Invalid, message); // ncclInvalidArgument, ncclInvalidUsage
      fail_all(nullptr, Kind::PeerLost, message);
      throw DistributedError(Kind::PeerLost, message);
    }
    InFlight f;
    f.work = work;
    f.done = api_->event_create();
    api_->event_record(f.done, stream);
    f.deadline = Clock::now() + options_.timeout;
    f.keep = std::move(keep);
    in_flight_.push_back(std::move(f));
    cv_.notify_all();
    return work;
  }

  /// Fingerprint mode (mu_ held): every rank's fingerprint of this
  /// collective, all-gathered on `stream` through device scratch into a
  /// pinned host block, waited for up to the timeout; throws Mismatch naming
  /// the first rank whose collective differs from rank 0's (and breaks the
  /// group, as Gloo's), Timeout (aborting the communicator) when a peer
  /// never joins the exchange.
  void check_fingerprint(const std::string &what, const Fingerprint &mine, cuda::StreamHandle stream) {
    constexpr size_t kBytes = sizeof(Fingerprint), kInts = kBytes / sizeof(int64_t);
    const size_t all_bytes = kBytes * static_cast<size_t>(size());
    auto device_buffer = scratch(kBytes + all_bytes); // [mine | everyone's]
    char *gathered = static_cast<char *>(device_buffer->data()) + kBytes;
    cuda::CachingHostAllocator *pinned = cuda::pinned_allocator();
    auto *host = static_cast<Fingerprint *>(pinned->allocate(kBytes + all_bytes)); // [mine | everyone's]
    host[0] = mine;
    api_->memcpy_async(device_buffer->data(), host, kBytes, cuda::CopyKind::HostToDevice, stream);
    const cuda::ncclResult_t r =
        nccl_->ncclAllGather(device_buffer->data(), gathered, kInts, nccl::kInt64, comm_, reinterpret_cast<cuda::CUstream>(stream));
    if (r != cuda::ncclSuccess && r != nccl::kInProgress) {
      const std::string message = what + ": the fingerprint exchange (KILN_DISTRIBUTED_DEBUG=DETAIL) failed: " +
                                  nccl_error(*nccl_, r);
      fail_all(nullptr, Kind::PeerLost, message);
      throw DistributedError(Kind::PeerLost, message);
    }
    api_->memcpy_async(host + 1, gathered, all_bytes, cuda::CopyKind::DeviceToHost, stream);
    const cuda::EventHandle done = api_->event_create();
    api_->event_record(done, stream);
    const auto deadline = Clock::now() + options_.timeout;
    while (!api_->event_query(done)) {
      if (Clock::now() > deadline) {
        api_->event_destroy(done);
        const std::string message =
            what + ": the fingerprint exchange (KILN_DISTRIBUTED_DEBUG=DETAIL) did not complete within the group's "
                   "timeout of " + std::to_string(options_.timeout.count()) +
            " ms (a peer rank is stuck or makes fewer collectives); the communicator was aborted (ncclCommAbort)";
        fail_all(nullptr, Kind::Timeout, message); // the host block stays allocated: the copy may still land
        throw DistributedError(Kind::Timeout, message);
      }
      std::this_thread::sleep_for(kWatchdogPoll);
    }
    api_->event_destroy(done);
    std::vector<Fingerprint> all(host + 1, host + 1 + size());
    pinned->deallocate(host, kBytes + all_bytes);
    for (size_t q = 1; q < all.size(); ++q)
      if (!(all[q] == all[0])) {
        broken_ = "collective desync (KILN_DISTRIBUTED_DEBUG=DETAIL): rank 0 runs " + fingerprint_text(all[0]) +
                  " but rank " + std::to_string(q) + " runs " + fingerprint_text(all[q]) +
                  "; every rank must make the same collectives in the same order";
        throw DistributedError(Kind::Mismatch, broken_);
      }
    if (!(all[static_cast<size_t>(rank())] == mine))
      throw DistributedError(Kind::Protocol, what + ": the fingerprint exchange returned " +
                                                 fingerprint_text(all[static_cast<size_t>(rank())]) +
                                                 " for this rank, expected " + fingerprint_text(mine));
  }

  /// The watchdog: polls while collectives are in flight, sleeps otherwise;
  /// after stop_ it still drains what is in flight (each bounded by its
  /// deadline) before returning.
  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (in_flight_.empty()) {
        if (stop_) return;
        cv_.wait(lock, [&] { return stop_ || !in_flight_.empty(); });
        continue;
      }
      poll();
      lock.unlock();
      std::this_thread::sleep_for(kWatchdogPoll);
      lock.lock();
    }
  }

  /// One look at the communicator and the events (mu_ held).
  void poll() {
    if (!comm_) return;
    cuda::ncclResult_t async = cuda::ncclSuccess;
    const cuda::ncclResult_t r = nccl_->ncclCommGetAsyncError(comm_, &async);
    if (r != cuda::ncclSuccess) async = r;
    if (async != cuda::ncclSuccess && async != nccl::kInProgress)
      return fail_all(nullptr, Kind::PeerLost,
                      "NCCL reported an asynchronous error: " + nccl_error(*nccl_, async) +
                          " (a peer rank exited or its GPU or network failed; NCCL_DEBUG=WARN says more)");
    const auto now = Clock::now();
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      bool done = false;
      try {
        done = api_->event_query(it->done);
      } catch (const std::exception &e) {
        return fail_all(it->work.get(), Kind::PeerLost, it->work->description() + ": CUDA error: " + e.what());
      }
      if (done) {
        api_->event_destroy(it->done);
        it->work->finish(nullptr);
        it = in_flight_.erase(it);
        continue;
      }
      if (now > it->deadline)
        return fail_all(it->work.get(), Kind::Timeout,
                        it->work->description() + " did not complete within the group's timeout of " +
                            std::to_string(options_.timeout.count()) +
                            " ms (a peer rank is stuck or never made this collective); the communicator was "
                            "aborted (ncclCommAbort)");
      ++it;
    }
  }

  /// Aborts the communicator and fails every collective in flight: `culprit`
  /// (or, when null, each of them) with `kind` and `why`, the others with
  /// PeerLost. Later collectives throw at the call (mu_ held).
  void fail_all(Work *culprit, Kind kind, const std::string &why) {
    broken_ = why;
    if (comm_) {
      nccl_->ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    for (InFlight &f : in_flight_) {
      const bool own = !culprit || f.work.get() == culprit;
      f.work->finish(std::make_exception_ptr(
          DistributedError(own ? kind : Kind::PeerLost,
                           own ? why : f.work->description() + ": aborted with the communicator: " + why)));
      api_->event_destroy(f.done);
    }
    in_flight_.clear();
  }

  NcclOptions options_;
  /// Kept for the group's life: on rank 0 it may be the TCPStore server.
  std::shared_ptr<Store> store_;
  const cuda::NcclSymbols *nccl_ = nullptr;
  int device_ = 0;
  cuda::DeviceApi *api_ = nullptr;
  Allocator *allocator_ = nullptr;
  cuda::ncclComm_t comm_ = nullptr;
  std::mutex mu_; ///< guards comm_, in_flight_, broken_, next_sequence_, stop_
  std::condition_variable cv_;
  std::list<InFlight> in_flight_;
  int64_t next_sequence_ = 0;
  bool stop_ = false;
  std::string broken_;
  std::thread watchdog_;
};

} // namespace

std::unique_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const NcclOptions &options) {
  return std::make_unique<NcclProcessGroup>(std::move(store), rank, size, options);
}

} // namespace kiln::runtime::distributed
