// kiln/distributed.h - data-parallel training across processes
// (torch.distributed and torch.nn.parallel.DistributedDataParallel).
//
//   kiln::distributed::init_process_group();            // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   auto ddp = std::make_shared<kiln::distributed::DistributedDataParallel>(model);
//   auto loss = loss_fn(ddp->forward(x), y);
//   loss.backward();                                    // gradients averaged over the ranks
//   opt.step();
//
// Launch with kilnrun (torchrun's conventions): `kilnrun --nproc-per-node 2 prog`
// on one node; on several, one kilnrun per node with --nnodes, --node-rank and
// --master-addr (an address of node 0 the others reach).
// Batch norm over the global batch: nn::SyncBatchNorm (kiln/nn.h), e.g.
// `model = nn::SyncBatchNorm::convert_sync_batchnorm(model);` before DDP.
// The process group is Gloo over TCP by default: CPU tensors are reduced in
// place, CUDA tensors (a GPU's or the simulator's) are staged through pinned
// host memory. Backend "nccl" reduces CUDA tensors on the GPU (one process
// per GPU; libnccl.so.2 is loaded at run time). Every failure (a dead or
// stuck peer, a desync, a timeout) is a kiln::Error naming the collective and
// what to check, never a hang past the group's timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data.h"
#include "kiln/nn.h"
#include "kiln/tensor.h"

namespace kiln::runtime::distributed {
class ProcessGroup;
class Store;
class Work;
} // namespace kiln::runtime::distributed

namespace kiln::distributed {

/// How all_reduce combines (torch.distributed.ReduceOp). Avg divides the sum
/// by the world size (integer division for integer tensors).
enum class ReduceOp { Sum, Avg, Max, Min };

/// Options of init_process_group; an empty or negative field is read from
/// the environment kilnrun/torchrun set.
struct InitOptions {
  /// "gloo" (CPU tensors, and CUDA tensors through host memory) or "nccl"
  /// (CUDA tensors of this rank's GPU, cuda:(rank % device count); throws
  /// kiln::Error "NCCL is not available: ..." without libnccl or a GPU).
  std::string backend = "gloo";
  int rank = -1;                 ///< RANK
  int world_size = -1;           ///< WORLD_SIZE
  std::string master_addr;       ///< MASTER_ADDR (default 127.0.0.1)
  int master_port = -1;          ///< MASTER_PORT (default 29500)
  /// Every collective and the rendezvous fail with kiln::Error after this
  /// long (KILN_DISTRIBUTED_TIMEOUT_S overrides; default 300 s).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

/// Creates the default process group: rank 0 serves a TCPStore at
/// MASTER_ADDR:MASTER_PORT, every rank connects, and the Gloo transport
/// meets its peers through it. Each rank's Gloo transport binds the address
/// of the interface its node reaches MASTER_ADDR through (127.0.0.1 when
/// MASTER_ADDR is loopback); GLOO_SOCKET_IFNAME=IFACE or
/// KILN_GLOO_HOSTNAME=ADDR choose another (runtime::distributed::
/// choose_gloo_hostname). Throws kiln::Error when a variable is missing
/// or malformed ("RANK is not set: launch with kilnrun"), when
/// GLOO_SOCKET_IFNAME/KILN_GLOO_HOSTNAME name no interface/address of this
/// node, when MASTER_ADDR is unreachable, when the group is already
/// initialized, or when the peers do not all arrive in time.
void init_process_group(const InitOptions &options = {});
/// The same on a store the caller made (a HashStore for ranks that are
/// threads, a FileStore on a shared file system); `backend` as in
/// InitOptions ("gloo" or "nccl"; another name throws kiln::Error).
/// threads, a FileStore on a shared file system). With a TCPStore the
/// transport binds that store's local_address(); with another store,
/// 127.0.0.1 unless GLOO_SOCKET_IFNAME/KILN_GLOO_HOSTNAME says otherwise
/// (set one on every node of a multi-node job).
void init_process_group(std::shared_ptr<runtime::distributed::Store> store, int rank, int world_size,
                        std::chrono::milliseconds timeout = std::chrono::seconds(300),
                        const std::string &backend = "gloo");
/// Destroys the default group (its sockets and thread). No-op when none.
void destroy_process_group();
bool is_initialized();
/// This process's rank and the group's size; throw kiln::Error when no group.
int get_rank();
int get_world_size();

/// An asynchronous collective (torch.distributed.Work).
class Work {
public:
  explicit Work(std::shared_ptr<runtime::distributed::Work> work);
  /// Blocks until done; throws kiln::Error with the collective's failure.
  void wait();
  bool is_completed() const;

private:
  std::shared_ptr<runtime::distributed::Work> work_;
};

/// Reduces `tensor` in place over the default group: every rank gets
/// op(tensor of every rank). The tensor must be contiguous, of any dtype
/// (bool: sum/max are or, min is and), on the cpu or cuda with Gloo, on
/// this rank's cuda device with NCCL.
/// async_op: returns at once; keep `tensor` untouched until wait().
/// Throws kiln::Error for a bad tensor or a failed collective.
Work all_reduce(Tensor &tensor, ReduceOp op = ReduceOp::Sum, bool async_op = false);
/// Copies rank `src`'s tensor into every rank's `tensor` (same shape and dtype).
Work broadcast(Tensor &tensor, int src, bool async_op = false);
/// outputs[r] = rank r's `input`; `outputs` is resized to the world size
/// with tensors like `input`.
void all_gather(std::vector<Tensor> &outputs, const Tensor &input);
/// Returns when every rank has called barrier().
void barrier();

/// What DistributedDataParallel does (torch's constructor arguments).
struct DDPOptions {
  /// Bucket size caps in MiB: the first bucket (the last layers' gradients,
  /// ready first) is small so its all-reduce starts early. The others are
  /// also capped at a quarter of all the gradients' bytes (never below the
  /// first cap), so that the bucket launched last, whose all-reduce cannot
  /// overlap the backward, is small in a model of a few MiB too (PyTorch's
  /// DDP leaves it all but the first bucket; the same for models of over
  /// 4 x bucket_cap_mb). A bucket closes once it reaches its cap.
  double first_bucket_cap_mb = 1;
  double bucket_cap_mb = 25;
  /// Parameters the forward did not use are found by walking the autograd
  /// graph from the outputs and count as ready with a zero gradient; a
  /// parameter no rank used keeps its .grad() undefined.
  bool find_unused_parameters = false;
  /// Each .grad() is a view into its bucket (no copy back after the
  /// all-reduce; the memory of one copy of the gradients saved).
  bool gradient_as_bucket_view = false;
  /// Broadcast rank 0's buffers (batch-norm statistics) before each forward.
  bool broadcast_buffers = true;
  /// Communication hook: "" (all-reduce the buckets as they are) or
  /// "bf16_compress" (torch's bf16_compress_hook: all-reduce bfloat16
  /// copies of float32 buckets, half the bytes).
  std::string comm_hook;
};

/// Data parallelism across the ranks of the default group
/// (torch.nn.parallel.DistributedDataParallel, Li et al., VLDB 2020).
///
/// Construction checks that every rank has the same parameter names, shapes
/// and dtypes (kiln::Error naming the first difference on every rank) and
/// copies rank 0's parameters and buffers to all. During backward each
/// parameter's gradient, divided by the world size, is copied into its
/// bucket when it is accumulated (a post-accumulate-grad hook); a bucket's
/// all-reduce starts as soon as its last gradient is ready, overlapping the
/// rest of the backward; the backward returns once every bucket is reduced
/// and the averaged gradients are in .grad(). Buckets start in reverse
/// registration order and are rebuilt once, after the first backward, in
/// the order gradients became ready there (rank 0's order, broadcast).
///
/// Devices: every parameter on one device, the cpu or one CUDA device (a
/// GPU's or the simulator's); the buckets, the bf16 hook's copies and the
/// reducer's bookkeeping tensors (the model check, the rebuilt bucket order,
/// the unused-parameter flags) live there. Gloo reduces cpu tensors in place
/// and stages CUDA tensors through pinned host memory; NCCL takes CUDA
/// tensors only. Throws kiln::Error naming the first parameter on another
/// device than the first's, or the first parameter of a cpu model on an NCCL
/// group. (A CUDA model trains eagerly: kiln::compile has no CUDA target yet.)
class DistributedDataParallel : public nn::Module {
public:
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options = {});
  ~DistributedDataParallel() override;
  Tensor forward(const Tensor &input) override;
  std::vector<Tensor> forward(const std::vector<Tensor> &inputs) override;
  std::string name() const override { return "DistributedDataParallel"; }
  void train(bool on = true) override;

