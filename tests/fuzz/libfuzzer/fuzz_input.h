// fuzz_input.h - helpers shared by the libFuzzer targets in this folder.
//
// The parsers under test read files by path (kiln::load, load_checkpoint,
// load_digits, the kernel-cache reader), so each input is handed to them as a
// real file: an in-memory file (memfd) reached through /proc/self/fd/<n>.
// The parser then sees exactly what it sees for a file on disk (fstat size,
// short reads, gzip detection) and no public API needs a bytes entry point.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace kiln::fuzz {

/// One reusable in-memory file; put() replaces its content.
class MemFile {
public:
  MemFile() {
    fd_ = ::memfd_create("kiln-fuzz-input", MFD_CLOEXEC);
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile &) = delete;
  MemFile &operator=(const MemFile &) = delete;

  /// Makes the file hold exactly `size` bytes from `data`; returns its path.
  const std::string &put(const void *data, size_t size) {
    if (::ftruncate(fd_, 0) != 0 || (size > 0 && ::pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size))) {
      std::perror("MemFile::put");
      std::abort();
    }
    return path_;
  }
  const std::string &path() const { return path_; }

private:
  int fd_ = -1;
  std::string path_;
};

/// Stops the run with `why`: a property of the parser was violated (libFuzzer
/// and the replay driver both report an abort as a crash and keep the input).
[[noreturn]] inline void violated(const std::string &why) {
  std::fprintf(stderr, "kiln fuzz: property violated: %s\n", why.c_str());
  std::abort();
}

} // namespace kiln::fuzz
