// DataLoader: epochs, worker threads and the in-order prefetch queue.
//
// Protocol (the fields after `mu` in LoaderState are guarded by it):
//  - begin() publishes an EpochPlan (a fresh generation number, the epoch and
//    its index order); workers notice the new generation and start on it.
//  - Worker w loads batches w, w + W, w + 2W, ... of the plan (W workers), each
//    only once it lies in the window [next_to_take, next_to_take + capacity),
//    capacity = prefetch_factor * W. So at most `capacity` batches are loaded
//    but not consumed, and the batch the consumer waits for is always one its
//    worker may load now: no deadlock.
//  - Results (a Batch, or the message of what its loading threw) go into
//    `ready` keyed by batch index; the consumer takes them in index order, so
//    what it sees never depends on timing.
//  - Retiring a plan (epoch done or abandoned) clears `ready`; a worker that
//    finishes a batch of a stale plan drops it. Non-persistent workers are
//    joined when their plan retires, all workers when the loader is destroyed.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <numeric>
#include <system_error>
#include <thread>

#include "kiln/data.h"

namespace kiln::data {

static thread_local WorkerInfo *current_worker = nullptr;

WorkerInfo *worker_info() { return current_worker; }

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t worker_seed(uint64_t base_seed, uint64_t epoch, int64_t worker_id) {
  return splitmix64(splitmix64(splitmix64(base_seed) ^ epoch) ^ static_cast<uint64_t>(worker_id));
}

namespace detail {

/// One epoch as the workers see it; immutable once published.
struct EpochPlan {
  uint64_t generation = 0;  ///< unique per begin() of one loader
  uint64_t epoch = 0;
  std::vector<int64_t> order;  ///< dataset indices in the order of this epoch
  int64_t batch_size = 1;
  int64_t num_batches = 0;
};

/// A loaded batch, or the message of the exception its loading threw.
struct Slot {
  Batch batch;
  bool ok = false;
  std::string error;
};

/// Gets the examples of batch `b` of `plan` and collates them; never throws.
static Slot load_batch(Dataset &dataset, const CollateFn &collate, const EpochPlan &plan, int64_t b,
                       int64_t worker_id) {
  Slot slot;
  auto failed = [&](const char *what) {
    std::ostringstream os;
    os << "DataLoader: batch " << b << " of epoch " << plan.epoch;
    if (worker_id >= 0) os << " (worker " << worker_id << ")";
    else os << " (main thread)";
    os << " failed: " << what;
    slot.error = os.str();
  };
  try {
    const int64_t start = b * plan.batch_size;
    const int64_t end = std::min<int64_t>(start + plan.batch_size, static_cast<int64_t>(plan.order.size()));
    std::vector<Example> examples;
    examples.reserve(static_cast<size_t>(end - start));
    for (int64_t k = start; k < end; ++k) examples.push_back(dataset.get(plan.order[static_cast<size_t>(k)]));
    slot.batch = collate(examples);
    slot.batch.indices.assign(plan.order.begin() + start, plan.order.begin() + end);
    slot.ok = true;
  } catch (const std::exception &e) {
    failed(e.what());
  } catch (...) {
    failed("an exception not derived from std::exception");
  }
  return slot;
}

/// Everything a loader shares with its worker threads and its iterators.
struct LoaderState {
  std::shared_ptr<Dataset> dataset;
  DataLoaderOptions options;
  CollateFn collate;
  uint64_t next_epoch = 0;       // consumer thread only
  uint64_t last_generation = 0;  // consumer thread only
  std::vector<std::thread> threads;  // consumer thread only

  std::mutex mu;
  std::condition_variable work_cv;   // workers: new plan, window moved, stop
  std::condition_variable ready_cv;  // consumer: a batch arrived, loader closed
  std::shared_ptr<const EpochPlan> plan;  // the plan being served; null when idle
  int64_t next_to_take = 0;               // first batch of `plan` not yet consumed
  std::map<int64_t, Slot> ready;          // loaded, not yet consumed
  bool stopping = false;                  // workers must exit
  bool closed = false;                    // the DataLoader was destroyed

  ~LoaderState() { stop_workers(); }  // normally already joined by close()

  int64_t workers() const { return options.num_workers(); }
  int64_t capacity() const { return options.prefetch_factor() * options.num_workers(); }

  int64_t num_batches(int64_t n) const {
    const int64_t bs = options.batch_size();
    return options.drop_last() ? n / bs : (n + bs - 1) / bs;
  }

