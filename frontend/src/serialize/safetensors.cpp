// kiln::save / kiln::load / kiln::verify: the safetensors format (see
// kiln/serialize.h for the byte layout) plus Kiln's checksum entry.
//
// Loading validates everything that can be validated from the header and the
// file size before allocating a tensor: the header length against the file,
// every entry's byte count against dtype x shape (with overflow checks), and
// the offsets against each other (sorted, no overlap, no gap, ending exactly
// at the end of the file), as the reference Rust implementation does.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "kiln/runtime/DeviceBackend.h"
#include "kiln/serialize.h"
#include "serialize/atomic_file.h"
#include "serialize/json_depth.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "kiln/serialize writes tensor memory as is; safetensors is little-endian");

namespace kiln {

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100000000; // the limit of the reference implementation
constexpr size_t kChunkBytes = 1 << 20;

// ---- dtypes ---------------------------------------------------------------------------

struct DTypeCode {
  DType dtype;
  const char *code;
};
constexpr DTypeCode kCodes[] = {{kFloat32, "F32"}, {kFloat64, "F64"}, {kFloat16, "F16"}, {kBFloat16, "BF16"},
                                {kInt64, "I64"},   {kInt32, "I32"},   {kBool, "BOOL"}};
/// Dtypes of the safetensors spec that Kiln has no tensor type for.
constexpr const char *kOtherSpecCodes[] = {"U8", "I8", "U16", "I16", "U32", "U64", "F8_E4M3", "F8_E5M2"};

const char *code_of(DType dtype) {
  for (const auto &c : kCodes)
    if (c.dtype == dtype)
      return c.code;
  throw Error(std::string("save: dtype ") + dtype_name(dtype) + " has no safetensors code");
}

uint32_t crc32_of(uint32_t crc, const void *data, size_t n) {
  if (n == 0)
    return crc;
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef *>(data), n));
}

uint32_t crc32_of(const std::string &s) {
  return crc32_of(static_cast<uint32_t>(crc32(0L, Z_NULL, 0)), s.data(), s.size());
}

/// CRC-32 of the header without the "kiln" entry, serialized compactly with
/// sorted keys (nlohmann::json's std::map order = Python's sort_keys for UTF-8).
uint32_t header_crc(json header) {
  header["__metadata__"].erase("kiln");
  return crc32_of(header.dump());
}

// ---- writing --------------------------------------------------------------------------

struct Planned {
  std::string name;
  Tensor data; ///< contiguous, detached
  uint64_t begin, end;
};

std::vector<Planned> plan_layout(const std::string &path, const NamedTensors &tensors) {
  std::vector<Planned> out;
  uint64_t offset = 0;
  for (const auto &[name, t] : tensors) {
    KILN_CHECK(t.defined(), "save: '", path, "': tensor '", name, "' is undefined; pass defined tensors only");
    KILN_CHECK(name != "__metadata__", "save: '", path,
               "': '__metadata__' is reserved by safetensors; rename the tensor");
    for (const Planned &p : out)
      KILN_CHECK(p.name != name, "save: '", path, "': two tensors are named '", name, "'; names must be unique");
    Tensor data = t.detach().cpu().contiguous();  // a device tensor is copied to the host first (as torch.save)
    const uint64_t nbytes = static_cast<uint64_t>(data.numel()) * itemsize(data.dtype());
    out.push_back({name, data, offset, offset + nbytes});
    offset += nbytes;
  }
  return out;
}

/// The header JSON text (padded to a multiple of 8 bytes) for `plan`.
std::string build_header(const std::string &path, const std::vector<Planned> &plan,
                         const std::map<std::string, std::string> &metadata, uint32_t data_crc) {
  json canonical = json::object(); // what header_crc sees on load
  canonical["__metadata__"] = json::object();
  for (const auto &[k, v] : metadata)
    canonical["__metadata__"][k] = v;
  ordered_json header = ordered_json::object();
  header["__metadata__"] = ordered_json::object();
  for (const Planned &p : plan) {
    const char *code = code_of(p.data.dtype());
    canonical[p.name] = {{"dtype", code}, {"shape", p.data.sizes()}, {"data_offsets", {p.begin, p.end}}};
    header[p.name] = ordered_json::object();
    header[p.name]["dtype"] = code;
    header[p.name]["shape"] = p.data.sizes();
    header[p.name]["data_offsets"] = {p.begin, p.end};
  }
  std::string text;
  try {
    json kiln = {{"format_version", kSerializeFormatVersion},
                 {"data_crc32", data_crc},
                 {"header_crc32", crc32_of(canonical.dump())}};
    header["__metadata__"]["kiln"] = kiln.dump();
    for (const auto &[k, v] : metadata)
      header["__metadata__"][k] = v;
    text = header.dump();
  } catch (const json::exception &e) {
    throw Error("save: '" + path + "': tensor names and metadata must be valid UTF-8 (" + e.what() + ")");
  }
  while (text.size() % 8 != 0)
    text.push_back(' ');
  return text;
}

