// Encoding, verified reading and atomic writing of NVRTC cache entries
// (NvrtcDiskCache.h).
#include "NvrtcDiskCache.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include "Sha256.h"

namespace kiln::runtime::cuda {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'U', '0', '1'};
constexpr size_t kChecksumBytes = 32;
constexpr size_t kHeaderBytes = sizeof(kMagic) + 8 + kChecksumBytes;
/// rw-r--r--: mkstemp's 0600 would hide a shared cache folder's entries
/// from other users of it.
constexpr mode_t kEntryMode = 0644;

void append_u64(std::string &out, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t read_u64(const std::string &in, size_t at) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i)
    value |= uint64_t(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return value;
}

std::string checksum(const std::string &key, const std::string &payload) {
  Sha256 sha;
  sha.field(key);
  sha.update(payload);
  std::array<uint8_t, 32> digest = sha.digest();
  return std::string(reinterpret_cast<const char *>(digest.data()), digest.size());
}

/// Splits a verified file into binary and log; false when malformed.
bool decode(const std::string &key, const std::string &file, std::string &binary, std::string &log) {
  if (file.size() < kHeaderBytes + 8 || std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0)
    return false;
  uint64_t payload_bytes = read_u64(file, sizeof(kMagic));
  if (payload_bytes != file.size() - kHeaderBytes)
    return false;
  std::string payload = file.substr(kHeaderBytes);
  if (file.compare(sizeof(kMagic) + 8, kChecksumBytes, checksum(key, payload)) != 0)
    return false;
  uint64_t binary_bytes = read_u64(payload, 0);
  if (binary_bytes > payload.size() - 8)
    return false;
  binary = payload.substr(8, binary_bytes);
  log = payload.substr(8 + binary_bytes);
  return true;
}

} // namespace

std::string encode_cache_entry(const std::string &key, const std::string &binary, const std::string &log) {
  std::string payload;
  append_u64(payload, binary.size());
  payload += binary;
  payload += log;
  std::string file(kMagic, sizeof(kMagic));
  append_u64(file, payload.size());
  file += checksum(key, payload);
  file += payload;
  return file;
}

CacheRead read_cache_entry(const std::string &path, const std::string &key, std::string &binary, std::string &log) {
  std::error_code error;
  if (!std::filesystem::exists(path, error))
    return CacheRead::Missing;
  if (!std::filesystem::is_regular_file(path, error))
    return CacheRead::Bad;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in.good() && !in.eof())
    return CacheRead::Bad;
  return decode(key, bytes.str(), binary, log) ? CacheRead::Ok : CacheRead::Bad;
}

bool write_cache_entry(const std::string &path, const std::string &bytes) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
  std::string temp = path + ".tmp-XXXXXX";
  int fd = mkstemp(temp.data());
  if (fd < 0)
    return false;
  fchmod(fd, kEntryMode);
  bool written = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  written = (::close(fd) == 0) && written;
  if (written)
    written = std::rename(temp.c_str(), path.c_str()) == 0;
  if (!written)
    std::remove(temp.c_str());
  return written;
}

} // namespace kiln::runtime::cuda
