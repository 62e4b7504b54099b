// kilnrun - Kiln's torchrun: starts N worker processes per node with
// torchrun's environment and supervises them (torch.distributed.run and
// torch.distributed.elastic's local agent).
//
//   kilnrun --nproc-per-node N [--nnodes M --node-rank R] [--master-addr A]
//           [--master-port P] [--max-restarts K] [--grace-period-s S] [--] prog args...
//
// Each worker gets RANK = R*N + local_rank, LOCAL_RANK, WORLD_SIZE = M*N,
// LOCAL_WORLD_SIZE = N, GROUP_RANK = R, MASTER_ADDR, MASTER_PORT and
// KILN_RESTART_COUNT. Its stdout and stderr lines are prefixed "[rank R]: ".
// When a worker fails (non-zero exit or a signal) the others get SIGTERM,
// then SIGKILL after the grace period; the group restarts up to K times,
// then kilnrun exits with the first failure's code (128 + signal for a
// signal) and says which rank failed and how. SIGINT/SIGTERM to kilnrun
// go to every worker (same escalation) and kilnrun exits 128 + signal.
// Workers run in their own process groups and die with kilnrun
// (PR_SET_PDEATHSIG), so no orphan survives. Bad arguments: usage, exit 2.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  int nproc = 0, nnodes = 1, node_rank = 0, max_restarts = 0, master_port = -1;
  double grace_s = 5;
  std::string master_addr = "127.0.0.1";
  std::vector<std::string> argv;
};

[[noreturn]] void usage(const std::string &why) {
  std::fprintf(stderr,
               "kilnrun: %s\nusage: kilnrun --nproc-per-node N [--nnodes M --node-rank R] [--master-addr A] "
               "[--master-port P] [--max-restarts K] [--grace-period-s S] [--] prog args...\n",
               why.c_str());
  std::exit(2);
}

int parse_int(const std::string &opt, const std::string &v, int lo) {
  char *end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || x < lo || x > 1 << 20) usage(opt + " " + v + ": expected an integer >= " + std::to_string(lo));
  return static_cast<int>(x);
}

Config parse(int argc, char **argv) {
  Config c;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i], value;
    if (a == "--") {
      ++i;
      break;
    }
    if (a.rfind("--", 0) != 0) break; // the program
    if (const auto eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else {
      if (i + 1 >= argc) usage(a + " needs a value");
      value = argv[++i];
    }
    if (a == "--nproc-per-node" || a == "--nproc_per_node") c.nproc = parse_int(a, value, 1);
    else if (a == "--nnodes") c.nnodes = parse_int(a, value, 1);
    else if (a == "--node-rank" || a == "--node_rank") c.node_rank = parse_int(a, value, 0);
    else if (a == "--master-addr" || a == "--master_addr") c.master_addr = value;
    else if (a == "--master-port" || a == "--master_port") c.master_port = parse_int(a, value, 1);
    else if (a == "--max-restarts" || a == "--max_restarts") c.max_restarts = parse_int(a, value, 0);
    else if (a == "--grace-period-s") c.grace_s = parse_int(a, value, 0);
    else usage("unknown option " + a);
  }
  for (; i < argc; ++i) c.argv.push_back(argv[i]);
  if (c.nproc == 0) usage("--nproc-per-node is required");
  if (c.node_rank >= c.nnodes)
    usage("--node-rank " + std::to_string(c.node_rank) + " is not below --nnodes " + std::to_string(c.nnodes));
  if (c.argv.empty()) usage("no program to run");
  if (c.master_port < 0) c.master_port = c.nnodes == 1 ? 0 : 29500;
  return c;
}

/// A free TCP port on this node (bind port 0, read it, close), outside the
/// ephemeral range when the kernel allows, for a one-node job.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) return 29500;
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

int g_signal_pipe[2] = {-1, -1};
void on_signal(int sig) {
  const char c = static_cast<char>(sig);
  (void)!::write(g_signal_pipe[1], &c, 1);
}

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1; // read ends
  std::string out_buf, err_buf;
  bool done = false;
  int status = 0;
};

void flush_lines(Worker &w, std::string &buf, FILE *to, bool all) {
  size_t start = 0;
  for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1)
    std::fprintf(to, "[rank %d]: %.*s\n", w.rank, static_cast<int>(nl - start), buf.data() + start);
  buf.erase(0, start);
  if (all && !buf.empty()) {
    std::fprintf(to, "[rank %d]: %s\n", w.rank, buf.c_str());
    buf.clear();
  }
  std::fflush(to);
}

/// Reads whatever the workers wrote, for up to `ms` milliseconds.
void pump(std::vector<Worker> &ws, int ms) {
  std::vector<pollfd> fds{{g_signal_pipe[0], 0, 0}}; // signals are read by the caller
  std::vector<std::pair<Worker *, bool>> owner{{nullptr, false}};
  for (Worker &w : ws) {
    if (w.out >= 0) fds.push_back({w.out, POLLIN, 0}), owner.push_back({&w, false});
    if (w.err >= 0) fds.push_back({w.err, POLLIN, 0}), owner.push_back({&w, true});
  }
  if (::poll(fds.data(), fds.size(), ms) <= 0) return;
  for (size_t i = 1; i < fds.size(); ++i) {
    if (!fds[i].revents) continue;
    Worker &w = *owner[i].first;
    const bool is_err = owner[i].second;
    char chunk[8192];
    const ssize_t k = ::read(fds[i].fd, chunk, sizeof chunk);
    std::string &buf = is_err ? w.err_buf : w.out_buf;
    if (k > 0) {
      buf.append(chunk, static_cast<size_t>(k));
      flush_lines(w, buf, is_err ? stderr : stdout, false);
    } else if (k == 0 || errno != EINTR) {
      flush_lines(w, buf, is_err ? stderr : stdout, true);
      ::close(fds[i].fd);
      (is_err ? w.err : w.out) = -1;
    }
  }
}