  std::shared_ptr<const EpochPlan> make_plan() {
    const int64_t n = dataset->size();
    KILN_CHECK(n > 0, "DataLoader: the dataset is empty (size ", n, ")");
    auto p = std::make_shared<EpochPlan>();
    p->generation = ++last_generation;
    p->epoch = next_epoch++;
    if (options.shuffle()) {
      p->order = randperm(n, options.seed() * 1000003ULL + p->epoch);
    } else {
      p->order.resize(static_cast<size_t>(n));
      std::iota(p->order.begin(), p->order.end(), 0);
    }
    p->batch_size = options.batch_size();
    p->num_batches = num_batches(n);
    return p;
  }

  /// Makes `p` the plan served (abandoning the previous one) and starts the
  /// workers when none run.
  void publish(std::shared_ptr<const EpochPlan> p) {
    std::map<int64_t, Slot> dropped;
    {
      std::lock_guard<std::mutex> lock(mu);
      plan = std::move(p);
      next_to_take = 0;
      dropped.swap(ready);
    }
    if (workers() > 0 && threads.empty()) start_workers();
    work_cv.notify_all();
  }

  /// Ends plan `generation` if it is still the one served: drops its
  /// prefetched batches and joins non-persistent workers.
  void retire(uint64_t generation) noexcept {
    std::map<int64_t, Slot> dropped;
    bool was_current = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (plan && plan->generation == generation) {
        was_current = true;
        plan.reset();
        dropped.swap(ready);
      }
    }
    if (was_current && !options.persistent_workers()) stop_workers();
  }

  /// The DataLoader is going away: fail its live iterators, join the workers.
  void close() noexcept {
    std::map<int64_t, Slot> dropped;
    {
      std::lock_guard<std::mutex> lock(mu);
      closed = true;
      plan.reset();
      dropped.swap(ready);
    }
    ready_cv.notify_all();
    stop_workers();
  }

  /// Throws unless `p` is still the plan served by an open loader (mu held).
  void check_current(const EpochPlan &p) const {
    KILN_CHECK(!closed, "DataLoader: the loader was destroyed while an iterator of epoch ", p.epoch,
               " was still in use");
    KILN_CHECK(plan.get() == &p, "DataLoader: the iterator of epoch ", p.epoch,
               " was abandoned by a later begin(); iterate the newest epoch");
  }

  /// Batch `b` of `p`: from the workers (waiting for it) or loaded here.
  Slot take(const EpochPlan &p, int64_t b) {
    if (workers() == 0) {
      {
        std::lock_guard<std::mutex> lock(mu);
        check_current(p);
      }
      return load_batch(*dataset, collate, p, b, /*worker_id=*/-1);
    }
    std::unique_lock<std::mutex> lock(mu);
    ready_cv.wait(lock, [&] { return closed || plan.get() != &p || ready.count(b) > 0; });
    check_current(p);
    auto node = ready.extract(b);
    next_to_take = b + 1;
    lock.unlock();
    work_cv.notify_all();
    return std::move(node.mapped());
  }

  void start_workers() {
    threads.reserve(static_cast<size_t>(workers()));
    for (int64_t id = 0; id < workers(); ++id) {
      try {
        threads.emplace_back([this, id] { worker_main(id); });
      } catch (const std::system_error &e) {
        stop_workers();
        KILN_CHECK(false, "DataLoader: could not start worker thread ", id, " of ", workers(), ": ", e.what());
      }
    }
  }

  void stop_workers() noexcept {
    if (threads.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    work_cv.notify_all();
    for (std::thread &t : threads) t.join();
    threads.clear();
    std::lock_guard<std::mutex> lock(mu);
    stopping = false;
  }

  /// True when worker `id`, at generation `gen` with next batch `mine`, has
  /// something to do (mu held).
  bool has_work(uint64_t gen, int64_t mine) const {
    if (stopping) return true;
    if (!plan) return false;
    if (plan->generation != gen) return true;
    return mine < plan->num_batches && mine < next_to_take + capacity();
  }

  void worker_main(int64_t id) {
    WorkerInfo info;
    info.id = id;
    info.num_workers = workers();
    info.dataset = dataset.get();
    current_worker = &info;
    uint64_t gen = 0;  // generations start at 1
    int64_t mine = 0;  // next batch index of this worker in plan `gen`
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      work_cv.wait(lock, [&] { return has_work(gen, mine); });
      if (stopping) break;
      if (plan->generation != gen) {  // a new epoch: restart and re-seed
        gen = plan->generation;
        mine = id;
        info.epoch = plan->epoch;
        info.seed = worker_seed(options.seed(), plan->epoch, id);
        info.generator.manual_seed(info.seed);
        continue;
      }
      std::shared_ptr<const EpochPlan> p = plan;
      const int64_t b = mine;
      mine += workers();
      lock.unlock();
      Slot slot = load_batch(*dataset, collate, *p, b, id);
      lock.lock();
      if (plan == p) {
        ready.emplace(b, std::move(slot));
        ready_cv.notify_all();
      }
    }
    current_worker = nullptr;
  }
};

/// The consumer's position in one epoch; shared by copies of an Iterator.
struct EpochRun {
  std::shared_ptr<LoaderState> state;
  std::shared_ptr<const EpochPlan> plan;
  int64_t next = 0;  // next batch to load
  Batch current;
  bool retired = false;

