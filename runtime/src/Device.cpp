#include "kiln/runtime/Device.h"
#include "kiln/runtime/DType.h"

namespace kiln {

const char *device_type_name(DeviceType type) {
  switch (type) {
  case DeviceType::CPU: return "cpu";
  case DeviceType::CUDA: return "cuda";
  case DeviceType::PrivateUse1: return "privateuse1";
  }
  return "unknown";
}

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return std::string(device_type_name(type)) + ":" + std::to_string(index);
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