void reap(std::vector<Worker> &ws) {
  for (Worker &w : ws)
    if (!w.done && ::waitpid(w.pid, &w.status, WNOHANG) == w.pid) w.done = true;
}

bool all_done(const std::vector<Worker> &ws) {
  for (const Worker &w : ws)
    if (!w.done || w.out >= 0 || w.err >= 0) return false;
  return true;
}

std::string how(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  const int s = WTERMSIG(status);
  return "was killed by signal " + std::to_string(s) + " (" + (strsignal(s) ? strsignal(s) : "?") + ")";
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

/// SIGTERM to every live worker's process group, SIGKILL after the grace period.
void stop_all(std::vector<Worker> &ws, double grace_s) {
  for (Worker &w : ws)
    if (!w.done) ::kill(-w.pid, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  while (Clock::now() < deadline) {
    reap(ws);
    if (all_done(ws)) return;
    pump(ws, 20);
  }
  for (Worker &w : ws)
    if (!w.done) ::kill(-w.pid, SIGKILL);
  while (!all_done(ws)) {
    reap(ws);
    pump(ws, 20);
  }
}

Worker start(const Config &c, int local_rank, int restart) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    std::perror("kilnrun: pipe");
    std::exit(1);
  }
  Worker w;
  w.rank = c.node_rank * c.nproc + local_rank;
  const pid_t parent = ::getpid();
  w.pid = ::fork();
  if (w.pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1); // kilnrun died before the prctl
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    auto set = [](const char *k, long v) { ::setenv(k, std::to_string(v).c_str(), 1); };
    set("RANK", w.rank);
    set("LOCAL_RANK", local_rank);
    set("WORLD_SIZE", static_cast<long>(c.nnodes) * c.nproc);
    set("LOCAL_WORLD_SIZE", c.nproc);
    set("GROUP_RANK", c.node_rank);
    set("MASTER_PORT", c.master_port);
    set("KILN_RESTART_COUNT", restart);
    ::setenv("MASTER_ADDR", c.master_addr.c_str(), 1);
    std::vector<char *> args;
    for (const auto &a : c.argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "kilnrun: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(w.pid, w.pid); // also here: no race with the first kill
  ::close(out[1]);
  ::close(err[1]);
  w.out = out[0];
  w.err = err[0];
  return w;
}

} // namespace

int main(int argc, char **argv) {
  Config c = parse(argc, argv);
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return 1;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  for (int restart = 0;; ++restart) {
    if (c.nnodes == 1 && (restart == 0 || c.master_port == 0)) c.master_port = free_port();
    std::fprintf(stderr, "kilnrun: %d processes on node %d of %d, master %s:%d%s\n", c.nproc, c.node_rank, c.nnodes,
                 c.master_addr.c_str(), c.master_port,
                 restart ? (", restart " + std::to_string(restart) + " of " + std::to_string(c.max_restarts)).c_str() : "");
    std::vector<Worker> ws;
    for (int l = 0; l < c.nproc; ++l) ws.push_back(start(c, l, restart));
    const Worker *failed = nullptr;
    int signal_received = 0;
    while (!all_done(ws) && !failed && !signal_received) {
      pump(ws, 20);
      reap(ws);
      for (const Worker &w : ws)
        if (w.done && !failed && exit_code(w.status) != 0) failed = &w;
      char sig;
      if (::read(g_signal_pipe[0], &sig, 1) == 1) signal_received = sig;
    }
    if (signal_received) {
      std::fprintf(stderr, "kilnrun: got signal %d (%s); stopping the workers\n", signal_received, strsignal(signal_received));
      for (Worker &w : ws)
        if (!w.done) ::kill(-w.pid, signal_received);
      stop_all(ws, c.grace_s);
      return 128 + signal_received;
    }
    if (!failed) {
      while (!all_done(ws)) pump(ws, 20), reap(ws);
      return 0;
    }
    const int rank = failed->rank, status = failed->status;
    std::fprintf(stderr, "kilnrun: rank %d (pid %d) %s; stopping the other workers\n", rank, static_cast<int>(failed->pid),
                 how(status).c_str());
    stop_all(ws, c.grace_s);
    if (restart >= c.max_restarts) {
      std::fprintf(stderr,
                   "kilnrun: failed: rank %d %s%s; see its output above (lines prefixed \"[rank %d]: \")%s\n", rank,
                   how(status).c_str(), c.max_restarts ? (" after " + std::to_string(restart) + " restarts").c_str() : "",
                   rank, c.max_restarts ? "" : "; --max-restarts K restarts the group up to K times");
      return exit_code(status);
    }
  }
}
