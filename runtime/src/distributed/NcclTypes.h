// Kiln's dtypes and reduce ops as NCCL's enums (nccl.h 2.x values, NCCL
// user guide "Types"; the mapping c10d's ProcessGroupNCCL makes in
// getNcclDataType / getNcclReduceOp), and the loading check of the NCCL
// backend. Internal to runtime/src/distributed (NcclProcessGroup.cpp and
// its test).
#pragma once

#include <string>

#include "../cuda/Libraries.h"
#include "kiln/runtime/distributed/ProcessGroup.h"

namespace kiln::runtime::distributed::nccl {

// nccl.h ncclDataType_t.
constexpr cuda::ncclDataType_t kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5, kFloat16 = 6,
                               kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9;
// nccl.h ncclRedOp_t.
constexpr cuda::ncclRedOp_t kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4;
// nccl.h ncclResult_t values the watchdog tells apart.
constexpr cuda::ncclResult_t kInProgress = 7;

/// float32 -> ncclFloat32, float64 -> ncclFloat64, float16 -> ncclFloat16,
/// bfloat16 -> ncclBfloat16, int64 -> ncclInt64, int32 -> ncclInt32,
/// bool -> ncclUint8 (one byte, 0 or 1). Never throws: every DType maps.
cuda::ncclDataType_t data_type(DType t);

/// Sum/Max/Min/Avg -> ncclSum/ncclMax/ncclMin/ncclAvg. For bool (c10d's
/// rule): Sum and Max -> ncclMax (logical or), Min -> ncclMin (and); Avg
/// throws DistributedError Invalid ("allreduce: avg of bool is not defined").
cuda::ncclRedOp_t reduce_op(ReduceOp op, DType t, const char *what);

/// Why NCCL cannot run with `library` as the loaded libnccl (the checks of
/// nccl_unavailable_reason(), in order), or "" when it can.
std::string unavailable_reason(const cuda::LoadedLibrary<cuda::NcclSymbols> &library);

} // namespace kiln::runtime::distributed::nccl