void write_file(const std::string &path, const NamedTensors &tensors,
                const std::map<std::string, std::string> &metadata) {
  KILN_CHECK(!metadata.count("kiln"), "save: '", path, "': metadata key 'kiln' is reserved for Kiln's checksums");
  std::vector<Planned> plan = plan_layout(path, tensors);
  uint32_t crc = static_cast<uint32_t>(crc32(0L, Z_NULL, 0));
  for (const Planned &p : plan)
    crc = crc32_of(crc, p.data.raw_data(), p.end - p.begin);
  const std::string header = build_header(path, plan, metadata, crc);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  serialize::AtomicFileWriter out(path);
  out.write(length, 8);
  out.write(header.data(), header.size());
  for (const Planned &p : plan)
    if (p.end > p.begin)
      out.write(p.data.raw_data(), p.end - p.begin);
  out.commit();
}

// ---- reading --------------------------------------------------------------------------

const char *const kDamaged = "The file is damaged or not a safetensors file; restore it from a backup or use an "
                             "older checkpoint";

[[noreturn]] void bad_file(const std::string &path, const std::string &what, const char *hint = kDamaged) {
  throw Error("load: '" + path + "' " + what + ". " + hint);
}

class Reader {
public:
  explicit Reader(const std::string &path) : path_(path), file_(std::fopen(path.c_str(), "rb"), &std::fclose) {
    if (!file_)
      bad_file(path, std::string("cannot be opened: ") + std::strerror(errno), "Check the path and permissions");
    struct stat st;
    if (::fstat(fileno(file_.get()), &st) != 0 || !S_ISREG(st.st_mode))
      bad_file(path, "is not a regular file", "Pass the path of a .safetensors file");
    size_ = static_cast<uint64_t>(st.st_size);
  }
  uint64_t size() const { return size_; }
  /// Reads exactly n bytes at `offset`; a short read means the file shrank.
  void read_at(uint64_t offset, void *dst, size_t n) {
    if (n == 0)
      return;
    if (fseeko(file_.get(), static_cast<off_t>(offset), SEEK_SET) != 0 || std::fread(dst, 1, n, file_.get()) != n)
      bad_file(path_, "is truncated: reading " + std::to_string(n) + " bytes at byte " + std::to_string(offset) +
                          " hit the end of the file");
  }

private:
  std::string path_;
  std::unique_ptr<FILE, int (*)(FILE *)> file_;
  uint64_t size_ = 0;
};

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

struct Header {
  std::vector<Entry> entries; ///< sorted by data offset
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;
  bool has_kiln = false;
  uint32_t data_crc = 0;
};

DType parse_dtype(const std::string &path, const std::string &name, const std::string &code) {
  for (const auto &c : kCodes)
    if (code == c.code)
      return c.dtype;
  for (const char *other : kOtherSpecCodes)
    if (code == other)
      bad_file(path, "has tensor '" + name + "' of dtype " + code + ", which Kiln does not support",
               "Kiln reads F32, F64, F16, BF16, I64, I32 and BOOL; convert the tensor before saving");
  bad_file(path, "has tensor '" + name + "' with unknown dtype '" + code + "'", kDamaged);
}

uint64_t get_unsigned(const std::string &path, const std::string &name, const json &j, const char *field) {
  if (!j.is_number_unsigned())
    bad_file(path,
             "has tensor '" + name + "' whose " + field + " holds " + j.dump() + " (expected a non-negative integer)");
  return j.get<uint64_t>();
}

Entry parse_entry(const std::string &path, const std::string &name, const json &j) {
  if (!j.is_object() || !j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets") ||
      !j["dtype"].is_string() || !j["shape"].is_array() || !j["data_offsets"].is_array() ||
      j["data_offsets"].size() != 2)
    bad_file(path, "has a malformed entry for tensor '" + name + "': " + j.dump() +
                       " (expected {\"dtype\": ..., \"shape\": [...], \"data_offsets\": [begin, end]})");
  Entry e{name, parse_dtype(path, name, j["dtype"].get<std::string>()), {}, 0, 0};
  uint64_t nbytes = itemsize(e.dtype);
  bool overflow = false;
  for (const json &d : j["shape"]) {
    uint64_t size = get_unsigned(path, name, d, "shape");
    overflow |= size > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(nbytes, size, &nbytes);
    e.shape.push_back(static_cast<int64_t>(size));
  }
  e.begin = get_unsigned(path, name, j["data_offsets"][0], "data_offsets");
  e.end = get_unsigned(path, name, j["data_offsets"][1], "data_offsets");
  if (overflow || e.end < e.begin || e.end - e.begin != nbytes)
    bad_file(path, "has tensor '" + name + "' whose data_offsets [" + std::to_string(e.begin) + ", " +
                       std::to_string(e.end) + "] do not match its dtype " + j["dtype"].get<std::string>() +
                       " and shape " + j["shape"].dump() +
                       (overflow ? " (the shape's byte size overflows)" : " (" + std::to_string(nbytes) + " bytes)"));
  return e;
}

