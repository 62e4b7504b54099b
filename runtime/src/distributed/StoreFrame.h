// StoreFrame.h - the one framing of TCPStore's requests and replies and of
// FileStore's log records: a header with a magic number, a version and the
// body's length, then length-prefixed fields. Every length is checked
// against the op's bounds (kMaxKeyBytes, kMaxValueBytes, kMaxKeysPerCall)
// before it is trusted, so a frame claiming 2^60 bytes is rejected after its
// 20-byte header, with nothing allocated for it.
//
//   header: u32 magic "KLST" | u16 version | u8 op | u8 0 | u32 fields | u64 body bytes
//   body:   per field, u32 length and its bytes
//
// Integers are in host order (the ranks of a job run one binary on one kind
// of machine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::runtime::distributed::frame {

constexpr uint32_t kMagic = 0x4b4c5354; // "KLST"
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 4 + 2 + 1 + 1 + 4 + 8;

using Fields = std::vector<std::vector<uint8_t>>;

/// What an op's frame may carry: between min and max fields; field i is a
/// value (at most kMaxValueBytes) when bit i of `value_fields` is set, else
/// a key (at most kMaxKeyBytes). `known` false: an op the reader rejects.
struct Shape {
  bool known = false;
  uint32_t min_fields = 0, max_fields = 0;
  uint32_t value_fields = 0;
  size_t max_field_bytes(uint32_t i) const;
  uint64_t max_body_bytes(uint32_t fields) const;
};

/// The shapes of one protocol (TCPStore requests, TCPStore replies,
/// FileStore records).
using ShapeOf = Shape (*)(uint8_t op);

struct Header {
  uint8_t op = 0;
  uint32_t fields = 0;
  uint64_t body_bytes = 0;
};

std::vector<uint8_t> encode(uint8_t op, const Fields &fields);

/// Reads the kHeaderBytes at `p`; false (with `why`) for a bad magic or
/// version, an op unknown to `shape_of`, or counts and lengths over its bounds.
bool parse_header(const uint8_t *p, ShapeOf shape_of, Header *header, std::string *why);
/// Splits a body of header.body_bytes bytes into its fields; false (with
/// `why`) when a field is over its bound or the lengths do not add up.
bool parse_body(const Header &header, ShapeOf shape_of, const uint8_t *body, Fields *fields, std::string *why);

enum class Decoded { NeedMore, Complete, Malformed };
/// A whole frame at the front of `n` received bytes: Complete sets `*used`
/// to its length; NeedMore when it has not all arrived; Malformed (with `why`).
Decoded decode(const uint8_t *p, size_t n, ShapeOf shape_of, Header *header, Fields *fields, size_t *used,
               std::string *why);

/// Throws DistributedError Invalid, naming `what`, when `fields` do not fit
/// `shape` (a key or value over its bound, too many keys): a caller's
/// mistake reported before anything is sent or written.
void check_fields(const Shape &shape, const Fields &fields, const std::string &what);
/// The same for the keys of a get/wait/check/delete (at most
/// kMaxKeysPerCall, each at most kMaxKeyBytes).
void check_keys(const std::vector<std::string> &keys, const std::string &what);
/// The same for a value (at most kMaxValueBytes).
void check_value(const std::vector<uint8_t> &value, const std::string &what);

} // namespace kiln::runtime::distributed::frame
