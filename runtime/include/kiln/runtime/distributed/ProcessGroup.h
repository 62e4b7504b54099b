// kiln/runtime/distributed/ProcessGroup.h - collectives over the ranks of a
// job (c10d's ProcessGroup: torch.distributed's all_reduce, broadcast, ...).
//
// Every collective is asynchronous: it returns a Work at once and runs on the
// group's communication thread, in the order the calls were made (all ranks
// must make the same calls in the same order, as with c10d). Tensors are
// dense (contiguous) views; the caller keeps them alive and untouched until
// wait() returns. Which devices a backend takes:
//   gloo  CPU tensors in place; CUDA tensors (a GPU's or the simulator's)
//         staged through pinned host memory (c10d's ProcessGroupGloo CUDA
//         work: device->host copy, the collective on the host copy, copy back);
//   nccl  CUDA tensors of the group's device only, reduced on the GPU by NCCL
//         on the calling thread's current stream of that device.
//
//   auto store = std::make_shared<HashStore>();           // or a TCPStore
//   auto pg = make_nccl_process_group(store, rank, size); // throws when NCCL cannot run
//   pg->allreduce(grad_view, ReduceOp::Avg)->wait();
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/runtime/TensorView.h"
#include "kiln/runtime/distributed/Store.h"

namespace kiln::runtime::distributed {

/// How all_reduce/reduce_scatter combine (torch.distributed.ReduceOp).
/// Avg is the sum divided by the group size (integer division for integers).
enum class ReduceOp { Sum, Avg, Max, Min };
const char *reduce_op_name(ReduceOp op);

/// One collective in flight (c10d's Work). Thread-safe.
class Work {
public:
  using Clock = std::chrono::steady_clock;

  /// True once the collective finished, successfully or not.
  bool is_completed();
  /// Blocks until the collective finishes and rethrows its failure
  /// (DistributedError). `timeout` 0: the group's timeout; past it, throws
  /// DistributedError Timeout (the collective itself keeps its own timeout).
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  /// When the communication thread started and finished this collective
  /// (steady clock; for overlap measurements).
  Clock::time_point start_time();
  Clock::time_point end_time();
  /// What the collective is ("allreduce #12 (float32, 1024 elements)").
  const std::string &description() const { return description_; }

  // Used by the process group that runs the collective.
  Work(std::string description, std::chrono::milliseconds default_timeout)
      : description_(std::move(description)), default_timeout_(default_timeout) {}
  void mark_started();
  void finish(std::exception_ptr error);

private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  Clock::time_point start_{}, end_{};
  std::string description_;
  std::chrono::milliseconds default_timeout_;
};

class ProcessGroup {
public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;
  /// The timeout each collective runs under (default kDefaultTimeout).
  virtual std::chrono::milliseconds timeout() const = 0;

  /// Reduces `tensor` in place across the group: afterwards every rank holds
  /// op(tensor of rank 0, ..., tensor of rank size-1).
  virtual std::shared_ptr<Work> allreduce(const TensorView &tensor, ReduceOp op) = 0;
  /// Copies rank `root`'s `tensor` into every rank's `tensor`.
  virtual std::shared_ptr<Work> broadcast(const TensorView &tensor, int root) = 0;
  /// outputs[r] = rank r's `input` (outputs.size() == size(), each with
  /// input's element count and dtype).
  virtual std::shared_ptr<Work> allgather(const std::vector<TensorView> &outputs, const TensorView &input) = 0;
  /// output = op over ranks of inputs[rank()] (inputs.size() == size()).
  virtual std::shared_ptr<Work> reduce_scatter(const TensorView &output, const std::vector<TensorView> &inputs,
                                               ReduceOp op) = 0;
  /// Completes when every rank has called barrier().
  virtual std::shared_ptr<Work> barrier() = 0;

private:
  int rank_, size_;
};

/// Options of the Gloo process group.
struct GlooOptions {
  /// The address this rank's TCP transport binds and tells its peers
  /// (Gloo's default resolves gethostname(), which need not be reachable).
  /// init_process_group sets it with choose_gloo_hostname(); 127.0.0.1
  /// serves the ranks of one node only.
  std::string hostname = "127.0.0.1";
  std::chrono::milliseconds timeout = kDefaultTimeout;
  /// Before each collective, the ranks compare its fingerprint (op, sizes,
  /// dtype, sequence number) and the first desync is reported instead of
  /// hanging (KILN_DISTRIBUTED_DEBUG=DETAIL turns it on by default).
  bool check_fingerprints = false;
};

/// Gloo's TCP collectives (PyTorch's CPU DDP backend, Debian libgloo-dev
/// 0.5): ranks meet through `store` (connectFullMesh), every collective has
/// its own tag (its sequence number) and the group's timeout. After a
/// transport failure (a peer died or timed out) the group is broken: that
/// collective and every later one throw DistributedError naming the cause.
/// CUDA tensors are staged through pinned host blocks of the CUDA backend's
/// CachingHostAllocator (c10d ProcessGroupGloo's AsyncAllreduceCUDAWork and
/// its siblings): at the call, a staging stream of the tensor's device waits
/// for the caller's current stream and copies device->host; the
/// communication thread waits for that copy, runs the collective on the host
/// copy, copies the results host->device and waits before the Work
/// completes. Throws DistributedError when the ranks cannot connect within
/// the timeout.
std::unique_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const GlooOptions &options = {});

