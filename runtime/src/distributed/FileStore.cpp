// FileStore (kiln/runtime/distributed/FileStore.h), after c10d's FileStore:
// an append-only log of StoreFrame records under flock(), replayed by each
// FileStore into its own table.
//
// Records (op: fields): kSetRecord: key, value; kDeleteRecord: key. add()
// and compare_set() append the set they amount to, so a replay needs only
// these two.
#include "kiln/runtime/distributed/FileStore.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "KeyValueTable.h"
#include "StoreFrame.h"

namespace kiln::runtime::distributed {

using Kind = DistributedError::Kind;
using Clock = std::chrono::steady_clock;
using frame::Fields;
using frame::Shape;

namespace {

enum Record : uint8_t { kSetRecord = 1, kDeleteRecord = 2 };

Shape record_shape(uint8_t op) {
  if (op == kSetRecord)
    return {true, 2, 2, 0b10};
  if (op == kDeleteRecord)
    return {true, 1, 1, 0};
  return {};
}

/// Every FileStore adds 1 here when destroyed; the world_size-th removes the
/// file (c10d's cleanup key).
const std::string kFinishedKey = std::string(kInternalKeyPrefix) + "finished";

std::vector<uint8_t> bytes_of(const std::string &s) { return {s.begin(), s.end()}; }
std::string errno_text() { return std::strerror(errno); }

/// The store's file, open and flock()ed for one operation. Each open is its
/// own open file description, so threads of one process exclude each other
/// as processes do.
class LockedFile {
public:
  LockedFile(const std::string &path, bool exclusive) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw DistributedError(Kind::Invalid, "FileStore: cannot open " + path + ": " + errno_text() +
                                                " (does its directory exist, on a file system every rank sees?)");
    while (::flock(fd_, exclusive ? LOCK_EX : LOCK_SH) != 0) {
      if (errno == EINTR)
        continue;
      const std::string why = errno_text();
      ::close(fd_);
      throw DistributedError(Kind::Invalid, "FileStore: cannot lock " + path + ": " + why +
                                                " (does this file system support flock()?)");
    }
  }
  ~LockedFile() { ::close(fd_); } // releases the lock
  LockedFile(const LockedFile &) = delete;
  LockedFile &operator=(const LockedFile &) = delete;

  uint64_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0)
      throw DistributedError(Kind::Invalid, "FileStore: cannot stat " + path_ + ": " + errno_text());
    return static_cast<uint64_t>(st.st_size);
  }

  /// Reads `n` bytes at `offset`; the caller has checked that they exist.
  void read_at(uint64_t offset, uint8_t *p, size_t n) const {
    for (size_t done = 0; done < n;) {
      const ssize_t k = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        throw DistributedError(Kind::Invalid, "FileStore: cannot read " + path_ + " at byte offset " +
                                                  std::to_string(offset + done) + ": " +
                                                  (k == 0 ? "the file ended" : errno_text()));
      done += static_cast<size_t>(k);
    }
  }

  /// Writes `bytes` at `offset`, the end of the file. On failure cuts the
  /// file back to `offset`, so no rank reads half a record.
  void write_at(uint64_t offset, const std::vector<uint8_t> &bytes) const {
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t k = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
      if (k < 0 && errno == EINTR)
        continue;
      if (k < 0) {
        const std::string why = errno_text();
        (void)!::ftruncate(fd_, static_cast<off_t>(offset));
        throw DistributedError(Kind::Invalid, "FileStore: cannot write " + path_ + ": " + why);
      }
      done += static_cast<size_t>(k);
    }
  }

private:
  std::string path_;
  int fd_ = -1;
};

} // namespace

struct FileStore::State {
  std::string path;
  std::mutex mu;
  KeyValueTable table; ///< the log's records up to `offset`, applied
  uint64_t offset = 0; ///< bytes of the file replayed into `table`

  /// Runs `op(file)` with the file locked and replayed.
  template <typename F> auto locked(bool exclusive, F &&op) {
    std::lock_guard<std::mutex> lock(mu);
    LockedFile file(path, exclusive);
    replay(file);
    return op(file);
  }

  /// Applies the records other FileStores appended since `offset`.
  void replay(const LockedFile &file) {
    const uint64_t size = file.size();
    if (size < offset)
      throw corrupt("the file shrank from " + std::to_string(offset) + " to " + std::to_string(size) +
                    " bytes (truncated or made anew by another job?)");
    std::vector<uint8_t> head(frame::kHeaderBytes), body;
    while (offset < size) {
      frame::Header header;
      Fields fields;
      std::string why;
      if (size - offset < frame::kHeaderBytes)
        throw corrupt("a truncated record header");
      file.read_at(offset, head.data(), head.size());
      if (!frame::parse_header(head.data(), record_shape, &header, &why))
        throw corrupt("a corrupt record: " + why);
      if (size - offset - frame::kHeaderBytes < header.body_bytes)
        throw corrupt("a truncated record (" + std::to_string(header.body_bytes) + " bytes claimed, " +
                      std::to_string(size - offset - frame::kHeaderBytes) + " in the file)");
      body.resize(header.body_bytes); // bounded by parse_header: at most one key and one value
      file.read_at(offset + frame::kHeaderBytes, body.data(), body.size());
      if (!frame::parse_body(header, record_shape, body.data(), &fields, &why))
        throw corrupt("a corrupt record: " + why);
      apply(header.op, fields);
      offset += frame::kHeaderBytes + header.body_bytes;
    }
  }