  /// The wrapped module (its parameters are this module's).
  const std::shared_ptr<nn::Module> &module() const { return module_; }

  /// RAII: inside, backward accumulates gradients locally without
  /// all-reducing them (DDP.no_sync()); the first backward after it reduces
  /// the accumulated sum.
  class NoSync {
  public:
    explicit NoSync(DistributedDataParallel &ddp);
    ~NoSync();

  private:
    DistributedDataParallel &ddp_;
    bool prev_;
  };
  NoSync no_sync() { return NoSync(*this); }

  /// The buckets' parameter indices (into module()->parameters()), in launch
  /// order, and the bytes of each (for tests and kiln::explain).
  std::vector<std::vector<size_t>> bucket_indices() const;
  /// Per bucket of the last backward: when its all-reduce started and ended
  /// on the communication thread (steady clock).
  struct BucketTiming {
    std::chrono::steady_clock::time_point ready, start, end;
  };
  std::vector<BucketTiming> last_timings() const;

  struct Reducer;

private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<Reducer> reducer_;
};

/// The shard of a dataset one rank reads (torch.utils.data.DistributedSampler):
/// the indices 0..N-1 (shuffled per epoch with randperm(N, seed * 1000003 +
/// epoch) when `shuffle`) padded by wrapping around to a multiple of the
/// world size (or, with drop_last, cut to one), then every
/// num_replicas-th starting at `rank`. Every rank gets the same count.
/// Throws kiln::Error for num_replicas < 1 or rank outside [0, num_replicas).
class DistributedSampler {
public:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  /// The default group's world size and rank.
  explicit DistributedSampler(int64_t dataset_size, bool shuffle = true, uint64_t seed = 0, bool drop_last = false);
  /// Makes indices() those of epoch `e` (call before each epoch, as in torch).
  void set_epoch(uint64_t e) { *epoch_ = e; }
  uint64_t epoch() const { return *epoch_; }
  /// This rank's indices for the current epoch.
  std::vector<int64_t> indices() const;
  /// Indices per rank.
  int64_t num_samples() const;
  /// `dataset` seen through this sampler: sample i is dataset[indices()[i]]
  /// of the epoch set when the loader starts it (use a DataLoader without
  /// shuffle on it).
  std::shared_ptr<data::Dataset> shard(std::shared_ptr<data::Dataset> dataset) const;

private:
  int64_t size_;
  int num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  std::shared_ptr<uint64_t> epoch_ = std::make_shared<uint64_t>(0); ///< shared with shard()s
};

} // namespace kiln::distributed
