// artifact/Json.h - checked accessors for the artifact's JSON sections
// (outside bytes: every read says what was missing or of the wrong type,
// nothing throws).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/runtime/DType.h"

namespace kiln::runtime::artifact {

using nlohmann::json;

/// Largest tensor an artifact may describe (bytes): 1 TiB, far above any
/// real model, so sizes * itemsize can never overflow int64.
inline constexpr int64_t kMaxTensorBytes = int64_t(1) << 40;

inline const json *member(const json &j, const char *key, std::string *error) {
  if (!j.is_object() || !j.contains(key)) {
    *error = std::string("missing field '") + key + "'";
    return nullptr;
  }
  return &j[key];
}
inline bool expect_array(const json &j, const char *key, std::string *error) {
  if (j.is_array()) return true;
  *error = std::string("field '") + key + "' must be an array";
  return false;
}
inline bool get_string(const json &j, const char *key, std::string *out, std::string *error) {
  const json *m = member(j, key, error);
  if (!m) return false;
  if (!m->is_string()) {
    *error = std::string("field '") + key + "' must be a string";
    return false;
  }
  *out = m->get<std::string>();
  return true;
}
inline bool get_int(const json &j, const char *key, int64_t *out, std::string *error) {
  const json *m = member(j, key, error);
  if (!m) return false;
  if (!m->is_number_integer()) {
    *error = std::string("field '") + key + "' must be an integer";
    return false;
  }
  *out = m->get<int64_t>();
  return true;
}
inline bool get_bool(const json &j, const char *key, bool *out, std::string *error) {
  const json *m = member(j, key, error);
  if (!m) return false;
  if (!m->is_boolean()) {
    *error = std::string("field '") + key + "' must be true or false";
    return false;
  }
  *out = m->get<bool>();
  return true;
}
/// An array of integers in [lo, 2^62).
inline bool get_ints(const json &j, const char *key, std::vector<int64_t> *out, std::string *error, int64_t lo = 0) {
  const json *m = member(j, key, error);
  if (!m || !expect_array(*m, key, error)) return false;
  out->clear();
  for (const json &v : *m) {
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() >= (int64_t(1) << 62)) {
      *error = std::string("field '") + key + "' must hold integers >= " + std::to_string(lo);
      return false;
    }
    out->push_back(v.get<int64_t>());
  }
  return true;
}
inline bool get_sizes(const json &j, const char *key, std::vector<int64_t> *out, std::string *error) {
  return get_ints(j, key, out, error, 0);
}
inline bool get_strings(const json &j, const char *key, std::vector<std::string> *out, std::string *error) {
  const json *m = member(j, key, error);
  if (!m || !expect_array(*m, key, error)) return false;
  out->clear();
  for (const json &v : *m) {
    if (!v.is_string()) {
      *error = std::string("field '") + key + "' must hold strings";
      return false;
    }
    out->push_back(v.get<std::string>());
  }
  return true;
}

inline constexpr DType kAllDTypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Int64,
                                       DType::Bool,    DType::Float64, DType::Int32};

/// dtype_name() back to the DType.
inline bool parse_dtype(const std::string &name, DType *out, std::string *error) {
  for (DType t : kAllDTypes)
    if (name == dtype_name(t)) {
      *out = t;
      return true;
    }
  *error = "unknown dtype '" + name + "'";
  return false;
}
/// safetensors' codes (F32, F16, BF16, I64, BOOL, F64, I32).
inline bool parse_safetensors_dtype(const std::string &code, DType *out, std::string *error) {
  static const char *const kCodes[] = {"F32", "F16", "BF16", "I64", "BOOL", "F64", "I32"};
  for (size_t i = 0; i < 7; ++i)
    if (code == kCodes[i]) {
      *out = kAllDTypes[i];
      return true;
    }
  *error = "unknown safetensors dtype '" + code + "'";
  return false;
}
/// numel(sizes) * itemsize(dtype), false when it exceeds kMaxTensorBytes.
inline bool checked_nbytes(const std::vector<int64_t> &sizes, DType dtype, int64_t *bytes) {
  int64_t n = static_cast<int64_t>(itemsize(dtype));
  for (int64_t s : sizes) {
    if (s < 0) return false;
    if (s == 0) n = 0;
    if (n != 0 && s > kMaxTensorBytes / n) return false;
    n *= s;
  }
  *bytes = n;
  return n <= kMaxTensorBytes;
}

} // namespace kiln::runtime::artifact
