// Atomic file replacement for kiln::save: write a temporary file next to the
// target, fsync it, rename it over the target, fsync the directory. Until
// commit() succeeds the target is untouched; a writer destroyed without a
// successful commit removes its temporary file.
#pragma once

#include <cstddef>
#include <string>

namespace kiln::serialize {

class AtomicFileWriter {
public:
  /// Creates the temporary file "<dir>/.<name>.tmp-<pid>-<n>" (O_EXCL).
  /// Throws kiln::Error naming `path` if it cannot be created.
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter &) = delete;
  AtomicFileWriter &operator=(const AtomicFileWriter &) = delete;

  /// Appends `n` bytes. Throws kiln::Error on a short write (disk full, ...).
  void write(const void *data, size_t n);
  /// fsync, close, rename over the target, fsync the directory. Throws
  /// kiln::Error if any step fails (the target then keeps its old content).
  void commit();

private:
  void stage(const char *name);
  [[noreturn]] void fail(const char *what, int err);
  std::string path_, tmp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

} // namespace kiln::serialize
