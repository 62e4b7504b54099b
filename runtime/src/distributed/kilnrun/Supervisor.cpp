// kilnrun's supervisor: launch() (Launcher.h). One thread: fork the group,
// then poll the workers' pipes and a wake pipe that the signal handlers
// (SIGCHLD and the forwarded signals) write to, until every worker of the
// round has exited. Workers are detected with waitid(WNOWAIT) and reaped
// only when the round ends, so a worker's pid stays its process group's id
// (never reused) for as long as kilnrun may signal that group.
//
// After torch.distributed.elastic: LocalElasticAgent._invoke_run (monitor,
// on failure stop and restart while restarts remain) and
// multiprocessing/api.py's PContext.close (SIGTERM, wait, SIGKILL).
#include "Launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

extern char **environ;

namespace kiln::runtime::distributed::kilnrun {

namespace {

using Clock = std::chrono::steady_clock;

/// The signals kilnrun forwards to its workers (torchrun's SignalException set).
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
/// How long kilnrun waits, after the workers are reaped, for pipes that a
/// process outside their groups (setsid) still holds open.
constexpr auto kDrainTimeout = std::chrono::seconds(2);
/// poll's longest sleep: a backstop, every event also writes the wake pipe.
constexpr int kPollSliceMs = 100;
constexpr std::size_t kReadChunk = 64 * 1024;

/// Read end [0] and write end [1] of the pipe the signal handlers write the
/// signal number to (the self-pipe trick: async-signal-safe, never lost).
int g_wake_pipe[2] = {-1, -1};

extern "C" void on_signal(int signal) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(signal);
  ssize_t ignored = ::write(g_wake_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

void write_all(int fd, const std::string &text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return; // a closed terminal or pipe: kilnrun keeps supervising
    done += static_cast<std::size_t>(n);
  }
}

/// One line of kilnrun's own on its stderr.
void say(const std::string &line) { write_all(STDERR_FILENO, "kilnrun: " + line + "\n"); }

/// Installs the handlers for the forwarded signals and SIGCHLD and ignores
/// SIGPIPE for the life of a launch; restores what was there before.
class SignalRedirect {
public:
  SignalRedirect() {
    if (::pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int s : kForwardedSignals)
      install(s, action);
    install(SIGCHLD, action);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    install(SIGPIPE, ignore);
  }
  ~SignalRedirect() {
    for (auto &[signal, old] : saved_)
      ::sigaction(signal, &old, nullptr);
    ::close(g_wake_pipe[0]);
    ::close(g_wake_pipe[1]);
    g_wake_pipe[0] = g_wake_pipe[1] = -1;
  }
  SignalRedirect(const SignalRedirect &) = delete;
  SignalRedirect &operator=(const SignalRedirect &) = delete;

private:
  void install(int signal, const struct sigaction &action) {
    struct sigaction old {};
    ::sigaction(signal, &action, &old);
    saved_.emplace_back(signal, old);
  }
  std::vector<std::pair<int, struct sigaction>> saved_;
};

/// One worker pipe (its stdout or stderr) and where its lines go.
struct Stream {
  int fd = -1;
  int out_fd;
  LinePrefixer lines;
};

struct Worker {
  int local_rank;
  int rank;
  pid_t pid = -1;
  std::optional<WorkerExit> exit;
  Stream out;
  Stream err;
};

/// The first worker of a round to fail.
struct Failure {
  int rank;
  pid_t pid;
  WorkerExit exit;
};

struct RoundOutcome {
  std::optional<Failure> failure;
  int signal = 0; ///< a forwarded signal kilnrun received, 0 if none
};

/// In the forked child (all signals blocked): becomes its own process group,
/// dies with kilnrun, resets kilnrun's handlers, unblocks signals, takes the
/// pipes as stdout/stderr and execs. Only async-signal-safe calls besides
/// strerror (kilnrun has one thread).
[[noreturn]] void exec_worker(pid_t parent, int out_fd, int err_fd, char *const argv[], char *const envp[]) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent)
    ::_exit(1); // kilnrun died before prctl took effect
  for (int s : kForwardedSignals)
    ::signal(s, SIG_DFL);
  ::signal(SIGCHLD, SIG_DFL);
  ::signal(SIGPIPE, SIG_DFL); // ignored dispositions survive exec
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  ::execvpe(argv[0], argv, envp);
  const char *why = std::strerror(errno);
  const char *parts[] = {"kilnrun: cannot execute '", argv[0], "': ", why, "\n"};
  for (const char *p : parts) {
    ssize_t ignored = ::write(STDERR_FILENO, p, std::strlen(p));
    (void)ignored;
  }
  ::_exit(kExecFailedExitCode);
}

