// Training checkpoints on top of kiln::save/load: the RNG state, the
// Checkpoint record and its "kiln.checkpoint" JSON, load_checkpoint (with
// rollback), and CheckpointManager's rotation.
//
// A checkpoint file holds tensors "model.<state_dict key>" and
// "optimizer.<OptimizerStateDict state key>" and the metadata entry
// "kiln.checkpoint" = {"epoch", "step", "rng": {"seed", "offset", "buffered"},
// "optimizer": OptimizerStateDict JSON or null, "scheduler":
// SchedulerStateDict JSON or null, "user": the user's JSON}.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <csignal>
#include <filesystem>
#include <system_error>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kiln/random.h"
#include "kiln/serialize.h"
#include "serialize/json_depth.h"

namespace kiln {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kModelPrefix = "model.";
const std::string kOptimizerPrefix = "optimizer.";

bool starts_with(const std::string &s, const std::string &prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

json parse_user_json(const std::string &text, const char *where) {
  try {
    // One level less: it is stored as the "user" value of kiln.checkpoint.
    return serialize::parse_json_limited(text, serialize::kMaxJsonDepth - 1);
  } catch (const std::exception &e) {
    throw Error(std::string(where) + ": user_metadata must be valid JSON (e.g. \"{}\"), got '" + text +
                "': " + e.what());
  }
}

json checkpoint_json(const Checkpoint &ckpt) {
  json j;
  j["epoch"] = ckpt.epoch;
  j["step"] = ckpt.step;
  j["rng"] = {{"seed", ckpt.rng.seed}, {"offset", ckpt.rng.offset}, {"buffered", ckpt.rng.buffered}};
  j["optimizer"] = ckpt.optimizer ? json::parse(ckpt.optimizer->to_json()) : json(nullptr);
  j["scheduler"] = ckpt.scheduler ? json::parse(ckpt.scheduler->to_json()) : json(nullptr);
  j["user"] = parse_user_json(ckpt.user_metadata, "save_checkpoint");
  return j;
}

/// Throws kiln::Error (prefixed by `where`) unless RngState::restore accepts `s`.
void check_rng_state(const RngState &s, const std::string &where) {
  KILN_CHECK(s.buffered >= 0 && s.buffered <= 3 && (s.buffered == 0 || s.offset > 0), where,
             ": invalid RNG state (offset ", s.offset, ", buffered ", s.buffered,
             "); expected buffered in [0, 3] and offset > 0 when buffered > 0");
}

/// j[key] as an integer in [lo, hi]; throws kiln::Error naming the field and
/// the value otherwise (a float or an out-of-range number is never cast).
int64_t integer_field(const json &j, const char *key, int64_t lo, int64_t hi) {
  const json &v = j.at(key);
  bool fits = v.is_number_integer(); // non-negative numbers parse as unsigned: compare them as such
  if (fits && v.is_number_unsigned())
    fits = v.get<uint64_t>() <= static_cast<uint64_t>(hi) && (lo <= 0 || v.get<uint64_t>() >= static_cast<uint64_t>(lo));
  else if (fits)
    fits = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  KILN_CHECK(fits, "'", key, "' is ", v.dump(), "; expected an integer in [", lo, ", ", hi, "]");
  return v.get<int64_t>();
}

/// j[key] as an unsigned 64-bit integer; throws kiln::Error otherwise.
uint64_t unsigned_field(const json &j, const char *key) {
  const json &v = j.at(key);
  KILN_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), "'", key, "' is ",
             v.dump(), "; expected a non-negative integer");
  return v.get<uint64_t>();
}

