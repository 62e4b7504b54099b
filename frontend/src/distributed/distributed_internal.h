// Shared by the distributed/ sources: the default group and tensor views
// for collectives.
#pragma once

#include <functional>
#include <memory>

#include "kiln/distributed.h"
#include "kiln/runtime/distributed/ProcessGroup.h"

namespace kiln::distributed {

/// The default group; throws kiln::Error naming `op` when none.
std::shared_ptr<runtime::distributed::ProcessGroup> default_group(const char *op);
runtime::distributed::ReduceOp to_runtime(ReduceOp op);
/// `t` as a view a collective takes; kiln::Error naming `op` when it is
/// undefined, not contiguous or not in host memory.
runtime::TensorView comm_view(const Tensor &t, const char *op);
/// Runs `f` on the default group, a runtime failure rethrown as kiln::Error
/// naming `op`; waits unless `async_op`.
Work run_collective(const char *op,
                    const std::function<std::shared_ptr<runtime::distributed::Work>(runtime::distributed::ProcessGroup &)> &f,
                    bool async_op);

} // namespace kiln::distributed
