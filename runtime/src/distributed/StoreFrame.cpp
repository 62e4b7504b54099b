// The store framing (StoreFrame.h).
#include "StoreFrame.h"

#include <cstring>

#include "kiln/runtime/distributed/Store.h"

namespace kiln::runtime::distributed::frame {

size_t Shape::max_field_bytes(uint32_t i) const {
  return i < 32 && (value_fields >> i & 1u) ? kMaxValueBytes : kMaxKeyBytes;
}

uint64_t Shape::max_body_bytes(uint32_t fields) const {
  uint64_t total = 0;
  for (uint32_t i = 0; i < fields; ++i)
    total += 4 + max_field_bytes(i);
  return total;
}

template <typename T> static void put(std::vector<uint8_t> &out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}
template <typename T> static T take(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::vector<uint8_t> encode(uint8_t op, const Fields &fields) {
  size_t body = 0;
  for (const auto &f : fields)
    body += 4 + f.size();
  std::vector<uint8_t> out(kHeaderBytes + body);
  put(out, 0, kMagic);
  put(out, 4, kVersion);
  out[6] = op;
  out[7] = 0;
  put(out, 8, static_cast<uint32_t>(fields.size()));
  put(out, 12, static_cast<uint64_t>(body));
  size_t at = kHeaderBytes;
  for (const auto &f : fields) {
    put(out, at, static_cast<uint32_t>(f.size()));
    if (!f.empty())
      std::memcpy(out.data() + at + 4, f.data(), f.size());
    at += 4 + f.size();
  }
  return out;
}

bool parse_header(const uint8_t *p, ShapeOf shape_of, Header *header, std::string *why) {
  if (take<uint32_t>(p) != kMagic)
    return *why = "bad magic number", false;
  if (const auto v = take<uint16_t>(p + 4); v != kVersion)
    return *why = "protocol version " + std::to_string(v) + ", this build speaks " + std::to_string(kVersion), false;
  header->op = p[6];
  header->fields = take<uint32_t>(p + 8);
  header->body_bytes = take<uint64_t>(p + 12);
  const Shape shape = shape_of(header->op);
  if (!shape.known)
    return *why = "unknown operation " + std::to_string(header->op), false;
  if (header->fields < shape.min_fields || header->fields > shape.max_fields)
    return *why = "operation " + std::to_string(header->op) + " with " + std::to_string(header->fields) +
                  " fields (expects " + std::to_string(shape.min_fields) + " to " + std::to_string(shape.max_fields) +
                  ")",
           false;
  if (header->body_bytes > shape.max_body_bytes(header->fields))
    return *why = "a body of " + std::to_string(header->body_bytes) + " bytes, over the bound of " +
                  std::to_string(shape.max_body_bytes(header->fields)),
           false;
  return true;
}

bool parse_body(const Header &header, ShapeOf shape_of, const uint8_t *body, Fields *fields, std::string *why) {
  const Shape shape = shape_of(header.op);
  fields->clear();
  fields->reserve(header.fields);
  uint64_t at = 0;
  for (uint32_t i = 0; i < header.fields; ++i) {
    if (header.body_bytes - at < 4)
      return *why = "field " + std::to_string(i) + " past the body's end", false;
    const uint32_t len = take<uint32_t>(body + at);
    at += 4;
    if (len > shape.max_field_bytes(i))
      return *why = "field " + std::to_string(i) + " of " + std::to_string(len) + " bytes, over the bound of " +
                    std::to_string(shape.max_field_bytes(i)),
             false;
    if (header.body_bytes - at < len)
      return *why = "field " + std::to_string(i) + " past the body's end", false;
    fields->emplace_back(body + at, body + at + len);
    at += len;
  }
  if (at != header.body_bytes)
    return *why = "bytes after the last field", false;
  return true;
}

Decoded decode(const uint8_t *p, size_t n, ShapeOf shape_of, Header *header, Fields *fields, size_t *used,
               std::string *why) {
  if (n < kHeaderBytes)
    return Decoded::NeedMore;
  if (!parse_header(p, shape_of, header, why))
    return Decoded::Malformed;
  if (n - kHeaderBytes < header->body_bytes)
    return Decoded::NeedMore;
  if (!parse_body(*header, shape_of, p + kHeaderBytes, fields, why))
    return Decoded::Malformed;
  *used = kHeaderBytes + header->body_bytes;
  return Decoded::Complete;
}

void check_fields(const Shape &shape, const Fields &fields, const std::string &what) {
  if (fields.size() < shape.min_fields || fields.size() > shape.max_fields)
    throw DistributedError(DistributedError::Kind::Invalid, what + ": " + std::to_string(fields.size()) +
                                                                " keys, expects " + std::to_string(shape.min_fields) +
                                                                " to " + std::to_string(shape.max_fields));
  for (uint32_t i = 0; i < fields.size(); ++i)
    if (fields[i].size() > shape.max_field_bytes(i))
      throw DistributedError(DistributedError::Kind::Invalid,
                             what + ": a " + (shape.max_field_bytes(i) == kMaxKeyBytes ? "key" : "value") + " of " +
                                 std::to_string(fields[i].size()) + " bytes, over the bound of " +
                                 std::to_string(shape.max_field_bytes(i)));
}

void check_keys(const std::vector<std::string> &keys, const std::string &what) {
  if (keys.size() > kMaxKeysPerCall)
    throw DistributedError(DistributedError::Kind::Invalid, what + ": " + std::to_string(keys.size()) +
                                                                " keys, over the bound of " +
                                                                std::to_string(kMaxKeysPerCall));
  for (const auto &k : keys)
    if (k.size() > kMaxKeyBytes)
      throw DistributedError(DistributedError::Kind::Invalid, what + ": a key of " + std::to_string(k.size()) +
                                                                  " bytes, over the bound of " +
                                                                  std::to_string(kMaxKeyBytes));
}

void check_value(const std::vector<uint8_t> &value, const std::string &what) {
  if (value.size() > kMaxValueBytes)
    throw DistributedError(DistributedError::Kind::Invalid, what + ": a value of " + std::to_string(value.size()) +
                                                                " bytes, over the bound of " +
                                                                std::to_string(kMaxValueBytes));
}

} // namespace kiln::runtime::distributed::frame
