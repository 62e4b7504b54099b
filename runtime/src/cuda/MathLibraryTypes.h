// The cuBLASLt, cuDNN and NCCL types Kiln's symbol tables need, declared here
// so the build needs no toolkit headers (IREE's dynamic_symbol_tables.h
// pattern). Layouts and values are those of cublasLt.h (13.0), cudnn.h (9)
// and nccl.h (2); enums are C enums, passed as int.
#pragma once

#include <cstddef>
#include <cstdint>

#include "CudaTypes.h"

namespace kiln::runtime::cuda {

/// cublas_api.h `cublasStatus_t`.
using cublasStatus_t = int;
constexpr cublasStatus_t CUBLAS_STATUS_SUCCESS = 0;
constexpr cublasStatus_t CUBLAS_STATUS_NOT_INITIALIZED = 1;

using cublasLtHandle_t = struct cublasLtContext *;
using cublasLtMatmulDesc_t = struct cublasLtMatmulDescOpaque_t *;
using cublasLtMatrixLayout_t = struct cublasLtMatrixLayoutOpaque_t *;
using cublasLtMatmulPreference_t = struct cublasLtMatmulPreferenceOpaque_t *;
using cublasComputeType_t = int;             // cublas_api.h
using cudaDataType_t = int;                  // library_types.h
using cublasLtMatmulDescAttributes_t = int;  // cublasLt.h
using cublasLtMatrixLayoutAttribute_t = int; // cublasLt.h
using cublasLtMatmulPreferenceAttributes_t = int;

/// cublasLt.h: a semi-opaque algorithm (64 bytes).
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};

/// cublasLt.h: one heuristic result (the algorithm, its workspace bytes).
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

/// cudnn_graph.h `cudnnStatus_t` and handles (cuDNN 9's backend API).
using cudnnStatus_t = int;
constexpr cudnnStatus_t CUDNN_STATUS_SUCCESS = 0;
using cudnnHandle_t = struct cudnnContext *;
using cudnnBackendDescriptor_t = void *;
using cudnnBackendDescriptorType_t = int;
using cudnnBackendAttributeName_t = int;
using cudnnBackendAttributeType_t = int;

/// nccl.h `ncclResult_t`, communicator, unique id (128 bytes), enums.
using ncclResult_t = int;
constexpr ncclResult_t ncclSuccess = 0;
using ncclComm_t = struct ncclComm *;
struct ncclUniqueId {
  char internal[128];
};
using ncclDataType_t = int;
using ncclRedOp_t = int;

} // namespace kiln::runtime::cuda
