// JSON parsing with a nesting limit for the serialize readers. nlohmann's
// parser is iterative, but dump() and the readers built on it recurse once per
// level, so a file holding 100k '[' would overflow the stack (found by the
// safetensors fuzzer's deep-nesting seeds). Files Kiln writes nest 6 levels
// plus whatever user_metadata holds.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace kiln::serialize {

/// The deepest nesting the readers accept (and save_checkpoint writes).
constexpr int kMaxJsonDepth = 64;

/// json::parse(text), throwing std::runtime_error (the callers wrap it in a
/// kiln::Error naming the file) when arrays/objects nest deeper than max_depth.
template <class Json = nlohmann::json> Json parse_json_limited(const std::string &text, int max_depth = kMaxJsonDepth) {
  auto limit = [max_depth](int depth, nlohmann::json::parse_event_t event, Json &) {
    if (depth >= max_depth && (event == nlohmann::json::parse_event_t::object_start ||
                               event == nlohmann::json::parse_event_t::array_start))
      throw std::runtime_error("JSON nested deeper than " + std::to_string(max_depth) + " levels");
    return true;
  };
  return Json::parse(text, limit);
}

} // namespace kiln::serialize