std::vector<char *> c_strings(std::vector<std::string> &strings) {
  std::vector<char *> out;
  for (std::string &s : strings)
    out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

class Supervisor {
public:
  explicit Supervisor(const LaunchConfig &config) : config_(config) {}
  int run();

private:
  RoundOutcome run_round(int restart_count);
  void spawn(Worker &worker, int restart_count);
  void pump(std::optional<Clock::time_point> until);
  void read_stream(Stream &stream);
  void close_stream(Stream &stream);
  void handle_wakeups(RoundOutcome &outcome);
  void collect_exits(RoundOutcome &outcome);
  void stop_workers(int signal);
  void signal_groups(int signal);
  void finish_round(RoundOutcome &outcome);
  bool all_exited() const;
  void report_failure(const Failure &failure) const;

  const LaunchConfig &config_;
  std::vector<Worker> workers_;
  bool stopping_ = false;
  std::optional<Clock::time_point> kill_at_; ///< when a stop escalates to SIGKILL
};

int Supervisor::run() {
  say(std::to_string(config_.nproc_per_node) + " processes on node " + std::to_string(config_.node_rank) + " of " +
      std::to_string(config_.nnodes) + ", master " + config_.master_addr + ":" + std::to_string(config_.master_port));
  for (int restart = 0;; ++restart) {
    RoundOutcome outcome = run_round(restart);
    if (outcome.signal != 0) {
      say("received " + signal_name(outcome.signal) + "; the workers were stopped");
      return 128 + outcome.signal;
    }
    if (!outcome.failure)
      return 0;
    const Failure &f = *outcome.failure;
    if (restart >= config_.max_restarts) {
      report_failure(f);
      return f.exit.exit_code();
    }
    say("rank " + std::to_string(f.rank) + " (pid " + std::to_string(f.pid) + ") " + f.exit.describe() +
        "; restarting all workers (restart " + std::to_string(restart + 1) + " of " +
        std::to_string(config_.max_restarts) + ")");
  }
}

void Supervisor::report_failure(const Failure &f) const {
  std::string restarts = config_.max_restarts == 0
                             ? "no restarts were allowed (--max-restarts K restarts the group up to K times)"
                             : "all " + std::to_string(config_.max_restarts) + " restarts were used";
  say("rank " + std::to_string(f.rank) + " (pid " + std::to_string(f.pid) + ") " + f.exit.describe() +
      ", the first worker to fail; the others were stopped");
  say("its output is the lines prefixed \"[rank " + std::to_string(f.rank) + "]: \" above; " + restarts);
}

RoundOutcome Supervisor::run_round(int restart_count) {
  workers_.clear();
  workers_.reserve(static_cast<std::size_t>(config_.nproc_per_node));
  stopping_ = false;
  kill_at_.reset();
  for (int local = 0; local < config_.nproc_per_node; ++local) {
    int rank = config_.global_rank(local);
    workers_.push_back(Worker{local, rank, -1, std::nullopt, Stream{-1, STDOUT_FILENO, LinePrefixer(rank)},
                              Stream{-1, STDERR_FILENO, LinePrefixer(rank)}});
    spawn(workers_.back(), restart_count);
  }
  RoundOutcome outcome;
  while (!all_exited()) {
    pump(kill_at_);
    handle_wakeups(outcome);
    collect_exits(outcome);
    if (kill_at_ && Clock::now() >= *kill_at_) {
      signal_groups(SIGKILL);
      kill_at_.reset();
    }
  }
  finish_round(outcome);
  return outcome;
}

void Supervisor::spawn(Worker &worker, int restart_count) {
  std::vector<std::string> base;
  for (char **e = environ; *e != nullptr; ++e)
    base.emplace_back(*e);
  std::vector<std::string> env = worker_environment(config_, worker.local_rank, restart_count, base);
  std::vector<std::string> args = config_.program;
  std::vector<char *> argv = c_strings(args), envp = c_strings(env);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  // Signals wait until the child has reset kilnrun's handlers: else a
  // SIGTERM to a worker not yet exec'd would run on_signal there and write
  // the wake pipe as if kilnrun had received it (posix_spawn does the same).
  sigset_t all, saved;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &saved);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0)
    exec_worker(parent, out[1], err[1], argv.data(), envp.data());
  int fork_errno = errno;
  ::sigprocmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0)
    throw std::runtime_error(std::string("fork: ") + std::strerror(fork_errno));
  ::setpgid(pid, pid); // also here, so the group exists before kilnrun may signal it
  ::close(out[1]);
  ::close(err[1]);
  ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, O_NONBLOCK);
  worker.pid = pid;
  worker.out.fd = out[0];
  worker.err.fd = err[0];
}

