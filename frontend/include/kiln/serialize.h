// kiln/serialize.h - saving and loading tensors and training checkpoints.
//
// Files are safetensors (https://github.com/huggingface/safetensors, the
// format `safetensors.torch.load_file` reads):
//
//   bytes [0, 8)        N, the header length, unsigned 64-bit little-endian
//   bytes [8, 8 + N)    UTF-8 JSON, padded with spaces to a multiple of 8:
//                       {"__metadata__": {"<key>": "<string>", ...},
//                        "<name>": {"dtype": "F32", "shape": [2, 3],
//                                   "data_offsets": [begin, end]}, ...}
//   bytes [8 + N, EOF)  the data section: every tensor's elements, row-major,
//                       little-endian, back to back in the order given to
//                       save(); offsets are bytes from the section's start.
//
// Dtypes: F32, F64, F16, BF16, I64, I32, BOOL (one byte, 0 or 1).
//
// Kiln adds two __metadata__ entries (plain strings, so any safetensors reader
// still works):
//   "kiln"            JSON {"format_version": 1, "data_crc32": <CRC-32 of the
//                     data section>, "header_crc32": <CRC-32 of the header
//                     JSON without the "kiln" entry, re-serialized compactly
//                     with sorted keys>}; CRC-32 is zlib's (IEEE 802.3).
//                     load() verifies both, so a flipped byte anywhere in the
//                     tensors or the other metadata is reported.
//   "kiln.checkpoint" (checkpoints only) epoch, step, RNG, optimizer and
//                     scheduler state and the user's JSON (see Checkpoint).
//
// Writes are atomic (write a temporary file in the target's directory, fsync,
// rename over the target, fsync the directory): a crash or error leaves the
// old file intact. Every error is a kiln::Error naming the file, what is
// wrong and what to do. tests/tools/read_safetensors.py is an independent
// reader of the format (Python, json + struct only).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/lr_scheduler.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/tensor.h"

namespace kiln {

/// Tensors by name, in order (as Module::state_dict()).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// The version of the "kiln" metadata that save() writes and load() accepts.
constexpr int kSerializeFormatVersion = 1;

/// What load() read from a safetensors file.
struct LoadedTensors {
  /// The tensors in data-section order (for Kiln files, the order of save()).
  /// Each is a fresh contiguous CPU tensor that owns its memory.
  NamedTensors tensors;
  /// The __metadata__ entries other than Kiln's own ("kiln", "kiln.*").
  std::map<std::string, std::string> metadata;
  /// The "kiln.checkpoint" JSON text ("" when the file has none).
  std::string checkpoint_json;
  /// True when the file had Kiln's "kiln" entry and both checksums matched;
  /// false for files written by other tools (nothing to verify).
  bool verified = false;

  /// The tensor named `name`. Throws kiln::Error listing the names present.
  const Tensor &at(const std::string &name) const;
  bool contains(const std::string &name) const;
};

/// Writes `tensors` (any dtype above, any layout: views are written as their
/// row-major elements; tensors on another device are copied to the host
/// first; undefined tensors are refused) and string `metadata`
/// to `path` as safetensors, atomically. Names must be unique and not
/// "__metadata__"; metadata keys "kiln" and "kiln.*" are reserved.
/// Throws kiln::Error (naming the file and the cause, e.g. the directory does
/// not exist or the disk is full); the previous content of `path` is then
/// unchanged and no temporary file is left behind.
void save(const std::string &path, const NamedTensors &tensors,
          const std::map<std::string, std::string> &metadata = {});

/// Reads a safetensors file; the tensors are read on the host and then placed
/// on `map_location` (as torch.load's map_location; a device without a
/// backend throws kiln::Error); dtypes are kept as stored. Throws kiln::Error naming the file and
/// the problem for: a missing/unreadable file, a file shorter than 8 bytes, a
/// header length beyond the file (truncated) or above 100 MB, invalid JSON or
/// a non-object header, a malformed entry, an unknown or unsupported dtype,
/// data_offsets that disagree with dtype x shape, overlap, leave gaps or run
/// past the end of the file, a metadata value that is not a string, a newer
/// format_version, or a checksum mismatch. Sizes are checked against the file
/// size before any tensor is allocated, so a corrupt length cannot cause a
/// huge allocation.
LoadedTensors load(const std::string &path, Device map_location = kCPU);

/// Checks a file as load() does (header, offsets, both checksums) without
/// building tensors; streams the data in 1 MiB chunks. Throws kiln::Error as
/// load(); a file without Kiln's "kiln" entry passes if its structure is valid.
/// Element values are not inspected (load() also rejects BOOL bytes other
/// than 0 and 1; in a Kiln file those fail the data checksum anyway).
void verify(const std::string &path);

// ---- training checkpoints ---------------------------------------------------------

/// The default generator's full state: Philox seed, offset (128-bit blocks
/// consumed) and how many 32-bit words of the current block are still
/// buffered (0-3; randn/uniform draw one word at a time), so that restoring it
/// replays exactly the numbers the saved run would have drawn next.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  int buffered = 0;

