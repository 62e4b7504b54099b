// libFuzzer target: the kernel-cache entry reader (readCachedObject,
// codegen/KernelCache.cpp) on arbitrary bytes.
//
// Input: byte 0 picks the mode, the rest is the payload.
//   even: the payload is an entry file as found on disk, read for kKey;
//   odd:  the payload is an object; the target appends the trailer that
//         codegen/DESIGN.md specifies (object size u64 little endian,
//         SHA-256 of key, NUL, object; magic "KILNOBJ1") and expects the
//         reader to return exactly that object.
// Properties: no crash or sanitizer report; Ok only with a trailer matching
// the bytes before it (checked independently here), and the object returned
// is those bytes. Objects that pass the trailer check go to LLVM's JIT
// linker; that trust boundary (whoever can write the cache directory can
// write code) is not fuzzed here.
#include <array>
#include <string>

#include "KernelCache.h"
#include "fuzz_input.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SHA256.h"

namespace {

const std::string kKey = "5a1f0d6c3b2e4f708192a3b4c5d6e7f80123456789abcdef0123456789abcdef";
constexpr size_t kTrailerSize = 8 + 32 + 8;

/// The trailer per the documented format, written independently of the reader.
std::string trailer_for(const std::string &key, const std::string &object) {
  std::string t;
  for (int i = 0; i < 8; ++i)
    t.push_back(static_cast<char>((static_cast<uint64_t>(object.size()) >> (8 * i)) & 0xff));
  llvm::SHA256 sha;
  sha.update(key);
  sha.update(llvm::StringRef("\0", 1));
  sha.update(object);
  std::array<uint8_t, 32> hash = sha.final();
  t.append(reinterpret_cast<const char *>(hash.data()), hash.size());
  return t + "KILNOBJ1";
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using kiln::codegen::CacheRead;
  static kiln::fuzz::MemFile file;
  if (size == 0)
    return 0;
  const bool build_entry = data[0] & 1;
  std::string entry(reinterpret_cast<const char *>(data) + 1, size - 1);
  if (build_entry)
    entry += trailer_for(kKey, entry);
  const std::string &path = file.put(entry.data(), entry.size());
  std::string object, why;
  const CacheRead result = kiln::codegen::readCachedObject(path, kKey, &object, &why);
  const bool valid = entry.size() >= kTrailerSize &&
                     entry.substr(entry.size() - kTrailerSize) ==
                         trailer_for(kKey, entry.substr(0, entry.size() - kTrailerSize));
  if (result == CacheRead::Missing)
    kiln::fuzz::violated("an existing entry was reported missing");
  if ((result == CacheRead::Ok) != valid)
    kiln::fuzz::violated(std::string("the reader said ") + (result == CacheRead::Ok ? "Ok" : "Corrupt (" + why + ")") +
                         " for an entry whose trailer is " + (valid ? "valid" : "invalid"));
  if (result == CacheRead::Ok && object != entry.substr(0, entry.size() - kTrailerSize))
    kiln::fuzz::violated("the reader returned other bytes than the entry's object");
  if (result == CacheRead::Corrupt && why.empty())
    kiln::fuzz::violated("a corrupt entry came without a reason");
  return 0;
}
