// The on-disk kernel cache: key of a kernel module, verified read, atomic
// write of its object code (codegen/DESIGN.md, "Kernel cache").
//
// An entry is `<dir>/<key>.o`: the ELF relocatable the JIT produced, followed
// by a 48-byte trailer (object size as u64 little endian, SHA-256 of the
// key and the object, magic "KILNOBJ1"). The file is still an ELF object (readelf and
// objdump ignore the trailer); the trailer lets a truncated or corrupted entry
// be rejected before LLVM ever parses it.
#include "KernelCache.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

#include "kiln/codegen/Compiler.h"
#include "kiln/runtime/CacheDir.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

namespace kiln::codegen {

KernelCacheStats kernelCacheStats() {
  KernelCacheCounters &c = kernelCacheCounters();
  KernelCacheStats s;
  s.hits = c.hits.load();
  s.misses = c.misses.load();
  s.bad_entries = c.bad_entries.load();
  s.stores = c.stores.load();
  s.store_failures = c.store_failures.load();
  s.mlir_lowerings = c.mlir_lowerings.load();
  s.llvm_compiles = c.llvm_compiles.load();
  return s;
}

std::string resolveKernelCacheDir(const CompileOptions &options) {
  if (const char *off = std::getenv("KILN_DISABLE_CACHE"); off && *off && std::strcmp(off, "0") != 0)
    return "";
  if (options.kernel_cache_dir)
    return *options.kernel_cache_dir;
  return runtime::default_kernel_cache_dir();
}

namespace {

/// Bump when the entry layout or anything the key does not cover changes
/// (the kernel ABI, the packed wrappers, the optimization levels, and what
/// Kiln's own lowering passes do: loweringDescription() names them, not
/// their behaviour). v2: row tiling, row-split kernels. v3: elementwise
/// kernels merged into one multi-result generic. v4: row kernels' results
/// merged into one generic; in-place branches. v5: the in-place branch
/// without partial aliasing, reading operands through the result pointer.
/// v6: the target's part (its name, optimization levels, machine and
/// lowering) comes from Target::cacheKeyPrefix.
constexpr const char *kCacheFormat = "kiln-kernel-cache-v6;abi=packed-memref";
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'O', 'B', 'J', '1'};
constexpr size_t kTrailerSize = 8 + 32 + 8;

std::string trailer(llvm::StringRef key, llvm::StringRef object) {
  std::string t;
  uint64_t size = object.size();
  for (int i = 0; i < 8; ++i)
    t.push_back(static_cast<char>((size >> (8 * i)) & 0xff));
  // Bound to the key: an entry copied or renamed to another key is rejected.
  llvm::SHA256 sha;
  sha.update(key);
  sha.update(llvm::StringRef("\0", 1));
  sha.update(object);
  std::array<uint8_t, 32> hash = sha.final();
  t.append(reinterpret_cast<const char *>(hash.data()), hash.size());
  t.append(kMagic, sizeof(kMagic));
  return t;
}

/// A raw_ostream that feeds a SHA-256 (the printed IR is never materialized).
class HashStream : public llvm::raw_ostream {
public:
  explicit HashStream(llvm::SHA256 &sha) : sha_(sha) { SetUnbuffered(); }

private:
  void write_impl(const char *ptr, size_t size) override {
    sha_.update(llvm::StringRef(ptr, size));
    pos_ += size;
  }
  uint64_t current_pos() const override { return pos_; }
  llvm::SHA256 &sha_;
  uint64_t pos_ = 0;
};

} // namespace

KernelCacheCounters &kernelCacheCounters() {
  static KernelCacheCounters counters;
  return counters;
}

std::string kernelCacheKey(mlir::ModuleOp kernels, const std::string &targetPrefix) {
  llvm::SHA256 sha;
  // Each field ends with a NUL so no two field lists hash the same text.
  auto field = [&](llvm::StringRef s) {
    sha.update(s);
    sha.update(llvm::StringRef("\0", 1));
  };
  field(kCacheFormat);
  field(KILN_VERSION);
  field(LLVM_VERSION_STRING);
  field(targetPrefix);
  {
    HashStream os(sha);
    // Deterministic text: no locations, custom assembly, full constants.
    mlir::OpPrintingFlags flags;
    flags.enableDebugInfo(false).printGenericOpForm(false);
    kernels->print(os, flags);
    os.flush();
  }
  std::array<uint8_t, 32> digest = sha.final();
  return llvm::toHex(digest, /*LowerCase=*/true);
}