/// Sorts entries by offset; they must tile [0, data_size) exactly.
void check_offsets(const std::string &path, std::vector<Entry> &entries, uint64_t data_size) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry &a, const Entry &b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const Entry *prev = nullptr;
  for (const Entry &e : entries) {
    if (e.end > data_size)
      bad_file(path, "is truncated: tensor '" + e.name + "' ends at byte " + std::to_string(e.end) +
                         " of the data section, which holds only " + std::to_string(data_size) + " bytes");
    if (e.begin < expected)
      bad_file(path, "has overlapping tensors '" + prev->name + "' and '" + e.name + "' (data_offsets begin " +
                         std::to_string(e.begin) + " < " + std::to_string(expected) + ")");
    if (e.begin > expected)
      bad_file(path, "has a gap of " + std::to_string(e.begin - expected) + " bytes before tensor '" + e.name +
                         "' in the data section");
    expected = e.end;
    prev = &e;
  }
  if (expected != data_size)
    bad_file(path, "has " + std::to_string(data_size - expected) +
                       " bytes after the last tensor (the header does not describe the whole data section)");
}

void parse_metadata(const std::string &path, const json &j, Header &h) {
  if (!j.is_object())
    bad_file(path, "has a __metadata__ that is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_string())
      bad_file(path, "has __metadata__ entry '" + it.key() + "' that is not a string: " + it.value().dump());
    h.metadata[it.key()] = it.value().get<std::string>();
  }
}

/// Checks the "kiln" entry's version and header checksum; keeps the data checksum.
void check_kiln_entry(const std::string &path, const json &header, Header &h) {
  json kiln;
  try {
    kiln = serialize::parse_json_limited(h.metadata.at("kiln"));
  } catch (const std::exception &e) {
    bad_file(path, std::string("has an invalid 'kiln' metadata entry: ") + e.what());
  }
  if (!kiln.is_object() || !kiln.contains("format_version") || !kiln["format_version"].is_number_integer() ||
      !kiln.contains("data_crc32") || !kiln["data_crc32"].is_number_unsigned() || !kiln.contains("header_crc32") ||
      !kiln["header_crc32"].is_number_unsigned())
    bad_file(path, "has a malformed 'kiln' metadata entry: " + kiln.dump());
  const int64_t version = kiln["format_version"].get<int64_t>();
  if (version > kSerializeFormatVersion || version < 1)
    bad_file(path,
             "has format_version " + std::to_string(version) + "; this build of Kiln reads versions 1 to " +
                 std::to_string(kSerializeFormatVersion),
             "Upgrade Kiln to read it");
  const uint64_t stored = kiln["header_crc32"].get<uint64_t>();
  const uint32_t computed = header_crc(header);
  if (stored != computed)
    bad_file(path, "fails its header checksum (stored CRC-32 " + std::to_string(stored) + ", computed " +
                       std::to_string(computed) + "): tensor names, shapes or metadata were changed or damaged");
  h.has_kiln = true;
  h.data_crc = static_cast<uint32_t>(kiln["data_crc32"].get<uint64_t>());
}

Header read_header(const std::string &path, Reader &in) {
  if (in.size() < 8)
    bad_file(path, "is too short to be a safetensors file (" + std::to_string(in.size()) +
                       " bytes; the 8-byte header length alone needs 8)");
  unsigned char len[8];
  in.read_at(0, len, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | len[i];
  if (n > kMaxHeaderBytes || n < 2)
    bad_file(path, "has a bad header length " + std::to_string(n) + " (safetensors allows 2 to " +
                       std::to_string(kMaxHeaderBytes) + " bytes)");
  if (n > in.size() - 8)
    bad_file(path,
             "is truncated: the header length says " + std::to_string(n) + " bytes of JSON but only " +
                 std::to_string(in.size() - 8) + " bytes follow",
             "The file was cut off (interrupted copy or write); re-copy it or use an older checkpoint");
  std::string text(n, '\0');
  in.read_at(8, text.data(), n);
  json header;
  try {
    if (text[0] != '{')
      throw std::runtime_error("the header does not start with '{'");
    header = serialize::parse_json_limited(text);
  } catch (const std::exception &e) {
    bad_file(path, std::string("has an invalid JSON header: ") + e.what());
  }
  if (!header.is_object())
    bad_file(path, "has a header that is not a JSON object");
  Header h;
  h.data_start = 8 + n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__")
      parse_metadata(path, it.value(), h);
    else
      h.entries.push_back(parse_entry(path, it.key(), it.value()));
  }
  if (h.metadata.count("kiln"))
    check_kiln_entry(path, header, h);
  check_offsets(path, h.entries, in.size() - h.data_start);
  return h;
}

