// libFuzzer target: the exported-model reader (kiln::load_compiled_from_bytes,
// runtime/src/artifact: container, metadata, launch-list codec, ELF kernel
// loader, safetensors weights) on arbitrary bytes.
//
// Input: byte 0 picks the mode, the rest is the payload.
//   even: the payload is an artifact file as found on disk;
//   odd:  the payload is an artifact whose size field and CRC-32 trailer
//         the target rewrites (FORMAT.md: u64 file size at byte 16; last 8
//         bytes: CRC-32 of the bytes before them, "KEND"), so mutations reach the
//         section table, the JSON sections, the ELF loader and the weights
//         instead of stopping at the checksum.
// Properties: no crash or sanitizer report; a load either succeeds or throws
// kiln::runtime::LoadError with a message that names the file; nothing else
// is thrown. Loaded kernels are never called (the host ISA check is off, so
// seeds written on another machine still load).
#include <cstdint>
#include <cstring>
#include <string>

#include <zlib.h>

#include "fuzz_input.h"
#include "kiln/load_compiled.h"

namespace {

/// Rewrites the file-size field and the CRC-32 trailer (FORMAT.md), written
/// here from the format, independently of the reader.
void fix_checksum(std::string &bytes) {
  if (bytes.size() < 32) return;
  const uint64_t size = bytes.size();
  for (int i = 0; i < 8; ++i) bytes[16 + i] = static_cast<char>((size >> (8 * i)) & 0xff);
  const uint32_t crc = static_cast<uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef *>(bytes.data()), bytes.size() - 8));
  for (int i = 0; i < 4; ++i) bytes[bytes.size() - 8 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  std::memcpy(&bytes[bytes.size() - 4], "KEND", 4);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char *>(data) + 1, size - 1);
  if (data[0] & 1) fix_checksum(bytes);
  kiln::runtime::LoadOptions options;
  options.check_host_isa = false;
  try {
    kiln::LoadedModel m = kiln::load_compiled_from_bytes(bytes, "fuzz.kiln", options);
    if (m.inputs().empty() && m.outputs().empty() && m.arena_bytes() < 0)
      kiln::fuzz::violated("a loaded model reports a negative arena");
  } catch (const kiln::runtime::LoadError &e) {
    if (std::strncmp(e.what(), "fuzz.kiln: ", 11) != 0)
      kiln::fuzz::violated(std::string("a load error that does not name the file: ") + e.what());
  } catch (const std::exception &e) {
    kiln::fuzz::violated(std::string("load_compiled threw something other than LoadError: ") + e.what());
  }
  return 0;
}
