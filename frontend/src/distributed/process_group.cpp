// The default process group, the tensor collectives and DistributedSampler
// (kiln/distributed.h) over runtime/distributed.
#include <cstdlib>
#include <mutex>

#include "distributed_internal.h"
#include "kiln/error.h"
#include "kiln/ops.h"
#include "kiln/runtime/distributed/TCPStore.h"
#include "ops/dispatch.h"

namespace kiln::distributed {

namespace rd = runtime::distributed;
using dispatch::view_of;

namespace {
std::mutex g_mu;
std::shared_ptr<rd::ProcessGroup> g_group;

int env_int(const char *name, int given, int fallback, bool required) {
  if (given >= 0) return given;
  const char *v = std::getenv(name);
  if (!v || !*v) {
    KILN_CHECK(!required, "init_process_group: ", name, " is not set; launch with kilnrun (kilnrun --nproc-per-node 2 ",
               "prog) or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
    return fallback;
  }
  char *end = nullptr;
  const long x = std::strtol(v, &end, 10);
  KILN_CHECK(end && *end == '\0' && x >= 0 && x <= 1 << 30, "init_process_group: ", name, "='", v,
             "' is not a non-negative integer");
  return static_cast<int>(x);
}
/// This rank's end of its connection to a TCPStore's master ("" for the
/// other stores): the address the other nodes reach this one at.
std::string store_local_address(rd::Store &store) {
  auto *tcp = dynamic_cast<rd::TCPStore *>(&store);
  return tcp ? tcp->local_address() : "";
}
} // namespace

std::shared_ptr<rd::ProcessGroup> default_group(const char *op) {
  std::lock_guard<std::mutex> lock(g_mu);
  KILN_CHECK(g_group != nullptr, op, ": the default process group is not initialized; call kiln::distributed::",
             "init_process_group() first");
  return g_group;
}

namespace {
void check_backend_name(const std::string &backend) {
  KILN_CHECK(backend == "gloo" || backend == "nccl", "init_process_group: backend '", backend,
             "' is not available (expected 'gloo' or 'nccl')");
}

std::shared_ptr<rd::ProcessGroup> make_group(const std::string &backend, std::shared_ptr<rd::Store> store, int rank,
                                             int world_size, std::chrono::milliseconds timeout,
                                             const std::string &gloo_hostname) {
  if (backend == "nccl") {
    rd::NcclOptions options;
    options.timeout = timeout;
    return rd::make_nccl_process_group(std::move(store), rank, world_size, options);
  }
  rd::GlooOptions options;
  options.timeout = timeout;
  options.hostname = gloo_hostname;
  return rd::make_gloo_process_group(std::move(store), rank, world_size, options);
}
} // namespace

void init_process_group(std::shared_ptr<rd::Store> store, int rank, int world_size, std::chrono::milliseconds timeout,
                        const std::string &backend) {
  check_backend_name(backend);
  KILN_CHECK(!is_initialized(), "init_process_group: the default process group is already initialized ",
             "(call destroy_process_group() first)");
  KILN_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "init_process_group: rank ", rank,
             " is not in a group of size ", world_size);
  std::shared_ptr<rd::ProcessGroup> group;
  std::string gloo_hostname;
  try {
    if (backend == "gloo") gloo_hostname = rd::choose_gloo_hostname(store_local_address(*store));
  } catch (const std::exception &e) {
    throw Error("init_process_group: rank " + std::to_string(rank) + ": " + e.what());
  }
  try {
    store->set_timeout(timeout);
    group = make_group(backend, std::move(store), rank, world_size, timeout, gloo_hostname);
  } catch (const std::exception &e) {
    throw Error(std::string(e.what()));
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_group = std::move(group);
}

void init_process_group(const InitOptions &o) {
  check_backend_name(o.backend);
  const int rank = env_int("RANK", o.rank, 0, true);
  const int world_size = env_int("WORLD_SIZE", o.world_size, 1, true);
  const int port = env_int("MASTER_PORT", o.master_port, 29500, false);
  std::string addr = o.master_addr;
  if (addr.empty()) addr = std::getenv("MASTER_ADDR") ? std::getenv("MASTER_ADDR") : "127.0.0.1";
  std::chrono::milliseconds timeout = o.timeout;
  if (const char *t = std::getenv("KILN_DISTRIBUTED_TIMEOUT_S"))
    timeout = std::chrono::milliseconds(static_cast<int64_t>(std::atof(t) * 1000));
  KILN_CHECK(port > 0 && port < 65536, "init_process_group: MASTER_PORT ", port, " is not a TCP port");
  std::shared_ptr<rd::Store> store;
  try {
    rd::TCPStoreOptions so;
    so.host = addr;
    so.port = static_cast<uint16_t>(port);
    so.is_master = rank == 0;
    so.num_workers = world_size;
    so.timeout = timeout;
    store = std::make_shared<rd::TCPStore>(so);
  } catch (const std::exception &e) {
    throw Error(std::string("init_process_group: rank ") + std::to_string(rank) + ": " + e.what());
  }
  init_process_group(std::move(store), rank, world_size, timeout, o.backend);
}

void destroy_process_group() {
  std::shared_ptr<rd::ProcessGroup> g;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g = std::move(g_group);
  }
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_group != nullptr;
}

int get_rank() { return default_group("get_rank")->rank(); }
int get_world_size() { return default_group("get_world_size")->size(); }

Work::Work(std::shared_ptr<rd::Work> work) : work_(std::move(work)) {}

void Work::wait() {
  if (!work_) return;
  try {
    work_->wait();
  } catch (const std::exception &e) {
    throw Error(e.what());
  }
}

bool Work::is_completed() const { return !work_ || work_->is_completed(); }

rd::ReduceOp to_runtime(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return rd::ReduceOp::Sum;
  case ReduceOp::Avg: return rd::ReduceOp::Avg;
  case ReduceOp::Max: return rd::ReduceOp::Max;
  case ReduceOp::Min: return rd::ReduceOp::Min;
  }
  return rd::ReduceOp::Sum;
}