  /// The current state of kiln::default_generator().
  static RngState capture();
  /// Puts kiln::default_generator() into this state. Throws kiln::Error if
  /// buffered is outside [0, 3] or buffered > 0 with offset 0.
  void restore() const;
};

/// Everything needed to resume training. Written by save_checkpoint as
/// tensors "model.<key>" and "optimizer.<state key>" plus the JSON
/// "kiln.checkpoint" metadata entry.
struct Checkpoint {
  NamedTensors model;                                               ///< Module::state_dict()
  std::optional<optim::OptimizerStateDict> optimizer;               ///< Optimizer::state_dict()
  std::optional<optim::lr_scheduler::SchedulerStateDict> scheduler; ///< scheduler state_dict()
  int64_t epoch = 0;
  int64_t step = 0; ///< optimizer steps taken (global step)
  RngState rng;
  std::string user_metadata = "{}"; ///< any JSON value, stored verbatim (re-serialized)
};

/// A scheduler that checkpoints can save and restore: an LRScheduler (any
/// epoch scheduler), a ReduceLROnPlateau, or none (nullptr).
class SchedulerRef {
public:
  SchedulerRef(std::nullptr_t = nullptr) {}
  SchedulerRef(optim::lr_scheduler::LRScheduler *s) : epoch_(s) {}
  SchedulerRef(optim::lr_scheduler::ReduceLROnPlateau *s) : plateau_(s) {}
  bool has_value() const { return epoch_ || plateau_; }
  optim::lr_scheduler::SchedulerStateDict state_dict() const;
  void load_state_dict(const optim::lr_scheduler::SchedulerStateDict &dict) const;

private:
  optim::lr_scheduler::LRScheduler *epoch_ = nullptr;
  optim::lr_scheduler::ReduceLROnPlateau *plateau_ = nullptr;
};

/// Collects a Checkpoint from live objects (copies nothing but the optimizer
/// state; model tensors are the module's own storage until written).
/// `user_metadata` must be valid JSON (kiln::Error otherwise).
Checkpoint make_checkpoint(const nn::Module &model, const optim::Optimizer *optimizer, SchedulerRef scheduler,
                           int64_t epoch, int64_t step, const std::string &user_metadata = "{}");

/// Writes `ckpt` to `path` atomically (see save()). Throws kiln::Error as save().
void save_checkpoint(const std::string &path, const Checkpoint &ckpt);
/// Same as save_checkpoint(path, make_checkpoint(...)), RNG captured now.
void save_checkpoint(const std::string &path, const nn::Module &model, const optim::Optimizer *optimizer,
                     SchedulerRef scheduler, int64_t epoch, int64_t step, const std::string &user_metadata = "{}");

/// Reads a checkpoint written by save_checkpoint, applying nothing. Throws
/// kiln::Error as load(), and if the file has no "kiln.checkpoint" entry
/// (suggesting kiln::load for plain tensor files) or the entry is malformed.
Checkpoint read_checkpoint(const std::string &path);

