// artifact/JsonDom.h - checked accessors over simdjson's DOM, for the
// launch-list decoder (the artifact's largest JSON section, read on every
// load). Same rules as Json.h: outside bytes, every read says what was
// missing or of the wrong type, nothing throws (simdjson's error codes, never
// its exceptions). simdjson builds its tape 20x faster than nlohmann::json
// builds a DOM here (0.045 vs 1.08 ms for the GPT's 28 kB program).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

namespace kiln::runtime::artifact::dom {

using Element = simdjson::dom::element;
using Array = simdjson::dom::array;
using Object = simdjson::dom::object;

/// Field `key` of object `j` (the first, if repeated).
inline bool member(Element j, const char *key, Element *out, std::string *error) {
  Object o;
  if (j.get(o) == simdjson::SUCCESS && o.at_key(key).get(*out) == simdjson::SUCCESS) return true;
  *error = std::string("missing field '") + key + "'";
  return false;
}
inline bool has_member(Element j, const char *key) {
  Object o;
  Element e;
  return j.get(o) == simdjson::SUCCESS && o.at_key(key).get(e) == simdjson::SUCCESS;
}
inline bool get_array(Element j, const char *key, Array *out, std::string *error) {
  Element m;
  if (!member(j, key, &m, error)) return false;
  if (m.get(*out) == simdjson::SUCCESS) return true;
  *error = std::string("field '") + key + "' must be an array";
  return false;
}
/// An integer that fits int64 (not a double, not a uint64 above INT64_MAX).
inline bool as_int(Element v, int64_t *out) { return v.get(*out) == simdjson::SUCCESS; }
inline bool get_string(Element j, const char *key, std::string *out, std::string *error) {
  Element m;
  if (!member(j, key, &m, error)) return false;
  std::string_view s;
  if (m.get(s) != simdjson::SUCCESS) {
    *error = std::string("field '") + key + "' must be a string";
    return false;
  }
  out->assign(s.data(), s.size());
  return true;
}
inline bool get_int(Element j, const char *key, int64_t *out, std::string *error) {
  Element m;
  if (!member(j, key, &m, error)) return false;
  if (as_int(m, out)) return true;
  *error = std::string("field '") + key + "' must be an integer";
  return false;
}
inline bool get_bool(Element j, const char *key, bool *out, std::string *error) {
  Element m;
  if (!member(j, key, &m, error)) return false;
  if (m.get(*out) == simdjson::SUCCESS) return true;
  *error = std::string("field '") + key + "' must be true or false";
  return false;
}
/// The integers of array `a`, each in [lo, 2^62); `key` names it in errors.
inline bool ints_of(Array a, const char *key, std::vector<int64_t> *out, std::string *error, int64_t lo) {
  out->clear();
  for (Element v : a) {
    int64_t x = 0;
    if (!as_int(v, &x) || x < lo || x >= (int64_t(1) << 62)) {
      *error = std::string("field '") + key + "' must hold integers >= " + std::to_string(lo);
      return false;
    }
    out->push_back(x);
  }
  return true;
}
/// Field `key`: an array of integers in [lo, 2^62).
inline bool get_ints(Element j, const char *key, std::vector<int64_t> *out, std::string *error, int64_t lo = 0) {
  Array a;
  return get_array(j, key, &a, error) && ints_of(a, key, out, error, lo);
}

} // namespace kiln::runtime::artifact::dom