/// Fills everything but the tensors from the "kiln.checkpoint" JSON. Checks
/// every value load_checkpoint applies (the RNG state too), so that a bad
/// file fails before anything is restored.
void parse_checkpoint_json(const std::string &path, const std::string &text,
                           std::map<std::string, Tensor> optimizer_state, Checkpoint &ckpt) {
  try {
    json j = serialize::parse_json_limited(text);
    ckpt.epoch = integer_field(j, "epoch", INT64_MIN, INT64_MAX);
    ckpt.step = integer_field(j, "step", INT64_MIN, INT64_MAX);
    const json &rng = j.at("rng");
    ckpt.rng.seed = unsigned_field(rng, "seed");
    ckpt.rng.offset = unsigned_field(rng, "offset");
    ckpt.rng.buffered = static_cast<int>(integer_field(rng, "buffered", 0, 3));
    check_rng_state(ckpt.rng, "rng");
    if (!j.at("optimizer").is_null())
      ckpt.optimizer = optim::OptimizerStateDict::from_json(j["optimizer"].dump(), std::move(optimizer_state));
    if (!j.at("scheduler").is_null())
      ckpt.scheduler = optim::lr_scheduler::SchedulerStateDict::from_json(j["scheduler"].dump());
    ckpt.user_metadata = j.at("user").dump();
  } catch (const std::exception &e) {
    throw Error("read_checkpoint: '" + path + "' has a malformed kiln.checkpoint entry: " + e.what() +
                ". The file was not written by save_checkpoint or is damaged; use an older checkpoint");
  }
}

/// Deep copies of a module's parameters and buffers (for rollback).
NamedTensors snapshot(const nn::Module &model) {
  NamedTensors out;
  for (const auto &[name, t] : model.state_dict())
    out.emplace_back(name, t.clone());
  return out;
}

/// "ckpt-<digits>.safetensors" -> step; -1 for any other name.
int64_t step_of_file_name(const std::string &name) {
  const std::string prefix = "ckpt-", suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size() || !starts_with(name, prefix) ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(c); }))
    return -1;
  const int64_t step = std::stoll(digits);
  return std::to_string(step) == digits ? step : -1; // only the names path_for writes ("ckpt-7", not "ckpt-007")
}

/// The writer's pid if `name` is a temporary file AtomicFileWriter makes for
/// a checkpoint (".ckpt-<step>.safetensors.tmp-<pid>-<n>"), else -1.
long writer_pid_of_temp_name(const std::string &name) {
  const std::string suffix = ".safetensors", tmp = ".tmp-";
  const size_t at = name.find(suffix + tmp);
  if (name.empty() || name[0] != '.' || at == std::string::npos)
    return -1;
  const std::string checkpoint_name = name.substr(1, at + suffix.size() - 1); // "ckpt-<step>.safetensors"
  if (step_of_file_name(checkpoint_name) < 0)
    return -1;
  const std::string rest = name.substr(at + suffix.size() + tmp.size()); // "<pid>-<n>"
  const size_t dash = rest.find('-');
  if (dash == std::string::npos || dash == 0 || dash > 9 ||
      !std::all_of(rest.begin(), rest.begin() + dash, [](char c) { return std::isdigit(c); }))
    return -1;
  return std::stol(rest.substr(0, dash));
}

/// True if no process `pid` exists (so its temporary files are orphans).
bool process_is_gone(long pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

} // namespace

// ---- RNG --------------------------------------------------------------------------------

RngState RngState::capture() {
  // Generator does not expose how many words of its current block are left,
  // so count them on a copy: draws that do not advance the offset were buffered.
  Generator probe = default_generator();
  RngState s{probe.seed(), probe.offset(), 0};
  while (s.buffered < 4) {
    probe.next_uniform();
    if (probe.offset() != s.offset)
      break;
    ++s.buffered;
  }
  return s;
}

void RngState::restore() const {
  check_rng_state(*this, "RngState::restore");
  Generator &g = default_generator();
  g.manual_seed(seed);
  if (buffered == 0) {
    g.set_offset(offset);
    return;
  }
  // Regenerate the partly used block and consume the words already drawn.
  g.set_offset(offset - 1);
  for (int i = 0; i < 4 - buffered; ++i)
    g.next_uniform();
}

// ---- SchedulerRef -------------------------------------------------------------------------

optim::lr_scheduler::SchedulerStateDict SchedulerRef::state_dict() const {
  KILN_CHECK(has_value(), "SchedulerRef::state_dict: no scheduler");
  return epoch_ ? epoch_->state_dict() : plateau_->state_dict();
}

