// Crash safety of CheckpointManager (issue 11): a forked process saves
// checkpoints in a loop and is SIGKILLed at random moments, 50 times. After
// each kill: the newest checkpoint whose save() returned (reported through a
// pipe) or a newer one is what latest() finds, and it loads with the values
// that step wrote; every ckpt-<step> file in the directory is complete (a
// half-written file never appears under a checkpoint's name); rotation kept
// the last good one (at most keep_last + 1 files after a returned save); and
// the next CheckpointManager removes the temporary
// files the killed writer left. Expected values are the step numbers the
// child wrote (marker tensor = step, big tensor = 1.0), not read back from
// Kiln.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/serialize.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr int kKills = 50;
constexpr int kKeepLast = 2;
constexpr int64_t kBigElements = 1 << 18; // 1 MiB per checkpoint, so a kill often lands mid-write

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/kiln-crash-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

/// The checkpoint of `step`: {"big": 1.0 x kBigElements, "marker": [step]}.
Checkpoint checkpoint_for(int64_t step, const Tensor &big) {
  Tensor marker = Tensor::empty({1}, kFloat32);
  marker.data_ptr<float>()[0] = static_cast<float>(step);
  Checkpoint ckpt;
  ckpt.model = {{"big", big}, {"marker", marker}};
  ckpt.step = step;
  ckpt.epoch = step / 10;
  return ckpt;
}

/// The child: resume from latest() like a restarted run, then save forever,
/// writing each step to `report_fd` after save() returns. Never returns.
[[noreturn]] void save_until_killed(const std::string &dir, const Tensor &big, int report_fd) {
  try {
    CheckpointManager mgr(dir, kKeepLast);
    std::optional<std::string> latest = mgr.latest();
    int64_t step = latest ? read_checkpoint(*latest).step + 1 : 1;
    for (;; ++step) {
      mgr.save(step, checkpoint_for(step, big));
      if (::write(report_fd, &step, sizeof step) != sizeof step)
        ::_exit(4);
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "child: %s\n", e.what());
    ::_exit(3);
  }
}

/// The last step the child reported as saved, or `previous` if none.
int64_t read_reports(int fd, int64_t previous) {
  int64_t step = 0;
  while (::read(fd, &step, sizeof step) == sizeof step)
    previous = std::max(previous, step);
  return previous;
}

/// Checks one checkpoint file against what step `step` wrote.
void expect_checkpoint_of_step(const std::string &path, int64_t step) {
  ASSERT_NO_THROW(verify(path)) << path;
  Checkpoint ckpt = read_checkpoint(path);
  EXPECT_EQ(ckpt.step, step) << path;
  ASSERT_EQ(ckpt.model.size(), 2u) << path;
  EXPECT_EQ(ckpt.model[1].second.item(), static_cast<double>(step)) << path;
  const Tensor &big = ckpt.model[0].second;
  ASSERT_EQ(big.numel(), kBigElements) << path;
  const float *p = big.data_ptr<float>();
  EXPECT_TRUE(std::all_of(p, p + kBigElements, [](float v) { return v == 1.0f; })) << path;
}

int64_t step_of(const std::string &path) {
  const std::string name = fs::path(path).filename().string(); // ckpt-<step>.safetensors
  return std::stoll(name.substr(5, name.size() - 5 - 12));
}

/// Microseconds one save of checkpoint_for() takes here (disks differ a lot:
/// the kill delays are drawn in units of it).
int measure_save_us(const Tensor &big) {
  TempDir scratch;
  CheckpointManager mgr(scratch.path, kKeepLast);
  const auto start = std::chrono::steady_clock::now();
  mgr.save(1, checkpoint_for(1, big));
  const auto took = std::chrono::steady_clock::now() - start;
  return static_cast<int>(std::chrono::duration_cast<std::chrono::microseconds>(took).count()) + 1;
}

int count_temp_files(const std::string &dir) {
  int n = 0;
  for (const auto &e : fs::directory_iterator(dir))
    n += e.path().filename().string().rfind(".ckpt-", 0) == 0;
  return n;
}

