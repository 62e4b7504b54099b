// kiln/runtime/distributed/FileStore.h - a store in one file that every rank
// can open (c10d's FileStore, torch.distributed.FileStore): a local disk for
// the processes of one node, a shared file system across nodes.
//
// The file is an append-only log of records (set key to value, delete key),
// each a StoreFrame frame: a magic number, a version, the body's length and
// bounded fields (kMaxKeyBytes, kMaxValueBytes). Every operation opens the
// file, takes flock() (shared to read, exclusive to write), replays the
// records it has not seen yet into its own table, and appends at most one.
// get() and wait() poll the file every kFileStorePollPause until the keys
// appear or the timeout passes.
//
// Example (every rank):
//   FileStore store("/shared/job42.store", world_size);
//   store.set_timeout(std::chrono::seconds(60));
//   store.set("rank" + std::to_string(rank), address);
//   store.wait({"rank0", "rank1"});
#pragma once

#include <memory>
#include <string>

#include "kiln/runtime/distributed/Store.h"

namespace kiln::runtime::distributed {

/// How long get() and wait() sleep between two reads of the file.
constexpr std::chrono::milliseconds kFileStorePollPause{10};

/// Thread-safe (one operation at a time per FileStore; processes and other
/// FileStore objects exclude each other through flock()).
///
/// Throws DistributedError: Invalid when the file cannot be opened, locked
/// or written (naming the path and the system's reason), for a key or value
/// over its bound, and when add() meets a value that is not an integer;
/// Timeout from get()/wait() naming the keys still missing; Protocol when
/// the file holds a truncated or corrupt record, or shrank (naming the path
/// and the byte offset).
class FileStore final : public Store {
public:
  /// `path` is created when absent. With `world_size` > 0 the last of
  /// `world_size` FileStores to be destroyed (across all ranks) removes the
  /// file, as c10d's does; with -1 the file stays.
  explicit FileStore(std::string path, int world_size = -1);
  ~FileStore() override;
  const std::string &path() const { return path_; }

  void set(const std::string &key, const std::vector<uint8_t> &value) override;
  std::vector<uint8_t> get(const std::string &key) override;
  int64_t add(const std::string &key, int64_t delta) override;
  std::vector<uint8_t> compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                   const std::vector<uint8_t> &desired) override;
  void wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string> &keys) override;
  bool delete_key(const std::string &key) override;
  int64_t num_keys() override;
  using Store::set;
  using Store::wait;

private:
  struct State;
  std::string path_;
  int world_size_;
  std::unique_ptr<State> state_;
};

} // namespace kiln::runtime::distributed