/// What load_checkpoint applied.
struct CheckpointLoadResult {
  nn::Module::LoadResult model_keys; ///< missing/unexpected model keys (strict=false)
  bool optimizer_loaded = false;
  bool scheduler_loaded = false;
  int64_t epoch = 0, step = 0;
  std::string user_metadata; ///< the saved user JSON
};

/// Restores a checkpoint into live objects: the model's parameters and
/// buffers (Module::load_state_dict with `strict`), the optimizer's
/// hyperparameters and state (if `optimizer`), the scheduler (if given), and
/// (if restore_rng) the default generator, so continuing gives bit-identical
/// results. With strict, a checkpoint lacking optimizer/scheduler state that
/// was asked for throws; without, those are skipped and reported as not loaded.
/// All-or-nothing: if any part fails (kiln::Error naming the file and part),
/// model and optimizer are rolled back and the RNG is untouched.
CheckpointLoadResult load_checkpoint(const std::string &path, nn::Module &model, optim::Optimizer *optimizer,
                                     SchedulerRef scheduler = nullptr, bool strict = true, bool restore_rng = true);

/// Keeps the newest `keep_last` checkpoints of one run in `dir` as
/// "ckpt-<step>.safetensors" (step in decimal, no padding). Other files in
/// the directory are never touched, except the temporary files
/// (".ckpt-<step>.safetensors.tmp-<pid>-<n>") of writers that were killed
/// mid-write, which the constructor removes once their process is gone.
/// Crash safety (tests/frontend/checkpoint_crash_test.cpp kills a saving
/// process 50 times): a ckpt-<step> file is always complete, and latest()
/// after a crash finds the newest save that returned.
class CheckpointManager {
public:
  /// Creates `dir` (and parents) if needed and removes orphaned temporary
  /// files (above). Throws kiln::Error if keep_last < 1 or the directory
  /// cannot be created.
  explicit CheckpointManager(std::string dir, int keep_last = 3);

  /// Writes `ckpt` as ckpt-<step>.safetensors atomically (replacing one of
  /// the same step), then deletes the oldest checkpoints older than `step`
  /// so that keep_last remain counting the new one. The new file is never
  /// deleted, and files of steps above `step` (left by an earlier run) are
  /// kept and not counted. Returns the path. Throws kiln::Error if step < 0
  /// or the write fails (nothing is deleted then).
  std::string save(int64_t step, const Checkpoint &ckpt);
  /// Same with make_checkpoint(model, optimizer, scheduler, epoch, step, user_metadata).
  std::string save(int64_t step, const nn::Module &model, const optim::Optimizer *optimizer, SchedulerRef scheduler,
                   int64_t epoch, const std::string &user_metadata = "{}");
  /// The path of the newest checkpoint that passes verify() (a corrupt or
  /// truncated newest file is skipped); nullopt if there is none.
  std::optional<std::string> latest() const;
  /// Paths of all ckpt-<step>.safetensors in `dir`, oldest step first
  /// (unverified).
  std::vector<std::string> list() const;
  /// dir/ckpt-<step>.safetensors.
  std::string path_for(int64_t step) const;
  const std::string &dir() const { return dir_; }
  int keep_last() const { return keep_last_; }

private:
  std::vector<std::pair<int64_t, std::string>> entries() const;
  void remove_orphaned_temp_files() const;
  std::string dir_;
  int keep_last_;
};

namespace detail {
/// Test hook: called by every atomic write at the stages "open", "write",
/// "fsync", "rename" (before each happens); if it throws, the write fails as
/// a real I/O error at that stage would. Pass nullptr to remove.
void set_save_fault_hook(std::function<void(const std::string &stage)> hook);
/// save() without the reserved-key check (checkpoints write "kiln.checkpoint").
void save_with_kiln_metadata(const std::string &path, const NamedTensors &tensors,
                             const std::map<std::string, std::string> &metadata);
} // namespace detail

} // namespace kiln
