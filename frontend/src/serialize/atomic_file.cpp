// AtomicFileWriter (see atomic_file.h) and the save fault hook for tests.
#include "serialize/atomic_file.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/error.h"
#include "kiln/serialize.h"

namespace kiln {

namespace {
std::mutex &hook_mutex() {
  static std::mutex m;
  return m;
}
std::function<void(const std::string &)> &fault_hook() {
  static std::function<void(const std::string &)> hook;
  return hook;
}
} // namespace

void detail::set_save_fault_hook(std::function<void(const std::string &stage)> hook) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  fault_hook() = std::move(hook);
}

namespace serialize {

static std::string directory_of(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

static std::string file_name_of(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  static std::atomic<uint64_t> counter{0};
  KILN_CHECK(!path_.empty() && path_.back() != '/', "save: '", path_, "' is not a file path; give a file name such as ",
             "'model.safetensors'");
  tmp_path_ = directory_of(path_) + "/." + file_name_of(path_) + ".tmp-" + std::to_string(::getpid()) + "-" +
              std::to_string(counter++);
  stage("open");
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail("creating a temporary file in its directory", errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0)
    ::close(fd_);
  if (!committed_)
    ::unlink(tmp_path_.c_str());
}

void AtomicFileWriter::stage(const char *name) {
  std::function<void(const std::string &)> hook;
  {
    std::lock_guard<std::mutex> lock(hook_mutex());
    hook = fault_hook();
  }
  if (!hook)
    return;
  try {
    hook(name);
  } catch (const std::exception &e) {
    throw Error("save: cannot write '" + path_ + "': " + e.what() + " (at stage '" + name +
                "'); the previous file is unchanged");
  }
}

void AtomicFileWriter::fail(const char *what, int err) {
  throw Error("save: cannot write '" + path_ + "' (" + what + "): " + std::strerror(err) +
              ". Check that the directory exists and is writable and that the disk has space; the previous file "
              "is unchanged");
}

void AtomicFileWriter::write(const void *data, size_t n) {
  stage("write");
  const char *p = static_cast<const char *>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      fail("writing the temporary file", w < 0 ? errno : ENOSPC);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  stage("fsync");
  if (::fsync(fd_) != 0)
    fail("fsync of the temporary file", errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    fail("closing the temporary file", errno);
  stage("rename");
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    fail("renaming the temporary file over it", errno);
  committed_ = true;
  // Make the rename itself durable. A failure here cannot be undone (the new
  // file is in place), so it is not reported.
  int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

} // namespace serialize
} // namespace kiln
