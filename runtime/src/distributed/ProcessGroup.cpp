// Work and the op names (kiln/runtime/distributed/ProcessGroup.h).
#include "kiln/runtime/distributed/ProcessGroup.h"

namespace kiln::runtime::distributed {

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