void SchedulerRef::load_state_dict(const optim::lr_scheduler::SchedulerStateDict &dict) const {
  KILN_CHECK(has_value(), "SchedulerRef::load_state_dict: no scheduler");
  if (epoch_)
    epoch_->load_state_dict(dict);
  else
    plateau_->load_state_dict(dict);
}

// ---- save / read ----------------------------------------------------------------------------

Checkpoint make_checkpoint(const nn::Module &model, const optim::Optimizer *optimizer, SchedulerRef scheduler,
                           int64_t epoch, int64_t step, const std::string &user_metadata) {
  parse_user_json(user_metadata, "make_checkpoint");
  Checkpoint ckpt;
  ckpt.model = model.state_dict();
  if (optimizer)
    ckpt.optimizer = optimizer->state_dict();
  if (scheduler.has_value())
    ckpt.scheduler = scheduler.state_dict();
  ckpt.epoch = epoch;
  ckpt.step = step;
  ckpt.rng = RngState::capture();
  ckpt.user_metadata = user_metadata;
  return ckpt;
}

void save_checkpoint(const std::string &path, const Checkpoint &ckpt) {
  NamedTensors tensors;
  for (const auto &[name, t] : ckpt.model)
    tensors.emplace_back(kModelPrefix + name, t);
  if (ckpt.optimizer)
    for (const auto &[name, t] : ckpt.optimizer->state)
      tensors.emplace_back(kOptimizerPrefix + name, t);
  detail::save_with_kiln_metadata(path, tensors, {{"kiln.checkpoint", checkpoint_json(ckpt).dump()}});
}

void save_checkpoint(const std::string &path, const nn::Module &model, const optim::Optimizer *optimizer,
                     SchedulerRef scheduler, int64_t epoch, int64_t step, const std::string &user_metadata) {
  save_checkpoint(path, make_checkpoint(model, optimizer, scheduler, epoch, step, user_metadata));
}

Checkpoint read_checkpoint(const std::string &path) {
  LoadedTensors file = load(path);
  KILN_CHECK(!file.checkpoint_json.empty(), "read_checkpoint: '", path,
             "' has no kiln.checkpoint metadata: it is a plain tensor file, not a training checkpoint. Read it with "
             "kiln::load and Module::load_state_dict");
  Checkpoint ckpt;
  std::map<std::string, Tensor> optimizer_state;
  for (auto &[name, t] : file.tensors) {
    if (starts_with(name, kModelPrefix))
      ckpt.model.emplace_back(name.substr(kModelPrefix.size()), t);
    else if (starts_with(name, kOptimizerPrefix))
      optimizer_state[name.substr(kOptimizerPrefix.size())] = t;
  }
  parse_checkpoint_json(path, file.checkpoint_json, std::move(optimizer_state), ckpt);
  return ckpt;
}

CheckpointLoadResult load_checkpoint(const std::string &path, nn::Module &model, optim::Optimizer *optimizer,
                                     SchedulerRef scheduler, bool strict, bool restore_rng) {
  Checkpoint ckpt = read_checkpoint(path);
  const std::string where = "load_checkpoint: '" + path + "'";
  KILN_CHECK(!strict || !optimizer || ckpt.optimizer, where,
             " holds no optimizer state; pass optimizer = nullptr or strict = false to load without it");
  KILN_CHECK(!strict || !scheduler.has_value() || ckpt.scheduler, where,
             " holds no scheduler state; pass no scheduler or strict = false to load without it");
  const NamedTensors model_backup = snapshot(model);
  std::optional<optim::OptimizerStateDict> optimizer_backup;
  if (optimizer)
    optimizer_backup = optimizer->state_dict();
  std::optional<optim::lr_scheduler::SchedulerStateDict> scheduler_backup;
  if (scheduler.has_value())
    scheduler_backup = scheduler.state_dict();

  CheckpointLoadResult result;
  const char *part = "model";
  try {
    result.model_keys = model.load_state_dict(ckpt.model, strict);
    part = "optimizer";
    if (optimizer && ckpt.optimizer) {
      optimizer->load_state_dict(*ckpt.optimizer);
      result.optimizer_loaded = true;
    }
    part = "scheduler";
    if (scheduler.has_value() && ckpt.scheduler) {
      scheduler.load_state_dict(*ckpt.scheduler);
      result.scheduler_loaded = true;
    }
  } catch (const Error &e) {
    model.load_state_dict(model_backup, false);
    if (optimizer_backup)
      optimizer->load_state_dict(*optimizer_backup);
    if (scheduler_backup)
      scheduler.load_state_dict(*scheduler_backup);
    throw Error(where + ": restoring the " + part + " failed, nothing was changed: " + e.what());
  }
  if (restore_rng)
    ckpt.rng.restore();
  result.epoch = ckpt.epoch;
  result.step = ckpt.step;
  result.user_metadata = ckpt.user_metadata;
  return result;
}