void check_data_crc(const std::string &path, const Header &h, uint32_t computed) {
  if (h.has_kiln && computed != h.data_crc)
    bad_file(path, "fails its data checksum (stored CRC-32 " + std::to_string(h.data_crc) + ", computed " +
                       std::to_string(computed) + "): tensor bytes were changed or damaged");
}

void check_bool_bytes(const std::string &path, const Entry &e, const Tensor &t) {
  const unsigned char *p = static_cast<const unsigned char *>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i)
    if (p[i] > 1)
      bad_file(path, "has BOOL tensor '" + e.name + "' holding byte value " + std::to_string(p[i]) + " at element " +
                         std::to_string(i) + " (expected 0 or 1)");
}

} // namespace

// ---- public API -----------------------------------------------------------------------

void detail::save_with_kiln_metadata(const std::string &path, const NamedTensors &tensors,
                                     const std::map<std::string, std::string> &metadata) {
  write_file(path, tensors, metadata);
}

void save(const std::string &path, const NamedTensors &tensors, const std::map<std::string, std::string> &metadata) {
  for (const auto &kv : metadata)
    KILN_CHECK(kv.first != "kiln" && kv.first.rfind("kiln.", 0) != 0, "save: '", path, "': metadata key '", kv.first,
               "' is reserved for Kiln (keys 'kiln' and 'kiln.*'); choose another key");
  write_file(path, tensors, metadata);
}

LoadedTensors load(const std::string &path, Device map_location) {
  KILN_CHECK(runtime::find_backend(map_location.type) != nullptr, "load: '", path, "': map_location ",
             map_location.str(), " is not available (no backend is registered for it); pass kCPU");
  Reader in(path);
  Header h = read_header(path, in);
  LoadedTensors out;
  uint32_t crc = static_cast<uint32_t>(crc32(0L, Z_NULL, 0));
  for (const Entry &e : h.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    const size_t nbytes = e.end - e.begin;
    in.read_at(h.data_start + e.begin, t.raw_data(), nbytes);
    crc = crc32_of(crc, t.raw_data(), nbytes);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  check_data_crc(path, h, crc);
  for (size_t i = 0; i < h.entries.size(); ++i)
    if (h.entries[i].dtype == kBool)
      check_bool_bytes(path, h.entries[i], out.tensors[i].second);
  for (auto &named : out.tensors) named.second = named.second.to(map_location);  // read on the host, then placed
  for (auto &[k, v] : h.metadata) {
    if (k == "kiln.checkpoint")
      out.checkpoint_json = v;
    else if (k != "kiln" && k.rfind("kiln.", 0) != 0)
      out.metadata[k] = v;
  }
  out.verified = h.has_kiln;
  return out;
}

void verify(const std::string &path) {
  Reader in(path);
  Header h = read_header(path, in);
  const uint64_t total = in.size() - h.data_start;
  std::vector<char> chunk(static_cast<size_t>(std::min<uint64_t>(kChunkBytes, total)));
  uint32_t crc = static_cast<uint32_t>(crc32(0L, Z_NULL, 0));
  for (uint64_t done = 0; done < total;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), total - done));
    in.read_at(h.data_start + done, chunk.data(), n);
    crc = crc32_of(crc, chunk.data(), n);
    done += n;
  }
  check_data_crc(path, h, crc);
}

const Tensor &LoadedTensors::at(const std::string &name) const {
  for (const auto &kv : tensors)
    if (kv.first == name)
      return kv.second;
  std::string names;
  for (const auto &kv : tensors)
    names += (names.empty() ? "'" : ", '") + kv.first + "'";
  throw Error("LoadedTensors::at: no tensor named '" + name + "'; the file has " +
              (names.empty() ? std::string("no tensors") : names));
}

bool LoadedTensors::contains(const std::string &name) const {
  for (const auto &kv : tensors)
    if (kv.first == name)
      return true;
  return false;
}

} // namespace kiln