std::string kernelCachePath(const std::string &dir, const std::string &key) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, key + ".o");
  return std::string(path);
}

CacheRead readCachedObject(const std::string &path, const std::string &key, std::string *object, std::string *why) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buffer) {
    if (buffer.getError() == std::errc::no_such_file_or_directory)
      return CacheRead::Missing;
    *why = "cannot read " + path + ": " + buffer.getError().message();
    return CacheRead::Corrupt;
  }
  llvm::StringRef data = (*buffer)->getBuffer();
  if (data.size() < kTrailerSize || data.substr(data.size() - 8) != llvm::StringRef(kMagic, 8)) {
    *why = path + ": no kiln trailer (truncated or not a cache entry)";
    return CacheRead::Corrupt;
  }
  llvm::StringRef body = data.drop_back(kTrailerSize);
  if (trailer(key, body) != data.take_back(kTrailerSize)) {
    *why = path + ": size or checksum mismatch";
    return CacheRead::Corrupt;
  }
  *object = body.str();
  return CacheRead::Ok;
}

bool storeCachedObject(const KernelLibrary &library, const std::string &path, const std::string &key,
                       std::string *error) {
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
    *error = "cannot create " + dir.str() + ": " + ec.message();
    return false;
  }
  // A unique temp file in the same directory, so the rename is atomic and
  // concurrent writers of the same key never see each other's half files.
  int fd = -1;
  llvm::SmallString<256> tmp;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(path + ".tmp-%%%%%%%%", fd, tmp)) {
    *error = "cannot create a temp file in " + dir.str() + ": " + ec.message();
    return false;
  }
  llvm::sys::Process::SafelyCloseFileDescriptor(fd);
  auto cleanup = [&](const std::string &message) {
    llvm::sys::fs::remove(tmp);
    *error = message;
    return false;
  };
  if (!library.dumpObject(std::string(tmp), error))
    return cleanup(*error);
  auto buffer = llvm::MemoryBuffer::getFile(tmp, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buffer || (*buffer)->getBufferSize() == 0)
    return cleanup("the JIT wrote no object to " + std::string(tmp));
  std::string tail = trailer(key, (*buffer)->getBuffer());
  buffer->reset();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_Append);
    if (ec)
      return cleanup("cannot append to " + std::string(tmp) + ": " + ec.message());
    os << tail;
    os.close();
    if (os.has_error()) {
      std::string message = "cannot write " + std::string(tmp) + ": " + os.error().message();
      os.clear_error();
      return cleanup(message);
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path))
    return cleanup("cannot rename " + std::string(tmp) + " to " + path + ": " + ec.message());
  return true;
}

} // namespace kiln::codegen

namespace kiln::codegen {

bool readKernelObject(const CompiledGraph &graph, const CompileOptions &options, std::string *object,
                      std::string *error) {
  if (graph.kernel_cache_key.empty()) {
    *error = "the graph has no kernel object (no kernels, or it was compiled with the kernel cache off)";
    return false;
  }
  const std::string dir = resolveKernelCacheDir(options);
  if (dir.empty()) {
    *error = "the kernel cache is off, so the kernel object was not kept";
    return false;
  }
  const std::string path = kernelCachePath(dir, graph.kernel_cache_key);
  std::string why;
  switch (readCachedObject(path, graph.kernel_cache_key, object, &why)) {
  case CacheRead::Ok:
    return true;
  case CacheRead::Missing:
    *error = "kernel cache entry " + path + " is missing (a store failed?)";
    return false;
  case CacheRead::Corrupt:
    *error = "kernel cache entry " + path + " is corrupt: " + why;
    return false;
  }
  return false;
}

} // namespace kiln::codegen