// ---- CheckpointManager --------------------------------------------------------------------

CheckpointManager::CheckpointManager(std::string dir, int keep_last) : dir_(std::move(dir)), keep_last_(keep_last) {
  KILN_CHECK(keep_last >= 1, "CheckpointManager: keep_last must be at least 1, got ", keep_last);
  KILN_CHECK(!dir_.empty(), "CheckpointManager: the directory is empty; pass a directory path");
  while (dir_.size() > 1 && dir_.back() == '/')
    dir_.pop_back();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  KILN_CHECK(!ec && fs::is_directory(dir_), "CheckpointManager: cannot create directory '", dir_,
             "': ", ec ? ec.message() : std::string("a file of that name exists"), ". Pass a writable directory");
  remove_orphaned_temp_files();
}

void CheckpointManager::remove_orphaned_temp_files() const {
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const long pid = writer_pid_of_temp_name(it->path().filename().string());
    if (pid > 0 && pid != static_cast<long>(::getpid()) && process_is_gone(pid)) {
      std::error_code ignored; // best effort, like rotation
      fs::remove(it->path(), ignored);
    }
  }
}

std::string CheckpointManager::path_for(int64_t step) const {
  return dir_ + "/ckpt-" + std::to_string(step) + ".safetensors";
}

std::vector<std::pair<int64_t, std::string>> CheckpointManager::entries() const {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    int64_t step = step_of_file_name(it->path().filename().string());
    if (step >= 0)
      out.emplace_back(step, path_for(step));
  }
  KILN_CHECK(!ec, "CheckpointManager: cannot list '", dir_, "': ", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> CheckpointManager::list() const {
  std::vector<std::string> out;
  for (auto &e : entries())
    out.push_back(e.second);
  return out;
}

std::string CheckpointManager::save(int64_t step, const Checkpoint &ckpt) {
  KILN_CHECK(step >= 0, "CheckpointManager::save: step must be non-negative, got ", step);
  const std::string path = path_for(step);
  save_checkpoint(path, ckpt);
  // Rotation counts only the checkpoints older than this one: the new file
  // (complete and synced) is never deleted, and newer ones left by an earlier
  // run (damaged, or the user resumed from an older step) do not push it out.
  std::vector<std::pair<int64_t, std::string>> older;
  for (auto &entry : entries())
    if (entry.first < step)
      older.push_back(std::move(entry));
  // Deleting is best effort: the new checkpoint is already safely written.
  for (size_t i = 0; i + static_cast<size_t>(keep_last_ - 1) < older.size(); ++i) {
    std::error_code ec;
    fs::remove(older[i].second, ec);
  }
  return path;
}

std::string CheckpointManager::save(int64_t step, const nn::Module &model, const optim::Optimizer *optimizer,
                                    SchedulerRef scheduler, int64_t epoch, const std::string &user_metadata) {
  return save(step, make_checkpoint(model, optimizer, scheduler, epoch, step, user_metadata));
}

std::optional<std::string> CheckpointManager::latest() const {
  auto all = entries();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      verify(it->second);
      return it->second;
    } catch (const Error &) {
      // A damaged or half-copied newest file: fall back to the previous one.
    }
  }
  return std::nullopt;
}

} // namespace kiln