TEST(CheckpointCrash, SigkillWhileSavingNeverLosesTheLastGoodCheckpoint) {
  TempDir dir;
  const Tensor big = ones({kBigElements});
  std::mt19937 rng(20251101);
  // Up to ~4 saves per round (the child first resumes: about one read).
  const int save_us = measure_save_us(big);
  std::uniform_int_distribution<int> delay_us(0, 5 * save_us);
  int64_t last_saved = 0;
  int kills_mid_write = 0;
  size_t files_before = 0;
  for (int round = 0; round < kKills; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      save_until_killed(dir.path, big, fds[1]);
    }
    ::close(fds[1]);
    ::usleep(static_cast<useconds_t>(delay_us(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saving child exited by itself (code "
                                     << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << ") in round " << round;
    const int64_t saved_before = last_saved;
    last_saved = read_reports(fds[0], last_saved);
    ::close(fds[0]);
    kills_mid_write += count_temp_files(dir.path) > 0;

    CheckpointManager mgr(dir.path, kKeepLast); // what the restarted run does first
    EXPECT_EQ(count_temp_files(dir.path), 0) << "round " << round << ": a killed writer's temp file was left";
    const std::vector<std::string> files = mgr.list();
    // A save() that returned rotated; one more may have renamed its file and
    // been killed before rotating. Without a returned save, at most one file
    // was added since the last round.
    const size_t allowed = last_saved > saved_before ? kKeepLast + 1 : files_before + 1;
    EXPECT_LE(files.size(), allowed) << "round " << round;
    files_before = files.size();
    for (const std::string &f : files)
      expect_checkpoint_of_step(f, step_of(f));
    const std::optional<std::string> latest = mgr.latest();
    if (last_saved == 0)
      continue; // killed before the first save returned
    ASSERT_TRUE(latest.has_value()) << "round " << round << ": step " << last_saved << " was saved";
    EXPECT_GE(step_of(*latest), last_saved) << "round " << round;
    EXPECT_NO_THROW(read_checkpoint(*latest)) << *latest; // its contents were checked above
  }
  std::printf("CheckpointCrash: %d kills (one save takes %d us), %d of them mid-write, %lld steps saved\n", kKills,
              save_us, kills_mid_write, static_cast<long long>(last_saved));
  EXPECT_GT(last_saved, 0) << "no save ever completed: the kill delays are too short to test anything";
}

TEST(CheckpointCrash, RotationNeverDeletesTheNewCheckpoint) {
  TempDir dir;
  CheckpointManager mgr(dir.path, /*keep_last=*/1);
  const Tensor small = ones({4});
  mgr.save(10, checkpoint_for(10, small));
  mgr.save(20, checkpoint_for(20, small));
  EXPECT_EQ(mgr.list(), std::vector<std::string>{mgr.path_for(20)});
  // A damaged newer file from an earlier run: the run resumed from step 20.
  std::ofstream(mgr.path_for(30)) << "not a checkpoint";
  ASSERT_EQ(mgr.latest(), mgr.path_for(20));
  mgr.save(21, checkpoint_for(21, small));
  EXPECT_EQ(mgr.list(), (std::vector<std::string>{mgr.path_for(21), mgr.path_for(30)}));
  EXPECT_EQ(mgr.latest(), mgr.path_for(21));
}

TEST(CheckpointCrash, OnlyOrphanedTempFilesOfCheckpointsAreRemoved) {
  TempDir dir;
  const pid_t gone = ::fork();
  if (gone == 0)
    ::_exit(0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  const std::string dead = ".ckpt-5.safetensors.tmp-" + std::to_string(gone) + "-0";
  const std::string mine = ".ckpt-6.safetensors.tmp-" + std::to_string(::getpid()) + "-0";
  const std::string other = ".notes.txt.tmp-" + std::to_string(gone) + "-0";
  for (const std::string &name : {dead, mine, other})
    std::ofstream(dir.path + "/" + name) << "partial";
  CheckpointManager mgr(dir.path);
  EXPECT_FALSE(fs::exists(dir.path + "/" + dead));
  EXPECT_TRUE(fs::exists(dir.path + "/" + mine));  // this process may still be writing it
  EXPECT_TRUE(fs::exists(dir.path + "/" + other)); // not a checkpoint's
}

} // namespace
} // namespace kiln
