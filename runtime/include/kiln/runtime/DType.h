// kiln/runtime/DType.h - element types shared by every layer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

/// Element types. Mirrors torch.dtype names. f16/bf16 are stored in 16 bits;
/// kernels of the walking skeleton compute in f32 and i64 only.
enum class DType : int8_t { Float32, Float16, BFloat16, Int64, Bool };

constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat16 = DType::Float16;
constexpr DType kBFloat16 = DType::BFloat16;
constexpr DType kInt64 = DType::Int64;
constexpr DType kBool = DType::Bool;

/// Bytes per element: 4, 2, 2, 8, 1.
constexpr size_t itemsize(DType t) {
  switch (t) {
  case DType::Float32: return 4;
  case DType::Float16: return 2;
  case DType::BFloat16: return 2;
  case DType::Int64: return 8;
  case DType::Bool: return 1;
  }
  return 0;
}

/// "float32", "float16", "bfloat16", "int64", "bool" (PyTorch's spelling).
const char *dtype_name(DType t);

constexpr bool is_floating_point(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16;
}

}  // namespace kiln