/// The address a rank's Gloo transport binds (GlooOptions::hostname), chosen
/// as c10d's ProcessGroupGloo does, first match:
///  1. GLOO_SOCKET_IFNAME=IFACE (PyTorch's variable; one interface name):
///     that interface's IPv4 address;
///  2. KILN_GLOO_HOSTNAME=ADDR (an IPv4 address or a name resolving to one):
///     ADDR, which must be an address of this node;
///  3. `store_local_address` when not empty: this rank's end of its
///     connection to the store's master (TCPStore::local_address()), i.e.
///     the address of the interface this node reaches MASTER_ADDR through,
///     127.0.0.1 when MASTER_ADDR is loopback (also when a name resolves
///     to a loopback alias on the master's node: set GLOO_SOCKET_IFNAME
///     there, or give MASTER_ADDR as an address);
///  4. otherwise (a FileStore, say) 127.0.0.1: the ranks of one node.
/// The first overload reads the two variables from the environment; the
/// second takes their values ("" for unset).
/// Example: MASTER_ADDR=10.1.0.1 on a node whose eth0 is 10.1.0.2/24 gives
/// "10.1.0.2"; GLOO_SOCKET_IFNAME=lo gives "127.0.0.1".
/// Throws DistributedError Invalid naming the variable and its value when
/// both are set, when GLOO_SOCKET_IFNAME is not an interface with an IPv4
/// address (or names several), or when KILN_GLOO_HOSTNAME does not resolve
/// or is not this node's (the message lists this node's interfaces).
std::string choose_gloo_hostname(const std::string &store_local_address);
std::string choose_gloo_hostname(const std::string &store_local_address, const std::string &socket_ifname,
                                 const std::string &kiln_hostname);

/// Options of the NCCL process group.
struct NcclOptions {
  /// Each collective's limit: past it the watchdog aborts the communicator
  /// (ncclCommAbort) and the Work fails with DistributedError Timeout.
  std::chrono::milliseconds timeout = kDefaultTimeout;
  /// The CUDA device of this rank's communicator; -1: rank % device count
  /// (one process per GPU, torchrun's LOCAL_RANK convention on one node).
  int device = -1;
  /// Before each collective the ranks all-gather its fingerprint (op,
  /// dtype, elements, root, sequence number) through a small buffer on the
  /// device (NCCL reduces device memory only) and compare them: the first
  /// desync throws DistributedError Mismatch on every rank instead of
  /// hanging, an exchange past the timeout Timeout. Also on one rank (the
  /// one-GPU device script exercises it). Each collective then waits for
  /// that exchange on the host: a debug mode (KILN_DISTRIBUTED_DEBUG=DETAIL
  /// turns it on).
  bool check_fingerprints = false;
};

/// NCCL's GPU collectives (c10d's ProcessGroupNCCL; NCCL 2 user guide,
/// "Creating a communicator"): rank 0 makes the ncclUniqueId
/// (ncclGetUniqueId) and sets it in `store`, the other ranks get it, every
/// rank calls ncclCommInitRank on its device. libnccl.so.2 is loaded at run
/// time (dlopen; nothing is linked), so a binary built with this starts on a
/// machine without NCCL or a GPU and only this call fails.
///
/// Tensors: contiguous CUDA views on the group's device; dtypes float32,
/// float64, float16, bfloat16, int64, int32 (ncclFloat32 ... ncclInt32) and
/// bool (ncclUint8; sum and max are logical or, min is and, avg is an
/// error, as c10d). ReduceOp::Avg is ncclAvg (for integers, NCCL divides
/// the sum by the group size). Each collective is enqueued on the calling
/// thread's current stream of the device (CurrentStream.h) when it is
/// called; its Work completes when a CUDA event recorded after it has
/// completed. A watchdog thread polls those events and
/// ncclCommGetAsyncError (c10d's watchdog): an asynchronous NCCL error or a
/// collective past the timeout aborts the communicator, fails that Work
/// (PeerLost naming NCCL's error, or Timeout) and breaks the group: every
/// later collective throws PeerLost naming the first failure. Calls on one
/// group are serialized by a mutex (NCCL's rule: one thread at a time per
/// communicator).
///
/// Throws DistributedError: Invalid "NCCL is not available: <why>" when
/// nccl_unavailable_reason() is not empty; Invalid for a rank outside
/// [0, size) or a device that does not exist; Timeout when rank 0's id does
/// not arrive within the store's timeout; PeerLost when ncclCommInitRank
/// fails (naming NCCL's error string).
std::unique_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const NcclOptions &options = {});

/// Why the NCCL backend cannot run in this process, or "" when it can: the
/// library could not be loaded (dlopen's message), CUDA is not available
/// (cuda::availability_reason(): no driver, no device, ...), or the CUDA
/// device is the simulator (KILN_CUDA_SIM=1: NCCL needs a GPU; Gloo stages
/// CUDA tensors through host memory instead). Never throws.
std::string nccl_unavailable_reason();

} // namespace kiln::runtime::distributed
