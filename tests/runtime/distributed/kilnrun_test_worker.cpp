// kilnrun-test-worker: the program kilnrun_test.cpp runs under kilnrun.
//
//   kilnrun-test-worker [--pid-dir DIR] SPEC...
//
// Each SPEC is "R=MODE" (for the worker whose $RANK is R) or "*=MODE" (the
// others). With --pid-dir the worker first writes its pid to DIR/pid.RANK
// (through a rename, so a file that exists is complete), after its signal
// handlers are set and its child (grandchild mode) is started. Modes:
//   env             prints its kilnrun variables on stdout, a line on stderr; exit 0
//   exit:N          exit N
//   exit-after:N:P,Q  wait until the files P, Q, ... exist (10 s at most), exit N
//   signal:N        kill itself with signal N
//   sleep:MS        sleep MS milliseconds, exit 0
//   hang            wait (60 s at most, then exit 99); on SIGTERM/SIGINT print
//                   "got signal N" and die of it
//   ignore-term     like hang, but SIGTERM is ignored (needs SIGKILL)
//   grandchild      fork a child that waits (pid in DIR/child.RANK), then hang
//   fail-once:PATH  exit 1 if PATH.RANK does not exist (creating it), else
//                   print "second run KILN_RESTART_COUNT=..." and exit 0
//   lines:N         N long lines on stdout and on stderr, each in three writes
//   partial         "no newline" without a newline; exit 0
// Output goes through write(2) so nothing waits in a stdio buffer.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace {

constexpr int kHangSeconds = 60;

void say(int fd, const std::string &text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0)
      return;
    done += static_cast<std::size_t>(n);
  }
}

std::string env(const char *name) {
  const char *v = std::getenv(name);
  return v ? v : "<unset>";
}

void write_file_atomically(const std::string &path, const std::string &text) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), path.c_str());
}

extern "C" void report_and_die(int signal) {
  char line[32];
  int n = std::snprintf(line, sizeof(line), "got signal %d\n", signal);
  ssize_t ignored = ::write(STDOUT_FILENO, line, static_cast<std::size_t>(n));
  (void)ignored;
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

[[noreturn]] void hang() {
  for (int i = 0; i < kHangSeconds * 10; ++i)
    ::usleep(100 * 1000);
  std::_Exit(99);
}

int print_env() {
  const char *names[] = {
      "RANK",        "LOCAL_RANK",  "WORLD_SIZE",         "LOCAL_WORLD_SIZE",  "GROUP_RANK",     "GROUP_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "KILN_RESTART_COUNT", "KILN_MAX_RESTARTS", "OMP_NUM_THREADS"};
  std::string line = "env";
  for (const char *n : names)
    line += std::string(" ") + n + "=" + env(n);
  say(STDOUT_FILENO, line + "\n");
  say(STDERR_FILENO, "to-stderr rank " + env("RANK") + "\n");
  return 0;
}

int print_lines(int count) {
  std::string rank = env("RANK");
  std::string pad(150, static_cast<char>('a' + std::atoi(rank.c_str()) % 26));
  for (int i = 0; i < count; ++i) {
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
      say(fd, "rank " + rank);
      say(fd, " line " + std::to_string(i) + " ");
      say(fd, pad + "\n");
    }
  }
  return 0;
}

int fail_once(const std::string &path) {
  std::string flag = path + "." + env("RANK");
  struct stat st {};
  if (::stat(flag.c_str(), &st) != 0) {
    std::ofstream(flag) << "ran\n";
    say(STDERR_FILENO, "failing the first run\n");
    return 1;
  }
  say(STDOUT_FILENO, "second run KILN_RESTART_COUNT=" + env("KILN_RESTART_COUNT") + "\n");
  return 0;
}

bool is_hanging(const std::string &mode) { return mode == "hang" || mode == "ignore-term" || mode == "grandchild"; }

/// What a hanging mode sets up before the worker says it is ready.
void prepare(const std::string &mode, const std::string &pid_dir) {
  if (!is_hanging(mode))
    return;
  ::signal(SIGTERM, mode == "ignore-term" ? SIG_IGN : report_and_die);
  ::signal(SIGINT, report_and_die);
  if (mode == "ignore-term")
    say(STDOUT_FILENO, "ignoring SIGTERM\n");
  if (mode == "grandchild") {
    pid_t child = ::fork();
    if (child == 0)
      hang();
    write_file_atomically(pid_dir + "/child." + env("RANK"), std::to_string(child) + "\n");
  }
}

int exit_after(const std::string &spec) {
  std::size_t colon = spec.find(':');
  int code = std::atoi(spec.substr(0, colon).c_str());
  std::string files = colon == std::string::npos ? "" : spec.substr(colon + 1);
  for (int waited_ms = 0; waited_ms < 10000; waited_ms += 10) {
    bool all = true;
    std::size_t start = 0;
    while (start < files.size()) {
      std::size_t end = files.find(',', start);
      if (end == std::string::npos)
        end = files.size();
      struct stat st {};
      all &= ::stat(files.substr(start, end - start).c_str(), &st) == 0;
      start = end + 1;
    }
    if (all)
      break;
    ::usleep(10 * 1000);
  }
  return code;
}

int run_mode(const std::string &mode) {
  auto arg = [&](std::size_t prefix) { return mode.substr(prefix); };
  if (mode == "env")
    return print_env();
  if (mode.rfind("exit-after:", 0) == 0)
    return exit_after(arg(11));
  if (mode.rfind("exit:", 0) == 0)
    return std::atoi(arg(5).c_str());
  if (mode.rfind("signal:", 0) == 0) {
    ::kill(::getpid(), std::atoi(arg(7).c_str()));
    hang();
  }
  if (mode.rfind("sleep:", 0) == 0) {
    ::usleep(static_cast<useconds_t>(std::atoi(arg(6).c_str())) * 1000);
    return 0;
  }
  if (mode.rfind("fail-once:", 0) == 0)
    return fail_once(arg(10));
  if (mode.rfind("lines:", 0) == 0)
    return print_lines(std::atoi(arg(6).c_str()));
  if (mode == "partial") {
    say(STDOUT_FILENO, "no newline");
    return 0;
  }
  if (is_hanging(mode))
    hang();
  say(STDERR_FILENO, "kilnrun-test-worker: unknown mode '" + mode + "'\n");
  return 64;
}

} // namespace

int main(int argc, char **argv) {
  std::string rank = env("RANK"), pid_dir, mode;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--pid-dir" && i + 1 < argc) {
      pid_dir = argv[++i];
    } else if (a.rfind(rank + "=", 0) == 0) {
      mode = a.substr(rank.size() + 1);
    } else if (a.rfind("*=", 0) == 0 && mode.empty()) {
      mode = a.substr(2);
    }
  }
  prepare(mode, pid_dir);
  if (!pid_dir.empty())
    write_file_atomically(pid_dir + "/pid." + rank, std::to_string(::getpid()) + "\n");
  return run_mode(mode);
}
