// ArtifactFile.cpp - the artifact container (FORMAT.md): writing, and the
// verified read of outside bytes (never throws, never reads out of bounds).
#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>
#include <libdeflate.h>

#include "artifact/Json.h"
#include "kiln/runtime/Artifact.h"
#include "kiln/runtime/cuda/Nvrtc.h" // parse_arch_name

namespace kiln::runtime::artifact {
namespace {

using nlohmann::json;

constexpr size_t kHeaderBytes = 32;  // magic, version, section count, file size, reserved
constexpr size_t kSectionEntryBytes = 24;  // tag[8], offset, size
constexpr size_t kTrailerBytes = 8;  // CRC-32 of the bytes before it, u32; magic "KEND"
constexpr size_t kAlign = 64;
/// The sections, in file order: the first 4 in every artifact, all 6 in a
/// CUDA artifact (target "cuda"; FORMAT.md).
constexpr const char *kSections[] = {"meta", "program", "kernels", "weights", "cuda", "cudabin"};
constexpr uint32_t kNumCpuSections = 4;
constexpr uint32_t kNumCudaSections = 6;
constexpr uint32_t kMaxSections = 6;

void put_u32(std::string &out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string &out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_u64(std::string_view in, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(in[at + i]);
  return v;
}
uint32_t get_u32(std::string_view in, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(in[at + i]);
  return v;
}
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// The trailer of `n` bytes of file: the CRC-32 (IEEE 802.3, zlib's crc32)
/// as u32, then "KEND". CRC-32 detects every burst of up to 32 flipped bits;
/// SHA-256 was 30 ms of a 2 MB load here (bench/README.md). libdeflate's
/// crc32 (carry-less multiply folding) computes the same value as zlib's,
/// 8x faster here (0.09 vs 0.80 ms for 1.7 MB).
std::string trailer_of(const char *data, size_t n) {
  const uint32_t crc = libdeflate_crc32(0, data, n);
  std::string t;
  put_u32(t, static_cast<uint32_t>(crc));
  return t + "KEND";
}

json guards_json(const std::vector<Guard> &guards) {
  json a = json::array();
  for (const Guard &g : guards)
    a.push_back({{"name", g.name}, {"dtype", dtype_name(g.dtype)}, {"sizes", g.sizes}});
  return a;
}

bool read_guards(const json &meta, const char *key, std::vector<Guard> *out, std::string *error) {
  const json *a = member(meta, key, error);
  if (!a || !expect_array(*a, key, error)) return false;
  for (const json &g : *a) {
    Guard guard;
    std::string dtype;
    if (!get_string(g, "name", &guard.name, error) || !get_string(g, "dtype", &dtype, error) ||
        !parse_dtype(dtype, &guard.dtype, error) || !get_sizes(g, "sizes", &guard.sizes, error))
      return false;
    out->push_back(std::move(guard));
  }
  return true;
}

std::string meta_json(const Contents &c) {
  json meta = {{"format", "kiln-export"},
               {"format_version", c.format_version},
               {"kiln_version", c.kiln_version},
               {"model", c.model},
               {"target", c.target},
               {"cpu_features", c.cpu_features},
               {"inputs", guards_json(c.inputs)},
               {"outputs", guards_json(c.outputs)},
               {"weights", c.weights}};
  if (c.dynamic_input >= 0) meta["dynamic_dim"] = {c.dynamic_input, c.dynamic_dim};
  return meta.dump(1);
}

bool read_meta(std::string_view text, const ReadOptions &options, Contents *c, std::string *error) {
  json meta = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) {
    *error = "section 'meta' is not a JSON object";
    return false;
  }
  std::string format;
  int64_t version = 0;
  if (!get_string(meta, "format", &format, error) || !get_int(meta, "format_version", &version, error) ||
      !get_string(meta, "kiln_version", &c->kiln_version, error) || !get_string(meta, "model", &c->model, error) ||
      !get_string(meta, "target", &c->target, error) ||
      !get_strings(meta, "cpu_features", &c->cpu_features, error) || !read_guards(meta, "inputs", &c->inputs, error) ||
      !read_guards(meta, "outputs", &c->outputs, error) || !get_strings(meta, "weights", &c->weights, error))
    return false;
  if (meta.contains("dynamic_dim")) {
    std::vector<int64_t> d;
    if (!get_ints(meta, "dynamic_dim", &d, error, 0)) return false;
    if (d.size() != 2 || d[0] >= static_cast<int64_t>(c->inputs.size()) ||
        d[1] >= static_cast<int64_t>(c->inputs[static_cast<size_t>(d[0])].sizes.size())) {
      *error = "metadata: dynamic_dim must be [input, dim] of an input guard";
      return false;
    }
    c->dynamic_input = static_cast<int>(d[0]);
    c->dynamic_dim = static_cast<int>(d[1]);
  }
  if (format != "kiln-export" || version != c->format_version) {
    *error = "metadata says format '" + format + "' version " + std::to_string(version) + ", expected 'kiln-export' version " +
             std::to_string(c->format_version);
    return false;
  }
  if (c->target != kTarget && !(c->target == kCudaTarget && version >= 2)) {
    *error = "exported for target '" + c->target + "', this runtime runs '" + kTarget + "' object code and '" +
             kCudaTarget + "' device code";
    return false;
  }
  if (options.check_host_isa) {
    const std::vector<std::string> host = host_cpu_features();
    std::string missing;
    for (const std::string &f : c->cpu_features)
      if (!std::binary_search(host.begin(), host.end(), f)) missing += (missing.empty() ? "" : ", ") + f;
    if (!missing.empty()) {
      *error = "wrong ISA: the kernels were compiled for a CPU with " + missing +
               ", which this CPU lacks (export the model on a machine like this one)";
      return false;
    }
  }
  return true;
}


/// Appends `blob` to `bin` at a 64-byte boundary; returns [offset, size].
json put_blob(std::string &bin, const std::string &blob) {
  bin.resize(align_up(bin.size()), '\0');
  json range = json::array({bin.size(), blob.size()});
  bin += blob;
  return range;
}

/// Section `cuda` (JSON index of the translation units) and `cudabin` (their
/// CUDA C, PTX and CUBINs, each 64-byte aligned). Deterministic.
void cuda_sections(const std::vector<CudaUnit> &units, std::string *index, std::string *bin) {
  json a = json::array();
  for (const CudaUnit &u : units) {
    json cubins = json::array();
    for (const auto &[arch, image] : u.cubins) cubins.push_back({{"arch", arch}, {"range", put_blob(*bin, image)}});
    json unit = {{"kernels", u.kernel_names}, {"source", put_blob(*bin, u.source)}, {"cubins", cubins}};
    if (!u.ptx.empty()) unit["ptx"] = {{"arch", u.ptx_arch}, {"range", put_blob(*bin, u.ptx)}};
    a.push_back(std::move(unit));
  }
  *index = json({{"units", a}}).dump(1);
}

/// One [offset, size] range of `cudabin`, checked against its size.
bool get_blob(const json &j, const char *key, std::string_view bin, std::string *out, const std::string &what,
              std::string *error) {
  std::vector<int64_t> range;
  if (!get_ints(j, key, &range, error, 0)) return false;
  if (range.size() != 2 || static_cast<uint64_t>(range[0]) > bin.size() ||
      static_cast<uint64_t>(range[1]) > bin.size() - static_cast<uint64_t>(range[0])) {
    *error = "section 'cuda': " + what + " lies outside section 'cudabin' (" + std::to_string(bin.size()) + " bytes)";
    return false;
  }
  *out = std::string(bin.substr(static_cast<size_t>(range[0]), static_cast<size_t>(range[1])));
  return true;
}

/// An arch name "sm_XX" (`kind` Cubin) or "compute_XX" (Ptx).
bool arch_ok(const std::string &arch, runtime::cuda::BinaryKind kind) {
  const auto target = runtime::cuda::parse_arch_name(arch);
  return target && target->kind == kind;
}

bool read_cuda_sections(std::string_view index, std::string_view bin, std::vector<CudaUnit> *units,
                        std::string *error) {
  json j = json::parse(index, nullptr, /*allow_exceptions=*/false);
  const json *a = j.is_object() ? member(j, "units", error) : nullptr;
  if (!a || !expect_array(*a, "units", error)) {
    if (error->empty() || !j.is_object()) *error = "section 'cuda' is not a JSON object with 'units'";
    return false;
  }
  for (const json &u : *a) {
    CudaUnit unit;
    const std::string what = "unit " + std::to_string(units->size());
    if (!get_strings(u, "kernels", &unit.kernel_names, error) ||
        !get_blob(u, "source", bin, &unit.source, what + " source", error))
      return false;
    const json *cubins = member(u, "cubins", error);
    if (!cubins || !expect_array(*cubins, "cubins", error)) return false;
    for (const json &c : *cubins) {
      std::string arch, image;
      if (!get_string(c, "arch", &arch, error) || !get_blob(c, "range", bin, &image, what + " " + arch, error)) return false;
      if (!arch_ok(arch, runtime::cuda::BinaryKind::Cubin) || image.empty()) {
        *error = "section 'cuda': " + what + ": bad CUBIN entry '" + arch + "' (" + std::to_string(image.size()) + " bytes)";
        return false;
      }
      unit.cubins.emplace_back(arch, std::move(image));
    }
    if (u.is_object() && u.contains("ptx")) {
      const json &p = u["ptx"];
      if (!get_string(p, "arch", &unit.ptx_arch, error) ||
          !get_blob(p, "range", bin, &unit.ptx, what + " PTX", error))
        return false;
      if (!arch_ok(unit.ptx_arch, runtime::cuda::BinaryKind::Ptx) || unit.ptx.empty() || unit.ptx.back() != '\0') {
        *error = "section 'cuda': " + what + ": bad PTX entry '" + unit.ptx_arch + "'";
        return false;
      }
    }
    if (unit.kernel_names.empty() || unit.source.empty()) {
      *error = "section 'cuda': " + what + " has no kernels or no source";
      return false;
    }
    units->push_back(std::move(unit));
  }
  return true;
}

} // namespace

std::string write_artifact(const Contents &contents) {
  const bool cuda = contents.target == kCudaTarget;
  const uint32_t num_sections = cuda ? kNumCudaSections : kNumCpuSections;
  std::string sections[kMaxSections] = {meta_json(contents), contents.program, contents.kernels, contents.safetensors};
  if (cuda) cuda_sections(contents.cuda_units, &sections[4], &sections[5]);
  size_t offset = align_up(kHeaderBytes + num_sections * kSectionEntryBytes);
  std::string table;
  std::vector<size_t> offsets;
  for (uint32_t i = 0; i < num_sections; ++i) {
    char tag[8] = {};
    std::memcpy(tag, kSections[i], std::strlen(kSections[i]));
    table.append(tag, 8);
    put_u64(table, offset);
    put_u64(table, sections[i].size());
    offsets.push_back(offset);
    offset = align_up(offset + sections[i].size());
  }
  const size_t file_size = offset + kTrailerBytes;
  std::string out(kMagic, 8);
  put_u32(out, contents.format_version);
  put_u32(out, num_sections);
  put_u64(out, file_size);
  put_u64(out, 0);
  out += table;
  for (uint32_t i = 0; i < num_sections; ++i) {
    out.resize(offsets[i], '\0');
    out += sections[i];
  }
  out.resize(file_size - kTrailerBytes, '\0');
  out += trailer_of(out.data(), out.size());
  return out;
}

bool read_artifact(std::string_view bytes, const std::string &name, const ReadOptions &options, Contents *out,
                   std::string *error) {
  auto fail = [&](const std::string &what) {
    *error = name + ": " + what;
    return false;
  };
  const size_t min_size = kHeaderBytes + kNumCpuSections * kSectionEntryBytes + kTrailerBytes;
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    return fail("not a Kiln exported model (expected the magic 'KILNEXP' in the first 8 bytes; write one with "
                "kiln::export_compiled)");
  if (bytes.size() < kHeaderBytes)
    return fail("truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the " +
                std::to_string(kHeaderBytes) + "-byte header");
  const uint32_t version = get_u32(bytes, 8);
  if (version < kOldestFormatVersion || version > kFormatVersion)
    return fail("format version " + std::to_string(version) + ", this runtime reads versions " +
                std::to_string(kOldestFormatVersion) + " to " + std::to_string(kFormatVersion) +
                " (export the model again with this Kiln)");
  const uint64_t file_size = get_u64(bytes, 16);
  if (file_size != bytes.size())
    return fail((file_size > bytes.size() ? "truncated: the header says " : "size mismatch: the header says ") +
                std::to_string(file_size) + " bytes, the file has " + std::to_string(bytes.size()));
  if (bytes.size() < min_size) return fail("truncated: " + std::to_string(bytes.size()) + " bytes");
  const std::string trailer = trailer_of(bytes.data(), bytes.size() - kTrailerBytes);
  if (bytes.substr(bytes.size() - kTrailerBytes) != trailer)
    return fail("checksum mismatch (the CRC-32 of the file differs from its trailer): the file is corrupt");
  const uint32_t num_sections = get_u32(bytes, 12);
  if (num_sections != kNumCpuSections && !(num_sections == kNumCudaSections && version >= 2))
    return fail("expected " + std::to_string(kNumCpuSections) + " sections (" + std::to_string(kNumCudaSections) +
                " for a CUDA artifact), the header says " + std::to_string(num_sections));
  if (bytes.size() < min_size + (num_sections - kNumCpuSections) * kSectionEntryBytes)
    return fail("truncated: " + std::to_string(bytes.size()) + " bytes");
  std::string_view sections[kMaxSections];
  const uint64_t end = bytes.size() - kTrailerBytes;
  for (uint32_t i = 0; i < num_sections; ++i) {
    const size_t at = kHeaderBytes + i * kSectionEntryBytes;
    char tag[9] = {};
    std::memcpy(tag, bytes.data() + at, 8);
    const uint64_t offset = get_u64(bytes, at + 8), size = get_u64(bytes, at + 16);
    if (std::strncmp(tag, kSections[i], 8) != 0)
      return fail("section " + std::to_string(i) + " is '" + std::string(tag) + "', expected '" + kSections[i] + "'");
    if (offset > end || size > end - offset)
      return fail("section '" + std::string(kSections[i]) + "' [" + std::to_string(offset) + ", +" +
                  std::to_string(size) + ") lies outside the file (" + std::to_string(end) + " bytes of sections)");
    sections[i] = bytes.substr(offset, size);
  }
  Contents c;
  c.format_version = version;
  std::string why;
  if (!read_meta(sections[0], options, &c, &why)) return fail(why);
  const bool cuda = c.target == kCudaTarget;
  if (cuda != (num_sections == kNumCudaSections))
    return fail("target '" + c.target + "' with " + std::to_string(num_sections) + " sections (a CUDA artifact has " +
                std::to_string(kNumCudaSections) + ", a CPU one " + std::to_string(kNumCpuSections) + ")");
  if (cuda && !read_cuda_sections(sections[4], sections[5], &c.cuda_units, &why)) return fail(why);
  c.program = std::string(sections[1]);
  c.kernels = std::string(sections[2]);
  if (options.weights_view) *options.weights_view = sections[3];
  else c.safetensors = std::string(sections[3]);
  *out = std::move(c);
  return true;
}

std::vector<std::string> host_cpu_features() {
  std::vector<std::string> f;
#if defined(__x86_64__)
  __builtin_cpu_init();
#define KILN_FEATURE(name) \
  if (__builtin_cpu_supports(name)) f.push_back(name);
  KILN_FEATURE("sse4.2") KILN_FEATURE("popcnt") KILN_FEATURE("avx") KILN_FEATURE("avx2") KILN_FEATURE("fma")
  KILN_FEATURE("bmi") KILN_FEATURE("bmi2") KILN_FEATURE("avx512f") KILN_FEATURE("avx512bw")
  KILN_FEATURE("avx512vl") KILN_FEATURE("avx512dq") KILN_FEATURE("avx512cd") KILN_FEATURE("avx512vnni")
  KILN_FEATURE("avx512bf16") KILN_FEATURE("avx512fp16") KILN_FEATURE("avx512vbmi") KILN_FEATURE("avx512vbmi2")
  KILN_FEATURE("avx512ifma") KILN_FEATURE("avx512bitalg") KILN_FEATURE("avx512vpopcntdq") KILN_FEATURE("gfni")
  KILN_FEATURE("vaes") KILN_FEATURE("vpclmulqdq") KILN_FEATURE("f16c")
#undef KILN_FEATURE
#endif
  std::sort(f.begin(), f.end());
  return f;
}

bool parse_safetensors(std::string_view bytes, std::vector<WeightEntry> *entries, std::string *error) {
  if (bytes.size() < 8) {
    *error = "weights: truncated safetensors (" + std::to_string(bytes.size()) + " bytes)";
    return false;
  }
  const uint64_t n = get_u64(bytes, 0);
  if (n > bytes.size() - 8) {
    *error = "weights: safetensors header of " + std::to_string(n) + " bytes exceeds the section";
    return false;
  }
  json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    *error = "weights: the safetensors header is not a JSON object";
    return false;
  }
  const uint64_t data_size = bytes.size() - 8 - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    WeightEntry e;
    e.name = it.key();
    std::string code, why;
    std::vector<int64_t> offsets;
    if (!get_string(*it, "dtype", &code, &why) || !get_sizes(*it, "shape", &e.sizes, &why) ||
        !get_sizes(*it, "data_offsets", &offsets, &why) || offsets.size() != 2 ||
        !parse_safetensors_dtype(code, &e.dtype, &why)) {
      *error = "weights: tensor '" + e.name + "': " + (why.empty() ? "data_offsets must be [begin, end]" : why);
      return false;
    }
    e.begin = static_cast<uint64_t>(offsets[0]);
    e.end = static_cast<uint64_t>(offsets[1]);
    int64_t bytes_needed = 0;
    if (!checked_nbytes(e.sizes, e.dtype, &bytes_needed) || e.begin > e.end || e.end > data_size ||
        e.end - e.begin != static_cast<uint64_t>(bytes_needed)) {
      *error = "weights: tensor '" + e.name + "' has data_offsets [" + std::to_string(e.begin) + ", " +
               std::to_string(e.end) + "), expected " + std::to_string(bytes_needed) + " bytes inside the " +
               std::to_string(data_size) + "-byte data section";
      return false;
    }
    e.begin += 8 + n;
    e.end += 8 + n;
    entries->push_back(std::move(e));
  }
  return true;
}

} // namespace kiln::runtime::artifact