  EpochRun(std::shared_ptr<LoaderState> s, std::shared_ptr<const EpochPlan> p)
      : state(std::move(s)), plan(std::move(p)) {}
  ~EpochRun() { retire(); }

  void retire() noexcept {
    if (retired) return;
    retired = true;
    state->retire(plan->generation);
  }

  /// Loads the next batch into `current`; false (and retires) at the end.
  bool advance() {
    if (next >= plan->num_batches) {
      retire();
      return false;
    }
    Slot slot = state->take(*plan, next++);
    if (!slot.ok) throw Error(slot.error);
    current = std::move(slot.batch);
    return true;
  }
};

}  // namespace detail

// ---- DataLoader::Iterator -----------------------------------------------------

Batch &DataLoader::Iterator::operator*() const {
  KILN_CHECK(run_ != nullptr, "DataLoader::Iterator: dereferencing the end iterator");
  return run_->current;
}

DataLoader::Iterator &DataLoader::Iterator::operator++() {
  KILN_CHECK(run_ != nullptr, "DataLoader::Iterator: advancing the end iterator");
  if (!run_->advance()) run_.reset();
  return *this;
}

// ---- DataLoader -----------------------------------------------------------------

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options) {
  KILN_CHECK(dataset != nullptr, "DataLoader: the dataset is null");
  KILN_CHECK(options.batch_size() > 0, "DataLoader: batch_size must be positive, got ", options.batch_size());
  KILN_CHECK(options.num_workers() >= 0, "DataLoader: num_workers must be >= 0, got ", options.num_workers());
  KILN_CHECK(options.prefetch_factor() >= 1, "DataLoader: prefetch_factor must be >= 1, got ",
             options.prefetch_factor());
  KILN_CHECK(!options.persistent_workers() || options.num_workers() > 0,
             "DataLoader: persistent_workers needs num_workers > 0, got num_workers ", options.num_workers());
  if (auto *tensors = dynamic_cast<TensorDataset *>(dataset.get())) tensors->check("DataLoader");
  const int64_t n = dataset->size();
  KILN_CHECK(n > 0, "DataLoader: the dataset is empty (size ", n, ")");
  state_ = std::make_shared<detail::LoaderState>();
  state_->collate = options.collate_fn() ? options.collate_fn() : CollateFn(default_collate);
  state_->dataset = std::move(dataset);
  state_->options = std::move(options);
}

DataLoader::DataLoader(TensorDataset dataset, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last)
    : DataLoader(std::make_shared<TensorDataset>(std::move(dataset)),
                 DataLoaderOptions(batch_size).shuffle(shuffle).seed(seed).drop_last(drop_last)) {}

DataLoader::~DataLoader() {
  if (state_) state_->close();
}

DataLoader &DataLoader::operator=(DataLoader &&other) noexcept {
  if (this != &other) {
    if (state_) state_->close();
    state_ = std::move(other.state_);
  }
  return *this;
}

static detail::LoaderState &checked(const std::shared_ptr<detail::LoaderState> &state) {
  KILN_CHECK(state != nullptr, "DataLoader: used after being moved from");
  return *state;
}

DataLoader::Iterator DataLoader::begin() {
  detail::LoaderState &state = checked(state_);
  auto plan = state.make_plan();
  state.publish(plan);
  auto run = std::make_shared<detail::EpochRun>(state_, std::move(plan));
  if (!run->advance()) return end();
  return Iterator(std::move(run));
}

std::vector<std::pair<Tensor, Tensor>> DataLoader::epoch() {
  std::vector<std::pair<Tensor, Tensor>> batches;
  batches.reserve(static_cast<size_t>(num_batches()));
  for (Batch &b : *this) batches.emplace_back(std::move(b.data), std::move(b.target));
  return batches;
}

int64_t DataLoader::num_batches() const {
  const detail::LoaderState &state = checked(state_);
  return state.num_batches(state.dataset->size());
}

uint64_t DataLoader::epochs_started() const { return checked(state_).next_epoch; }

void DataLoader::set_epoch(uint64_t e) { checked(state_).next_epoch = e; }

const DataLoaderOptions &DataLoader::options() const { return checked(state_).options; }

const std::shared_ptr<Dataset> &DataLoader::dataset() const { return checked(state_).dataset; }

}  // namespace kiln::data