runtime::TensorView comm_view(const Tensor &t, const char *op) {
  KILN_CHECK(t.defined(), op, ": the tensor is undefined");
  KILN_CHECK(t.is_contiguous(), op, ": the tensor of shape ", shape_str(t.sizes()),
             " is not contiguous (call .contiguous())");
  // Gloo takes CPU and CUDA tensors (staged through pinned memory), NCCL
  // CUDA tensors of its device: the group checks and names the device.
  KILN_CHECK(t.device().type == DeviceType::CPU || t.device().type == DeviceType::CUDA ||
                 runtime::find_backend(t.device().type)->host_accessible(),
             op, ": a tensor on ", t.device().str(), " (expected cpu or cuda; move it with .to(kCPU))");
  return view_of(t);
}

Work run_collective(const char *op, const std::function<std::shared_ptr<rd::Work>(rd::ProcessGroup &)> &f,
                    bool async_op) {
  auto group = default_group(op);
  Work w(nullptr);
  try {
    w = Work(f(*group));
  } catch (const std::exception &e) {
    throw Error(std::string(op) + ": " + e.what());
  }
  if (!async_op) w.wait();
  return w;
}

Work all_reduce(Tensor &tensor, ReduceOp op, bool async_op) {
  const auto v = comm_view(tensor, "all_reduce");
  tensor.bump_version();
  return run_collective("all_reduce", [&](rd::ProcessGroup &g) { return g.allreduce(v, to_runtime(op)); }, async_op);
}

Work broadcast(Tensor &tensor, int src, bool async_op) {
  const auto v = comm_view(tensor, "broadcast");
  tensor.bump_version();
  return run_collective("broadcast", [&](rd::ProcessGroup &g) { return g.broadcast(v, src); }, async_op);
}

void all_gather(std::vector<Tensor> &outputs, const Tensor &input) {
  const auto in = comm_view(input, "all_gather");
  const int n = get_world_size();
  outputs.clear();
  std::vector<runtime::TensorView> views;
  for (int r = 0; r < n; ++r) {
    outputs.push_back(zeros(input.sizes(), input.dtype(), input.device()));
    views.push_back(view_of(outputs.back()));
  }
  run_collective("all_gather", [&](rd::ProcessGroup &g) { return g.allgather(views, in); }, false);
}

void barrier() {
  run_collective("barrier", [](rd::ProcessGroup &g) { return g.barrier(); }, false);
}

// ---- DistributedSampler -----------------------------------------------------

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : size_(dataset_size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed),
      drop_last_(drop_last) {
  KILN_CHECK(dataset_size >= 0, "DistributedSampler: dataset size ", dataset_size, " (expected >= 0)");
  KILN_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas ", num_replicas, " (expected >= 1)");
  KILN_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank, " is not in [0, ", num_replicas,
             ")");
}

DistributedSampler::DistributedSampler(int64_t dataset_size, bool shuffle, uint64_t seed, bool drop_last)
    : DistributedSampler(dataset_size, get_world_size(), get_rank(), shuffle, seed, drop_last) {}

int64_t DistributedSampler::num_samples() const {
  return drop_last_ ? size_ / num_replicas_ : (size_ + num_replicas_ - 1) / num_replicas_;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (shuffle_) {
    order = data::randperm(size_, seed_ * 1000003 + *epoch_);
  } else {
    order.resize(static_cast<size_t>(size_));
    for (int64_t i = 0; i < size_; ++i) order[static_cast<size_t>(i)] = i;
  }
  const int64_t total = num_samples() * num_replicas_;
  for (int64_t i = size_; i < total && size_ > 0; ++i) order.push_back(order[static_cast<size_t>((i - size_) % size_)]);
  order.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  for (int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

namespace {
class ShardDataset final : public data::Dataset {
public:
  ShardDataset(DistributedSampler sampler, std::shared_ptr<data::Dataset> inner)
      : sampler_(std::move(sampler)), inner_(std::move(inner)) {}
  int64_t size() const override { return sampler_.num_samples(); }
  data::Example get(int64_t index) override {
    KILN_CHECK(index >= 0 && index < size(), "DistributedSampler shard: index ", index, " is not in [0, ", size(), ")");
    int64_t i;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (sampler_.epoch() != cached_epoch_ || cached_.empty()) { // set_epoch since the last get
        cached_ = sampler_.indices();
        cached_epoch_ = sampler_.epoch();
      }
      i = cached_[static_cast<size_t>(index)];
    }
    return inner_->get(i);
  }

private:
  DistributedSampler sampler_;
  std::shared_ptr<data::Dataset> inner_;
  std::mutex mu_;
  uint64_t cached_epoch_ = 0;
  std::vector<int64_t> cached_;
};
} // namespace

std::shared_ptr<data::Dataset> DistributedSampler::shard(std::shared_ptr<data::Dataset> dataset) const {
  KILN_CHECK(dataset != nullptr, "DistributedSampler::shard: no dataset");
  KILN_CHECK(dataset->size() == size_, "DistributedSampler::shard: the dataset has ", dataset->size(),
             " samples but the sampler was made for ", size_);
  return std::make_shared<ShardDataset>(*this, std::move(dataset));
}

} // namespace kiln::distributed