  void apply(uint8_t op, Fields &fields) {
    const std::string key(fields[0].begin(), fields[0].end());
    if (op == kSetRecord)
      table.set(key, std::move(fields[1]));
    else
      table.erase(key);
  }

  /// Appends one record (the file is locked exclusively and replayed, so
  /// `offset` is its end) and applies it.
  void append(const LockedFile &file, uint8_t op, Fields fields) {
    frame::check_fields(record_shape(op), fields, "FileStore " + path);
    const auto bytes = frame::encode(op, fields);
    file.write_at(offset, bytes);
    offset += bytes.size();
    apply(op, fields);
  }

  /// A table of `key`'s entry alone: add() and compare_set() work out the
  /// record to append there, since `table` changes only through append().
  KeyValueTable entry(const std::string &key) const {
    KeyValueTable one;
    if (const auto *v = table.find(key))
      one.set(key, *v);
    return one;
  }

  /// Until `ready(table)` holds, reading the file every kFileStorePollPause;
  /// false when `timeout` passes first.
  bool poll(std::chrono::milliseconds timeout, const std::function<bool(const KeyValueTable &)> &ready) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (locked(false, [&](const LockedFile &) { return ready(table); }))
        return true;
      const auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero())
        return false;
      std::this_thread::sleep_for(std::min<Clock::duration>(kFileStorePollPause, left));
    }
  }

  DistributedError corrupt(const std::string &why) const {
    return DistributedError(Kind::Protocol, "FileStore " + path + ": " + why + " at byte offset " +
                                                std::to_string(offset) +
                                                "; a rank may have died while writing it: remove the file and "
                                                "restart the job");
  }
};

FileStore::FileStore(std::string path, int world_size)
    : path_(std::move(path)), world_size_(world_size), state_(std::make_unique<State>()) {
  state_->path = path_;
  state_->locked(false, [](const LockedFile &) { return 0; }); // creates the file; a bad path fails here
}

FileStore::~FileStore() {
  if (world_size_ <= 0)
    return;
  try {
    if (add(kFinishedKey, 1) >= world_size_)
      ::unlink(path_.c_str());
  } catch (const std::exception &) {
    // The file is gone or corrupt: nothing left to clean, and a destructor does not throw.
  }
}

void FileStore::set(const std::string &key, const std::vector<uint8_t> &value) {
  state_->locked(true, [&](const LockedFile &f) {
    state_->append(f, kSetRecord, {bytes_of(key), value});
    return 0;
  });
}

std::vector<uint8_t> FileStore::get(const std::string &key) {
  frame::check_keys({key}, "FileStore " + path_ + " get");
  std::vector<uint8_t> value;
  const bool found = state_->poll(timeout_, [&](const KeyValueTable &t) {
    const auto *v = t.find(key);
    if (v)
      value = *v;
    return v != nullptr;
  });
  if (!found)
    throw DistributedError(Kind::Timeout, "FileStore " + path_ + " get('" + key + "'): no rank set key '" + key +
                                              "' within " + std::to_string(timeout_.count()) + " ms");
  return value;
}

int64_t FileStore::add(const std::string &key, int64_t delta) {
  return state_->locked(true, [&](const LockedFile &f) {
    KeyValueTable after = state_->entry(key);
    const int64_t sum = after.add(key, delta, "FileStore " + path_); // throws before anything is written
    state_->append(f, kSetRecord, {bytes_of(key), *after.find(key)});
    return sum;
  });
}

std::vector<uint8_t> FileStore::compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                            const std::vector<uint8_t> &desired) {
  return state_->locked(true, [&](const LockedFile &f) {
    KeyValueTable after = state_->entry(key);
    bool changed;
    auto now = after.compare_set(key, expected, desired, &changed);
    if (changed)
      state_->append(f, kSetRecord, {bytes_of(key), now});
    return now;
  });
}

void FileStore::wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) {
  frame::check_keys(keys, "FileStore " + path_ + " wait");
  std::string missing;
  const bool all = state_->poll(timeout, [&](const KeyValueTable &t) {
    missing = t.missing(keys);
    return missing.empty();
  });
  if (!all)
    throw DistributedError(Kind::Timeout, "FileStore " + path_ + " wait([" + quote_keys(keys) + "]): keys [" + missing +
                                              "] not set within " + std::to_string(timeout.count()) + " ms");
}

bool FileStore::check(const std::vector<std::string> &keys) {
  frame::check_keys(keys, "FileStore " + path_ + " check");
  return state_->locked(false, [&](const LockedFile &) { return state_->table.has_all(keys); });
}

bool FileStore::delete_key(const std::string &key) {
  frame::check_keys({key}, "FileStore " + path_ + " delete_key");
  return state_->locked(true, [&](const LockedFile &f) {
    if (!state_->table.find(key))
      return false;
    state_->append(f, kDeleteRecord, {bytes_of(key)});
    return true;
  });
}

int64_t FileStore::num_keys() {
  return state_->locked(false, [&](const LockedFile &) { return state_->table.user_key_count(); });
}

} // namespace kiln::runtime::distributed
