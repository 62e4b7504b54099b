// kilnrun (runtime/src/distributed/kilnrun): the argument parser and helpers
// in process, and the supervisor by running the kilnrun executable over
// kilnrun-test-worker (kilnrun_test_worker.cpp) with its output captured.
#include "Launcher.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kr = kiln::runtime::distributed::kilnrun;

namespace {

using Clock = std::chrono::steady_clock;
using Strings = std::vector<std::string>;

const std::string kKilnrun = KILNRUN_PATH;
const std::string kWorker = KILNRUN_TEST_WORKER;

std::string read_file(const std::string &path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A fresh folder for one test's files (pid files, flags, captured output).
class TempDir {
public:
  TempDir() {
    char pattern[] = "/tmp/kiln-kilnrun-tests-XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

/// Whether `pid` is a process that has not exited: kill(pid, 0) works and
/// it is not a zombie (an orphan killed with its group waits for PID 1,
/// which in a container may never reap it).
bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0)
    return false;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  std::size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

bool gone_within(pid_t pid, std::chrono::milliseconds limit) {
  Clock::time_point end = Clock::now() + limit;
  while (process_alive(pid)) {
    if (Clock::now() > end)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

pid_t read_pid(const std::string &path) { return static_cast<pid_t>(std::atoi(read_file(path).c_str())); }

bool wait_for_file(const std::string &path, std::chrono::milliseconds limit) {
  Clock::time_point end = Clock::now() + limit;
  struct stat st {};
  while (::stat(path.c_str(), &st) != 0) {
    if (Clock::now() > end)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// kilnrun started as a child, stdout and stderr captured in files.
class Kilnrun {
public:
  Kilnrun(const Strings &args, const TempDir &dir)
      : out_path_(dir.path() + "/stdout"), err_path_(dir.path() + "/stderr"), start_(Clock::now()) {
    Strings argv = {kKilnrun};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, STDOUT_FILENO);
      ::dup2(err, STDERR_FILENO);
      std::vector<char *> c;
      for (std::string &a : argv)
        c.push_back(a.data());
      c.push_back(nullptr);
      ::execv(c[0], c.data());
      ::_exit(120);
    }
  }

  /// Waits for kilnrun (SIGKILLs it after `limit`); returns its exit code,
  /// 128 + signal if a signal ended it, -1 on timeout.
  int wait(std::chrono::seconds limit = std::chrono::seconds(20)) {
    Clock::time_point end = Clock::now() + limit;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > end) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    elapsed_ = std::chrono::duration<double>(Clock::now() - start_).count();
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  pid_t pid() const { return pid_; }
  double elapsed_s() const { return elapsed_; }
  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }

private:
  std::string out_path_, err_path_;
  Clock::time_point start_;
  pid_t pid_ = -1;
  double elapsed_ = 0;
};

/// kilnrun ARGS... kilnrun-test-worker WORKER_ARGS..., run to the end.
struct Finished {
  int code;
  double elapsed_s;
  std::string out, err;
};

Finished run_kilnrun(const TempDir &dir, Strings args, const Strings &worker_args) {
  args.push_back(kWorker);
  args.insert(args.end(), worker_args.begin(), worker_args.end());
  Kilnrun k(args, dir);
  int code = k.wait();
  return Finished{code, k.elapsed_s(), k.out(), k.err()};
}

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

// ---- arguments and helpers, in process ------------------------------------

TEST(KilnrunArgs, DefaultsAndBothOptionForms) {
  kr::ParsedArguments p = kr::parse_arguments({"--nproc-per-node", "2", "--max-restarts=3", "prog", "--nnodes", "x"});
  ASSERT_TRUE(p.error.empty()) << p.error;
  const kr::LaunchConfig &c = *p.config;
  EXPECT_EQ(c.nproc_per_node, 2);
  EXPECT_EQ(c.nnodes, 1);
  EXPECT_EQ(c.node_rank, 0);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_GT(c.master_port, 0); // a free port, chosen for one node
  EXPECT_EQ(c.max_restarts, 3);
  EXPECT_DOUBLE_EQ(c.grace_period_s, 5.0);
  EXPECT_EQ(c.program, (Strings{"prog", "--nnodes", "x"})); // the program's own arguments stay its own
}

TEST(KilnrunArgs, MultiNodeUsesTorchrunPortAndUnderscores) {
  kr::ParsedArguments p =
      kr::parse_arguments({"--nproc_per_node=4", "--nnodes=2", "--node_rank", "1", "--master-addr", "10.1.2.3",
                           "--grace-period-s=0.5", "--", "--prog-starting-with-dashes"});
  ASSERT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.config->master_port, kr::kDefaultMasterPort);
  EXPECT_EQ(p.config->node_rank, 1);
  EXPECT_EQ(p.config->master_addr, "10.1.2.3");
  EXPECT_DOUBLE_EQ(p.config->grace_period_s, 0.5);
  EXPECT_EQ(p.config->world_size(), 8);
  EXPECT_EQ(p.config->global_rank(3), 7);
  EXPECT_EQ(p.config->program, (Strings{"--prog-starting-with-dashes"}));
}

TEST(KilnrunArgs, ErrorsNameTheProblem) {
  struct Case {
    Strings args;
    std::string error;
  };
  const Case cases[] = {
      {{"prog"}, "missing --nproc-per-node"},
      {{"--nproc-per-node", "0", "prog"}, "--nproc-per-node 0: expected an integer >= 1"},
      {{"--nproc-per-node", "-1", "prog"}, "--nproc-per-node -1: expected an integer >= 1"},
      {{"--nproc-per-node", "2x", "prog"}, "--nproc-per-node 2x: expected an integer >= 1"},
      {{"--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "2", "prog"}, "--node-rank 2 must be < --nnodes 2"},
      {{"--nproc-per-node", "1"}, "no program to run"},
      {{"--nproc-per-node"}, "--nproc-per-node: missing value"},
      {{"--nproc-per-node", "1", "--nnodes", "1:4", "prog"}, "elastic MIN:MAX node counts are not supported"},
      {{"--nproc-per-node", "1", "--master-port", "70000", "prog"}, "expected a port in [1, 65535]"},
      {{"--nproc-per-node", "1", "--grace-period-s", "-1", "prog"}, "expected seconds >= 0"},
      {{"--nproc-per-node", "1", "--rdzv-backend", "c10d", "prog"}, "unknown option --rdzv-backend"},
  };
  for (const Case &c : cases) {
    kr::ParsedArguments p = kr::parse_arguments(c.args);
    EXPECT_FALSE(p.config) << c.error;
    EXPECT_TRUE(contains(p.error, c.error)) << "got '" << p.error << "', expected '" << c.error << "'";
  }
  EXPECT_TRUE(kr::parse_arguments({"--help"}).help);
}

TEST(KilnrunArgs, WorkerEnvironment) {
  kr::LaunchConfig c;
  c.nproc_per_node = 3;
  c.nnodes = 2;
  c.node_rank = 1;
  c.master_addr = "host0";
  c.master_port = 1234;
  c.max_restarts = 2;
  Strings env = kr::worker_environment(c, 2, 1, {"PATH=/bin", "RANK=99", "HOME=/root"});
  auto has = [&](const std::string &kv) { return std::find(env.begin(), env.end(), kv) != env.end(); };
  for (const char *kv : {"PATH=/bin", "HOME=/root", "RANK=5", "LOCAL_RANK=2", "WORLD_SIZE=6", "LOCAL_WORLD_SIZE=3",
                         "GROUP_RANK=1", "GROUP_WORLD_SIZE=2", "MASTER_ADDR=host0", "MASTER_PORT=1234",
                         "KILN_RESTART_COUNT=1", "KILN_MAX_RESTARTS=2", "OMP_NUM_THREADS=1"})
    EXPECT_TRUE(has(kv)) << kv;
  EXPECT_FALSE(has("RANK=99"));
  Strings with_omp = kr::worker_environment(c, 0, 0, {"OMP_NUM_THREADS=4"});
  EXPECT_EQ(std::count(with_omp.begin(), with_omp.end(), "OMP_NUM_THREADS=4"), 1);
  EXPECT_EQ(std::count(with_omp.begin(), with_omp.end(), "OMP_NUM_THREADS=1"), 0);
}

TEST(KilnrunArgs, HelpersDescribeExitsAndFindPrograms) {
  EXPECT_EQ((kr::WorkerExit{false, 3}).describe(), "exited with code 3");
  EXPECT_EQ((kr::WorkerExit{true, 9}).describe(), "was killed by signal 9 (SIGKILL)");
  EXPECT_EQ((kr::WorkerExit{true, 11}).exit_code(), 139);
  EXPECT_FALSE((kr::WorkerExit{false, 0}).failed());
  EXPECT_EQ(kr::signal_name(SIGTERM), "SIGTERM");
  EXPECT_TRUE(kr::find_program("sh").has_value());
  EXPECT_TRUE(kr::find_program(kWorker).has_value());
  EXPECT_FALSE(kr::find_program("kilnrun-no-such-program").has_value());
  EXPECT_FALSE(kr::find_program("/nonexistent/prog").has_value());
  int port = kr::choose_free_port();
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
}

TEST(KilnrunArgs, LinePrefixerSplitsLinesAndFlushesTheRest) {
  kr::LinePrefixer p(7);
  EXPECT_TRUE(p.feed("par", 3).empty());
  EXPECT_EQ(p.feed("tial\nnext\nla", 12), (Strings{"[rank 7]: partial\n", "[rank 7]: next\n"}));
  EXPECT_EQ(p.finish(), (Strings{"[rank 7]: la\n"}));
  EXPECT_TRUE(p.finish().empty());
  std::string long_line(kr::kMaxLineBytes + 10, 'x');
  Strings pieces = p.feed(long_line.data(), long_line.size());
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].size(), std::string("[rank 7]: ").size() + kr::kMaxLineBytes + 1);
  EXPECT_EQ(p.finish(), (Strings{"[rank 7]: xxxxxxxxxx\n"}));
}

// ---- the supervisor, through the executable --------------------------------

TEST(Kilnrun, TwoWorkersGetTheirEnvironmentAndPrefixes) {
  TempDir dir;
  Finished r = run_kilnrun(dir, {"--nproc-per-node", "2"}, {"*=env"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("kilnrun: 2 processes on node 0 of 1, master 127.0.0.1:(\\d+)")))
      << r.err;
  std::string port = m[1];
  for (int rank : {0, 1}) {
    std::string s = std::to_string(rank);
    EXPECT_TRUE(contains(r.out, "[rank " + s + "]: env RANK=" + s + " LOCAL_RANK=" + s +
                                    " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 GROUP_WORLD_SIZE=1"
                                    " MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                                    port + " KILN_RESTART_COUNT=0 KILN_MAX_RESTARTS=0 OMP_NUM_THREADS=1\n"))
        << r.out;
    EXPECT_TRUE(contains(r.err, "[rank " + s + "]: to-stderr rank " + s + "\n")) << r.err; // stderr stays stderr
  }
}

TEST(Kilnrun, ThreeWorkersOnTheSecondNode) {
  TempDir dir;
  Finished r =
      run_kilnrun(dir, {"--nproc-per-node=3", "--nnodes=2", "--node-rank=1", "--master-addr=10.0.0.1"}, {"*=env"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "kilnrun: 3 processes on node 1 of 2, master 10.0.0.1:29500")) << r.err;
  for (int local : {0, 1, 2}) {
    std::string rank = std::to_string(3 + local);
    EXPECT_TRUE(contains(r.out, "[rank " + rank + "]: env RANK=" + rank + " LOCAL_RANK=" + std::to_string(local) +
                                    " WORLD_SIZE=6 LOCAL_WORLD_SIZE=3 GROUP_RANK=1 GROUP_WORLD_SIZE=2"
                                    " MASTER_ADDR=10.0.0.1 MASTER_PORT=29500"))
        << r.out;
  }
}

TEST(Kilnrun, ProgramIsFoundInPath) {
  TempDir dir;
  Kilnrun k(
      {"--nproc-per-node", "2", "--master-port", "12345", "sh", "-c", "echo \"$RANK of $WORLD_SIZE at $MASTER_PORT\""},
      dir);
  ASSERT_EQ(k.wait(), 0) << k.err();
  EXPECT_TRUE(contains(k.out(), "[rank 0]: 0 of 2 at 12345\n")) << k.out();
  EXPECT_TRUE(contains(k.out(), "[rank 1]: 1 of 2 at 12345\n")) << k.out();
}

TEST(Kilnrun, LinesAreWholeAndTheLastPartialLineIsFlushed) {
  TempDir dir;
  constexpr int kLines = 300;
  Finished r = run_kilnrun(dir, {"--nproc-per-node", "2"}, {"*=lines:300"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const std::string *text : {&r.out, &r.err}) {
    std::istringstream in(*text);
    int counts[2] = {0, 0};
    std::regex line_re("\\[rank ([01])\\]: rank \\1 line \\d+ ([ab])\\2{149}");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("kilnrun:", 0) == 0)
        continue;
      std::smatch m;
      ASSERT_TRUE(std::regex_match(line, m, line_re)) << "mixed line: " << line;
      ++counts[std::stoi(m[1])];
    }
    EXPECT_EQ(counts[0], kLines);
    EXPECT_EQ(counts[1], kLines);
  }
  TempDir dir2;
  Finished partial = run_kilnrun(dir2, {"--nproc-per-node", "1"}, {"*=partial"});
  EXPECT_EQ(partial.code, 0);
  EXPECT_EQ(partial.out, "[rank 0]: no newline\n");
}

TEST(Kilnrun, ExitCodeOfTheFirstFailingWorker) {
  TempDir dir;
  Finished ok = run_kilnrun(dir, {"--nproc-per-node", "3"}, {"*=exit:0"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  Finished failed = run_kilnrun(dir, {"--nproc-per-node", "2", "--grace-period-s", "1"},
                                {"--pid-dir", dir.path(), "1=exit:3", "*=sleep:300"});
  EXPECT_EQ(failed.code, 3) << failed.err;
  pid_t pid = read_pid(dir.path() + "/pid.1");
  EXPECT_TRUE(contains(failed.err, "kilnrun: rank 1 (pid " + std::to_string(pid) + ") exited with code 3"))
      << failed.err;
  EXPECT_TRUE(contains(failed.err, "lines prefixed \"[rank 1]: \"")) << failed.err;
  EXPECT_TRUE(contains(failed.err, "--max-restarts K")) << failed.err;
  Finished killed = run_kilnrun(dir, {"--nproc-per-node", "2"}, {"0=signal:9", "*=hang"});
  EXPECT_EQ(killed.code, 128 + SIGKILL) << killed.err;
  EXPECT_TRUE(contains(killed.err, "rank 0 (pid ")) << killed.err;
  EXPECT_TRUE(contains(killed.err, "was killed by signal 9 (SIGKILL)")) << killed.err;
}

TEST(Kilnrun, FailureStopsTheOtherWorkersWithinTheGracePeriod) {
  TempDir dir;
  std::string ready = dir.path() + "/pid.0," + dir.path() + "/pid.2";
  Finished r = run_kilnrun(dir, {"--nproc-per-node", "3", "--grace-period-s", "5"},
                           {"--pid-dir", dir.path(), "1=exit-after:3:" + ready, "*=hang"});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_LT(r.elapsed_s, 5.0 + 2.0);
  EXPECT_TRUE(contains(r.err, "kilnrun: rank 1 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0]: got signal 15\n")) << r.out; // SIGTERM first
  EXPECT_TRUE(contains(r.out, "[rank 2]: got signal 15\n")) << r.out;
  for (int rank : {0, 1, 2})
    EXPECT_FALSE(process_alive(read_pid(dir.path() + "/pid." + std::to_string(rank))));
}

TEST(Kilnrun, WorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir;
  Finished r = run_kilnrun(dir, {"--nproc-per-node", "2", "--grace-period-s", "1"},
                           {"--pid-dir", dir.path(), "1=exit-after:4:" + dir.path() + "/pid.0", "*=ignore-term"});
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_GE(r.elapsed_s, 1.0);
  EXPECT_LT(r.elapsed_s, 1.0 + 2.0);
  EXPECT_TRUE(contains(r.out, "[rank 0]: ignoring SIGTERM")) << r.out;
  EXPECT_FALSE(process_alive(read_pid(dir.path() + "/pid.0")));
}

TEST(Kilnrun, RestartsTheGroupWhileRestartsRemain) {
  TempDir dir;
  // Rank 0 fails on the first run only (the flag file); rank 1 prints its
  // environment on every run.
  std::string flag = "0=fail-once:" + dir.path() + "/flag";
  Finished r =
      run_kilnrun(dir, {"--nproc-per-node", "2", "--max-restarts", "1", "--grace-period-s", "1"}, {flag, "*=env"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "kilnrun: rank 0 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, ") exited with code 1; restarting all workers (restart 1 of 1)")) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0]: second run KILN_RESTART_COUNT=1\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 1]: env RANK=1 ")) << r.out;
  EXPECT_TRUE(contains(r.out, " KILN_RESTART_COUNT=1 KILN_MAX_RESTARTS=1 ")) << r.out;

  TempDir dir2;
  Finished no = run_kilnrun(dir2, {"--nproc-per-node", "2", "--grace-period-s", "1"},
                            {"0=fail-once:" + dir2.path() + "/flag", "*=env"});
  EXPECT_EQ(no.code, 1) << no.err;
  EXPECT_TRUE(contains(no.err, "exited with code 1, the first worker to fail")) << no.err;
  EXPECT_FALSE(contains(no.err, "restarting")) << no.err;
}

TEST(Kilnrun, ForwardsSigtermAndExitsWith128PlusSignal) {
  TempDir dir;
  Kilnrun k({"--nproc-per-node", "2", kWorker, "--pid-dir", dir.path(), "*=hang"}, dir);
  ASSERT_TRUE(wait_for_file(dir.path() + "/pid.0", std::chrono::seconds(10)));
  ASSERT_TRUE(wait_for_file(dir.path() + "/pid.1", std::chrono::seconds(10)));
  ::kill(k.pid(), SIGTERM);
  EXPECT_EQ(k.wait(), 128 + SIGTERM) << k.err();
  EXPECT_TRUE(contains(k.out(), "[rank 0]: got signal 15\n")) << k.out();
  EXPECT_TRUE(contains(k.out(), "[rank 1]: got signal 15\n")) << k.out();
  EXPECT_TRUE(contains(k.err(), "kilnrun: received SIGTERM")) << k.err();
  for (int rank : {0, 1})
    EXPECT_FALSE(process_alive(read_pid(dir.path() + "/pid." + std::to_string(rank))));
}

TEST(Kilnrun, NoOrphansLeft) {
  // A worker's own child dies with its group.
  TempDir dir;
  Finished r = run_kilnrun(dir, {"--nproc-per-node", "2", "--grace-period-s", "1"},
                           {"--pid-dir", dir.path(), "1=exit-after:2:" + dir.path() + "/pid.0", "*=grandchild"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(gone_within(read_pid(dir.path() + "/child.0"), std::chrono::seconds(2)));
  EXPECT_FALSE(process_alive(read_pid(dir.path() + "/pid.0")));

  // kilnrun SIGKILLed: PR_SET_PDEATHSIG takes the workers with it.
  TempDir dir2;
  Kilnrun k({"--nproc-per-node", "2", kWorker, "--pid-dir", dir2.path(), "*=hang"}, dir2);
  ASSERT_TRUE(wait_for_file(dir2.path() + "/pid.0", std::chrono::seconds(10)));
  ASSERT_TRUE(wait_for_file(dir2.path() + "/pid.1", std::chrono::seconds(10)));
  ::kill(k.pid(), SIGKILL);
  EXPECT_EQ(k.wait(), 128 + SIGKILL);
  for (int rank : {0, 1})
    EXPECT_TRUE(gone_within(read_pid(dir2.path() + "/pid." + std::to_string(rank)), std::chrono::seconds(2)));
}

TEST(Kilnrun, BadArgumentsPrintUsageAndExit2) {
  TempDir dir;
  const Strings cases[] = {
      {},
      {"--nproc-per-node", "0", "true"},
      {"--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "2", "true"},
      {"--nproc-per-node", "1"},
  };
  for (const Strings &args : cases) {
    Kilnrun k(args, dir);
    EXPECT_EQ(k.wait(), kr::kUsageExitCode);
    EXPECT_TRUE(contains(k.err(), "kilnrun: error: ")) << k.err();
    EXPECT_TRUE(contains(k.err(), "usage: kilnrun --nproc-per-node N")) << k.err();
  }
  Kilnrun missing({"--nproc-per-node", "1", "kilnrun-no-such-program"}, dir);
  EXPECT_EQ(missing.wait(), kr::kUsageExitCode);
  EXPECT_TRUE(contains(missing.err(), "program 'kilnrun-no-such-program' not found in PATH")) << missing.err();
  Kilnrun help({"--help"}, dir);
  EXPECT_EQ(help.wait(), 0);
  EXPECT_TRUE(contains(help.out(), "--max-restarts K")) << help.out();
}

} // namespace
