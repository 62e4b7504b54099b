// kiln/runtime/DType.h - element types shared by every layer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

/// Element types. Mirrors torch.dtype names. f16/bf16 are stored in 16 bits
/// and computed in f32 inside kernels; f32, f64, i32, i64 have native kernels.
enum class DType : int8_t { Float32, Float16, BFloat16, Int64, Bool, Float64, Int32 };

constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat16 = DType::Float16;
constexpr DType kBFloat16 = DType::BFloat16;
constexpr DType kInt64 = DType::Int64;
constexpr DType kBool = DType::Bool;
constexpr DType kFloat64 = DType::Float64;
constexpr DType kInt32 = DType::Int32;

/// Bytes per element: 4, 2, 2, 8, 1, 8, 4.
constexpr size_t itemsize(DType t) {
  switch (t) {
  case DType::Float32: return 4;
  case DType::Float16: return 2;
  case DType::BFloat16: return 2;
  case DType::Int64: return 8;
  case DType::Bool: return 1;
  case DType::Float64: return 8;
  case DType::Int32: return 4;
  }
  return 0;
}

/// "float32", "float16", "bfloat16", "int64", "bool", "float64", "int32".
const char *dtype_name(DType t);

constexpr bool is_floating_point(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64;
}

}  // namespace kiln