/// Waits for output, an exit or a signal (at most until `until`), and writes
/// the complete lines that arrived.
void Supervisor::pump(std::optional<Clock::time_point> until) {
  int timeout = kPollSliceMs;
  if (until) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*until - Clock::now()).count();
    timeout = static_cast<int>(std::max<long long>(0, std::min<long long>(timeout, left + 1)));
  }
  std::vector<pollfd> fds = {{g_wake_pipe[0], POLLIN, 0}};
  std::vector<Stream *> streams = {nullptr};
  for (Worker &w : workers_)
    for (Stream *s : {&w.out, &w.err})
      if (s->fd >= 0) {
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
  if (::poll(fds.data(), fds.size(), timeout) <= 0)
    return; // timeout or EINTR
  for (std::size_t i = 1; i < fds.size(); ++i)
    if (fds[i].revents != 0)
      read_stream(*streams[i]);
}

/// One read per wake-up, so a worker that writes without pause cannot
/// starve the others.
void Supervisor::read_stream(Stream &stream) {
  char buffer[kReadChunk];
  ssize_t n = ::read(stream.fd, buffer, sizeof(buffer));
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return;
  if (n <= 0)
    return close_stream(stream);
  for (const std::string &line : stream.lines.feed(buffer, static_cast<std::size_t>(n)))
    write_all(stream.out_fd, line);
}

void Supervisor::close_stream(Stream &stream) {
  for (const std::string &line : stream.lines.finish())
    write_all(stream.out_fd, line);
  ::close(stream.fd);
  stream.fd = -1;
}

void Supervisor::handle_wakeups(RoundOutcome &outcome) {
  unsigned char signals[64];
  ssize_t n;
  while ((n = ::read(g_wake_pipe[0], signals, sizeof(signals))) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      int s = signals[i];
      if (s == SIGCHLD)
        continue; // collect_exits looks at every worker
      if (outcome.signal == 0) {
        outcome.signal = s;
        say("received " + signal_name(s) + "; forwarding it to the workers");
        stop_workers(s);
      } else {
        say("received " + signal_name(s) + " again; killing the workers");
        signal_groups(SIGKILL);
      }
    }
  }
}

/// Records the workers that exited since the last look (without reaping
/// them); the first failure of the round stops the others.
void Supervisor::collect_exits(RoundOutcome &outcome) {
  for (Worker &w : workers_) {
    if (w.exit)
      continue;
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(w.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != w.pid)
      continue;
    bool signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
    w.exit = WorkerExit{signaled, info.si_status};
    if (w.exit->failed() && !stopping_) {
      outcome.failure = Failure{w.rank, w.pid, *w.exit};
      stop_workers(SIGTERM);
    }
  }
}

/// Sends `signal` to every group and, on the first stop of the round, sets
/// the SIGKILL deadline grace_period_s from now.
void Supervisor::stop_workers(int signal) {
  signal_groups(signal);
  if (stopping_)
    return;
  stopping_ = true;
  kill_at_ =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.grace_period_s));
}

/// Every worker's group, exited workers' too (their leftover children):
/// the leaders are not reaped yet, so the group ids are still theirs.
void Supervisor::signal_groups(int signal) {
  for (const Worker &w : workers_)
    ::killpg(w.pid, signal);
}

/// SIGKILLs what is left of each group, reaps the workers and writes the
/// rest of their output (a signal that comes meanwhile still counts).
void Supervisor::finish_round(RoundOutcome &outcome) {
  signal_groups(SIGKILL);
  for (const Worker &w : workers_)
    while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  Clock::time_point give_up = Clock::now() + kDrainTimeout;
  auto open = [&] {
    for (const Worker &w : workers_)
      if (w.out.fd >= 0 || w.err.fd >= 0)
        return true;
    return false;
  };
  while (open() && Clock::now() < give_up) {
    pump(give_up);
    handle_wakeups(outcome);
  }
  for (Worker &w : workers_)
    for (Stream *s : {&w.out, &w.err})
      if (s->fd >= 0)
        close_stream(*s);
}

bool Supervisor::all_exited() const {
  for (const Worker &w : workers_)
    if (!w.exit)
      return false;
  return true;
}

} // namespace

int launch(const LaunchConfig &config) {
  if (config.program.empty() || !find_program(config.program[0])) {
    std::string name = config.program.empty() ? "" : config.program[0];
    say("error: program '" + name + "' not found" +
        (name.find('/') == std::string::npos ? " in PATH" : " or not executable"));
    return kUsageExitCode;
  }
  SignalRedirect signals;
  return Supervisor(config).run();
}

} // namespace kiln::runtime::distributed::kilnrun
