// kilnrun (runtime/src/distributed/kilnrun): the environment of each worker,
// the rank prefixes, exit codes, stopping the others when one fails,
// SIGKILL after the grace period, restarts, bad arguments. Workers are
// small sh scripts.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace {

struct Result {
  int code;
  std::string output;
  double seconds;
};

/// Runs `kilnrun args` through sh with stderr in the output.
Result kilnrun(const std::string &args) {
  const auto t0 = std::chrono::steady_clock::now();
  FILE *p = ::popen((std::string(KILNRUN) + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t k; (k = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, k);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

/// True if `pid` exists and is not a zombie (a container's init may not reap).
bool running(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() || text[close + 2] != 'Z';
}

bool has(const Result &r, const std::string &s) { return r.output.find(s) != std::string::npos; }

TEST(Kilnrun, SetsTorchrunsEnvironmentAndPrefixesEachRanksLines) {
  auto r = kilnrun("--nproc-per-node 3 -- sh -c 'echo \"R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE LW=$LOCAL_WORLD_SIZE "
                   "G=$GROUP_RANK A=$MASTER_ADDR P=$MASTER_PORT\"; echo err >&2'");
  EXPECT_EQ(r.code, 0) << r.output;
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(has(r, "[rank " + std::to_string(k) + "]: R=" + std::to_string(k) + " L=" + std::to_string(k) +
                           " W=3 LW=3 G=0 A=127.0.0.1 P="))
        << r.output;
    EXPECT_TRUE(has(r, "[rank " + std::to_string(k) + "]: err")) << r.output;
  }
  EXPECT_TRUE(has(r, "kilnrun: 3 processes on node 0 of 1, master 127.0.0.1:")) << r.output;
}

TEST(Kilnrun, MultiNodeRanks) {
  auto r = kilnrun("--nproc-per-node=2 --nnodes=2 --node-rank=1 --master-addr=10.0.0.1 --master-port=29555 sh -c "
                   "'echo \"R=$RANK W=$WORLD_SIZE G=$GROUP_RANK P=$MASTER_PORT A=$MASTER_ADDR\"'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "[rank 2]: R=2 W=4 G=1 P=29555 A=10.0.0.1")) << r.output;
  EXPECT_TRUE(has(r, "[rank 3]: R=3 W=4 G=1 P=29555 A=10.0.0.1")) << r.output;
}

TEST(Kilnrun, AFailingRankStopsTheOthersAndItsCodeIsTheExitCode) {
  // Rank 1 fails at once; rank 0 would sleep a minute.
  auto r = kilnrun("--nproc-per-node 2 --grace-period-s 1 sh -c 'if [ $RANK = 1 ]; then exit 3; fi; sleep 60'");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_LT(r.seconds, 1 + 5.0) << r.output;
  EXPECT_TRUE(has(r, "kilnrun: failed: rank 1 exited with code 3")) << r.output;
}

TEST(Kilnrun, AWorkerIgnoringSigtermIsKilledAfterTheGracePeriodAndLeavesNoOrphan) {
  char dir[] = "/tmp/kilnrun-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string pidfile = std::string(dir) + "/pid";
  auto r = kilnrun("--nproc-per-node 2 --grace-period-s 1 sh -c 'if [ $RANK = 1 ]; then sleep 0.3; kill -9 $$; fi; "
                   "trap \"\" TERM; sleep 60 & echo $! > " + pidfile + "; wait'");
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.output;
  EXPECT_TRUE(has(r, "rank 1 (pid")) << r.output;
  EXPECT_TRUE(has(r, "was killed by signal 9")) << r.output;
  EXPECT_LT(r.seconds, 0.3 + 1 + 3.0) << r.output;
  std::ifstream f(pidfile);
  pid_t grandchild = 0;
  f >> grandchild;
  ASSERT_GT(grandchild, 0);
  ::usleep(100000);
  EXPECT_FALSE(running(grandchild)) << "the worker's child survived";
}

TEST(Kilnrun, RestartsTheGroupUpToMaxRestarts) {
  char dir[] = "/tmp/kilnrun-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string mark = std::string(dir) + "/failed-once";
  const std::string script = "sh -c 'if [ $RANK = 0 ] && [ ! -e " + mark + " ]; then touch " + mark +
                             "; exit 5; fi; echo run $KILN_RESTART_COUNT'";
  auto ok = kilnrun("--nproc-per-node 2 --max-restarts 1 " + script);
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_TRUE(has(ok, "[rank 1]: run 1")) << ok.output;
  ::unlink(mark.c_str());
  auto fail = kilnrun("--nproc-per-node 2 --max-restarts 0 " + script);
  EXPECT_EQ(fail.code, 5) << fail.output;
}

TEST(Kilnrun, ForwardsSigtermToTheWorkers) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(KILNRUN, KILNRUN, "--nproc-per-node", "2", "sleep", "60", static_cast<char *>(nullptr));
    ::_exit(99);
  }
  ::usleep(300000);
  ::kill(pid, SIGTERM);
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  ::waitpid(pid, &status, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(6));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
}

TEST(Kilnrun, BadArgumentsGiveUsageAndExitTwo) {
  for (const char *args : {"", "sh -c true", "--nproc-per-node 0 true", "--nproc-per-node 2", "--nnodes 2 --node-rank 2 --nproc-per-node 1 true",
                           "--nproc-per-node 1 --bogus 1 true"}) {
    auto r = kilnrun(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_TRUE(has(r, "usage: kilnrun")) << r.output;
  }
  auto missing = kilnrun("--nproc-per-node 1 /nonexistent/program");
  EXPECT_EQ(missing.code, 127) << missing.output;
  EXPECT_TRUE(has(missing, "cannot run /nonexistent/program")) << missing.output;
}

} // namespace
