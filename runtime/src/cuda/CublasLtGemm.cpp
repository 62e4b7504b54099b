// cuBLASLt GEMMs (CublasLtGemm.h). Enum values are cublasLt.h's and
// library_types.h's (CUDA 13.0), named beside each.
#include "CublasLtGemm.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "Check.h"
#include "Libraries.h"

namespace kiln::runtime::cuda {
namespace {

// library_types.h cudaDataType_t
constexpr cudaDataType_t kR32F = 0, kR64F = 1, kR16F = 2, kR16BF = 14;
// cublas_api.h cublasComputeType_t
constexpr cublasComputeType_t kCompute32F = 68, kCompute64F = 70;
// cublasLt.h attributes
constexpr cublasLtMatmulDescAttributes_t kDescTransA = 3, kDescTransB = 4, kDescEpilogue = 7, kDescBiasPointer = 8,
                                         kDescEpilogueAuxPointer = 11, kDescEpilogueAuxLd = 12;
constexpr cublasLtMatrixLayoutAttribute_t kLayoutBatchCount = 5, kLayoutStridedBatchOffset = 6;
constexpr cublasLtMatmulPreferenceAttributes_t kPrefMaxWorkspaceBytes = 1, kPrefMinAlignmentA = 5,
                                               kPrefMinAlignmentB = 6, kPrefMinAlignmentC = 7, kPrefMinAlignmentD = 8;
constexpr int32_t kOpN = 0, kOpT = 1; // cublasOperation_t
/// cuBLASLt's workspace: PyTorch gives it 32 MiB on sm_90
/// (CUBLASLT_WORKSPACE_SIZE's default for Hopper).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

std::string shape_text(const TensorView &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(v.sizes[i]);
  s += "] strides [";
  for (size_t i = 0; i < v.strides.size(); ++i) s += (i ? ", " : "") + std::to_string(v.strides[i]);
  return s + "]";
}

/// The operand whose op() is X^T, for X a row-major logical [R, C] matrix
/// with element strides (s0, s1): dense rows (s1 = 1) store X^T
/// column-major with ld s0; dense columns (s0 = 1) store X column-major
/// with ld s1, used transposed. Size-1 dims take whichever stride fits.
LtOperand transpose_operand(const char *name, const TensorView &v, int64_t batch_stride) {
  const size_t r = v.sizes.size();
  const int64_t R = v.sizes[r - 2], C = v.sizes[r - 1];
  int64_t s0 = v.strides[r - 2], s1 = v.strides[r - 1];
  if (C == 1) s1 = 1;
  if (R == 1) s0 = s1 == 1 ? std::max<int64_t>(C, 1) : 1;
  if (s1 == 1 && s0 >= std::max<int64_t>(C, 1)) return {C, R, s0, false, batch_stride};
  if (s0 == 1 && s1 >= std::max<int64_t>(R, 1)) return {R, C, s1, true, batch_stride};
  throw std::invalid_argument(std::string("cuBLASLt gemm: operand ") + name + " " + shape_text(v) +
                              " has neither dense rows nor dense columns; copy it contiguous first");
}

/// The largest power of two (at most 256) dividing `p`: the alignment the
/// heuristic may assume (it assumes 256 unless told).
uint32_t alignment_of(const void *p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

/// cuBLASLt's types for a dtype.
struct LtTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};
LtTypes lt_types(DType t) {
  switch (t) {
  case DType::Float32: return {kR32F, kCompute32F, kR32F};
  case DType::Float64: return {kR64F, kCompute64F, kR64F};
  case DType::Float16: return {kR16F, kCompute32F, kR32F};
  case DType::BFloat16: return {kR16BF, kCompute32F, kR32F};
  default:
    throw std::invalid_argument(std::string("cuBLASLt gemm: dtype ") + dtype_name(t) +
                                " (expected float32, float64, float16 or bfloat16)");
  }
}

/// The descriptors of one call, destroyed on every path.
struct LtDescriptors {
  const CublasLtSymbols &lt;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtDescriptors() {
    if (preference) lt.cublasLtMatmulPreferenceDestroy(preference);
    for (cublasLtMatrixLayout_t l : {a, b, d})
      if (l) lt.cublasLtMatrixLayoutDestroy(l);
    if (desc) lt.cublasLtMatmulDescDestroy(desc);
  }
};

void make_layout(const CublasLtSymbols &lt, cudaDataType_t type, const LtOperand &o, int64_t batch,
                 cublasLtMatrixLayout_t *out) {
  check_cublaslt(lt.cublasLtMatrixLayoutCreate(out, type, static_cast<uint64_t>(o.rows), static_cast<uint64_t>(o.cols),
                                               o.ld),
                 "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const auto count = static_cast<int32_t>(batch);
    check_cublaslt(lt.cublasLtMatrixLayoutSetAttribute(*out, kLayoutBatchCount, &count, sizeof(count)),
                   "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
    check_cublaslt(
        lt.cublasLtMatrixLayoutSetAttribute(*out, kLayoutStridedBatchOffset, &o.batch_stride, sizeof(o.batch_stride)),
        "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
  }
}

} // namespace

GemmPlan plan_gemm(const TensorView &a, const TensorView &b, const TensorView &c) {
  const size_t r = c.sizes.size();
  if ((r != 2 && r != 3) || a.sizes.size() != r || b.sizes.size() != r || a.strides.size() != r ||
      b.strides.size() != r)
    throw std::invalid_argument("cuBLASLt gemm: expected three 2-D or three 3-D views, got a " + shape_text(a) +
                                ", b " + shape_text(b) + ", c " + shape_text(c));
  GemmPlan p;
  const int64_t M = a.sizes[r - 2], K = a.sizes[r - 1], N = b.sizes[r - 1];
  if (b.sizes[r - 2] != K || c.sizes[r - 2] != M || c.sizes[r - 1] != N ||
      (r == 3 && (a.sizes[0] != c.sizes[0] || b.sizes[0] != c.sizes[0])))
    throw std::invalid_argument("cuBLASLt gemm: shapes do not chain: a " + shape_text(a) + ", b " + shape_text(b) +
                                ", c " + shape_text(c));
  p.batch = r == 3 ? c.sizes[0] : 1;
  p.m = N;
  p.n = M;
  p.k = K;
  p.a = transpose_operand("b", b, r == 3 ? b.strides[0] : 0);
  p.b = transpose_operand("a", a, r == 3 ? a.strides[0] : 0);
  p.d = LtOperand{N, M, std::max<int64_t>(N, 1), false, M * N};
  return p;
}

CublasLtGemm::CublasLtGemm(DeviceApi &device) : device_(device) {}

CublasLtGemm::~CublasLtGemm() {
  if (handle_) cublaslt().cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
  if (workspace_) device_.raw_free(workspace_);
}

void CublasLtGemm::ensure_handle() {
  if (handle_) return;
  device_.set_current();
  cublasLtHandle_t h = nullptr;
  check_cublaslt(cublaslt().cublasLtCreate(&h), "cublasLtCreate");
  handle_ = h;
  workspace_ = device_.raw_allocate(kWorkspaceBytes); // null: run without one (the heuristic then picks accordingly)
}

void CublasLtGemm::run(const TensorView &a, const TensorView &b, const TensorView &c, StreamHandle stream) {
  run_with_epilogue(a, b, c, /*CUBLASLT_EPILOGUE_DEFAULT*/ 1, nullptr, stream);
}

void CublasLtGemm::run_with_epilogue(const TensorView &a, const TensorView &b, const TensorView &c, int32_t epilogue,
                                     const void *bias, StreamHandle stream, const void *aux) {
  if (bias && c.sizes.size() != 2)
    throw std::invalid_argument("cuBLASLt gemm: a bias epilogue needs 2-D views, got c " + shape_text(c));
  // The GELU input matrix has D's layout (N rows, ld N); cuBLASLt wants ld % 8 == 0.
  if (aux && c.sizes[1] % 8 != 0)
    throw std::invalid_argument(
        "cuBLASLt gemm: a GELU aux epilogue needs N % 8 == 0 (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), "
        "got c " +
        shape_text(c));
  if (a.dtype != b.dtype || a.dtype != c.dtype)
    throw std::invalid_argument(std::string("cuBLASLt gemm: dtypes ") + dtype_name(a.dtype) + ", " +
                                dtype_name(b.dtype) + ", " + dtype_name(c.dtype) + " (expected one dtype)");
  const LtTypes types = lt_types(c.dtype);
  const GemmPlan p = plan_gemm(a, b, c);
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  if (p.k == 0 && (bias || aux))
    throw std::invalid_argument("cuBLASLt gemm: a bias epilogue over an empty sum (K = 0) is not supported");
  if (p.k == 0) { // an empty sum: zeros
    device_.memset_async(c.data(), 0, static_cast<size_t>(c.numel()) * itemsize(c.dtype), stream);
    return;
  }
  ensure_handle();
  device_.set_current();
  const CublasLtSymbols &lt = cublaslt();
  LtDescriptors d{lt};
  check_cublaslt(lt.cublasLtMatmulDescCreate(&d.desc, types.compute, types.scale), "cublasLtMatmulDescCreate");
  const int32_t trans_a = p.a.transposed ? kOpT : kOpN, trans_b = p.b.transposed ? kOpT : kOpN;
  check_cublaslt(lt.cublasLtMatmulDescSetAttribute(d.desc, kDescTransA, &trans_a, sizeof(trans_a)),
                 "cublasLtMatmulDescSetAttribute(TRANSA)");
  check_cublaslt(lt.cublasLtMatmulDescSetAttribute(d.desc, kDescTransB, &trans_b, sizeof(trans_b)),
                 "cublasLtMatmulDescSetAttribute(TRANSB)");
  if (bias || aux) {
    const uint32_t mode = static_cast<uint32_t>(epilogue);
    check_cublaslt(lt.cublasLtMatmulDescSetAttribute(d.desc, kDescEpilogue, &mode, sizeof(mode)),
                   "cublasLtMatmulDescSetAttribute(EPILOGUE)");
  }
  if (bias) {
    check_cublaslt(lt.cublasLtMatmulDescSetAttribute(d.desc, kDescBiasPointer, &bias, sizeof(bias)),
                   "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  if (aux) {
    const int64_t aux_ld = c.sizes[1];
    check_cublaslt(lt.cublasLtMatmulDescSetAttribute(d.desc, kDescEpilogueAuxPointer, &aux, sizeof(aux)),
                   "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
    check_cublaslt(lt.cublasLtMatmulDescSetAttribute(d.desc, kDescEpilogueAuxLd, &aux_ld, sizeof(aux_ld)),
                   "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)");
  }
  make_layout(lt, types.data, p.a, p.batch, &d.a);
  make_layout(lt, types.data, p.b, p.batch, &d.b);
  make_layout(lt, types.data, p.d, p.batch, &d.d);

  check_cublaslt(lt.cublasLtMatmulPreferenceCreate(&d.preference), "cublasLtMatmulPreferenceCreate");
  const uint64_t workspace_bytes = workspace_ ? kWorkspaceBytes : 0;
  check_cublaslt(lt.cublasLtMatmulPreferenceSetAttribute(d.preference, kPrefMaxWorkspaceBytes, &workspace_bytes,
                                                         sizeof(workspace_bytes)),
                 "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  const void *pointers[] = {b.data(), a.data(), c.data(), c.data()}; // A, B, C, D of the column-major product
  const cublasLtMatmulPreferenceAttributes_t alignment_attributes[] = {kPrefMinAlignmentA, kPrefMinAlignmentB,
                                                                       kPrefMinAlignmentC, kPrefMinAlignmentD};
  for (int i = 0; i < 4; ++i) {
    const uint32_t alignment = alignment_of(pointers[i]);
    check_cublaslt(lt.cublasLtMatmulPreferenceSetAttribute(d.preference, alignment_attributes[i], &alignment,
                                                           sizeof(alignment)),
                   "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
  }
  cublasLtMatmulHeuristicResult_t heuristic{};
  int returned = 0;
  check_cublaslt(lt.cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), d.desc, d.a, d.b, d.d, d.d,
                                                   d.preference, 1, &heuristic, &returned),
                 "cublasLtMatmulAlgoGetHeuristic");
  if (returned == 0)
    throw std::invalid_argument(std::string("cuBLASLt gemm: no algorithm for ") + dtype_name(c.dtype) + " a " +
                                shape_text(a) + " x b " + shape_text(b));
  const float one_f = 1, zero_f = 0;
  const double one_d = 1, zero_d = 0;
  const bool f64 = types.scale == kR64F;
  check_cublaslt(lt.cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), d.desc,
                                   f64 ? static_cast<const void *>(&one_d) : &one_f, b.data(), d.a, a.data(), d.b,
                                   f64 ? static_cast<const void *>(&zero_d) : &zero_f, c.data(), d.d, c.data(), d.d,
                                   &heuristic.algo, workspace_, workspace_bytes, reinterpret_cast<CUstream>(stream)),
                 "cublasLtMatmul");
}

} // namespace kiln::runtime::cuda
