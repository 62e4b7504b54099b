#include "kiln/runtime/Device.h"
#include "kiln/runtime/DType.h"

namespace kiln {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

const char *dtype_name(DType t) {
  switch (t) {
  case DType::Float32: return "float32";
  case DType::Float16: return "float16";
  case DType::BFloat16: return "bfloat16";
  case DType::Int64: return "int64";
  case DType::Bool: return "bool";
  case DType::Float64: return "float64";
  case DType::Int32: return "int32";
  }
  return "unknown";
}

}  // namespace kiln
