// Work, the op names (kiln/runtime/distributed/ProcessGroup.h) and the
// argument checks every backend makes (CollectiveArgs.h).
#include "CollectiveArgs.h"

namespace kiln::runtime::distributed {

using Kind = DistributedError::Kind;

size_t dense_numel(const TensorView &v, const char *op) {
  int64_t expected = 1;
  for (size_t d = v.sizes.size(); d-- > 0;) {
    if (v.sizes[d] != 1 && v.strides[d] != expected)
      throw DistributedError(Kind::Invalid, std::string(op) + ": the tensor must be contiguous (dim " +
                                                std::to_string(d) + " has stride " + std::to_string(v.strides[d]) +
                                                ", expected " + std::to_string(expected) + "); call .contiguous()");
    expected *= v.sizes[d];
  }
  if (!v.buffer) throw DistributedError(Kind::Invalid, std::string(op) + ": the tensor has no storage");
  return static_cast<size_t>(v.numel());
}

void check_parts(const char *op, const std::vector<TensorView> &parts, const TensorView &one, size_t n, int size) {
  if (parts.size() != static_cast<size_t>(size))
    throw DistributedError(Kind::Invalid, std::string(op) + ": expected " + std::to_string(size) +
                                              " tensors (one per rank), got " + std::to_string(parts.size()));
  for (size_t r = 0; r < parts.size(); ++r) {
    if (dense_numel(parts[r], op) != n || parts[r].dtype != one.dtype)
      throw DistributedError(Kind::Invalid, std::string(op) + ": tensor " + std::to_string(r) + " has " +
                                                std::to_string(parts[r].numel()) + " " + dtype_name(parts[r].dtype) +
                                                " elements, expected " + std::to_string(n) + " " +
                                                dtype_name(one.dtype));
  }
}

void check_root(const char *op, int root, int size) {
  if (root < 0 || root >= size)
    throw DistributedError(Kind::Invalid, std::string(op) + ": root " + std::to_string(root) +
                                              " is not a rank of a group of " + std::to_string(size));
}

const char *reduce_op_name(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return "sum";
  case ReduceOp::Avg: return "avg";
  case ReduceOp::Max: return "max";
  case ReduceOp::Min: return "min";
  }
  return "?";
}

bool Work::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) timeout = default_timeout_;
  std::unique_lock<std::mutex> lock(mu_);
  // Past the collective's own timeout the transport fails it; the margin lets
  // that error (which names the cause) arrive first.
  if (!cv_.wait_for(lock, timeout + std::chrono::seconds(2), [&] { return done_; }))
    throw DistributedError(DistributedError::Kind::Timeout,
                           description_ + ": not finished after " + std::to_string(timeout.count()) +
                               " ms; a peer rank may be stuck before this collective or have made a different one");
  if (error_) std::rethrow_exception(error_);
}

Work::Clock::time_point Work::start_time() {
  std::lock_guard<std::mutex> lock(mu_);
  return start_;
}

Work::Clock::time_point Work::end_time() {
  std::lock_guard<std::mutex> lock(mu_);
  return end_;
}

void Work::mark_started() {
  std::lock_guard<std::mutex> lock(mu_);
  start_ = Clock::now();
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    end_ = Clock::now();
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

} // namespace kiln::runtime::distributed
