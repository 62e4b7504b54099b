// kilnrun's arguments, worker environment and helpers (Launcher.h); the
// supervisor is in Supervisor.cpp.
#include "Launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

namespace kiln::runtime::distributed::kilnrun {

namespace {

/// The options that take a value, by their dashed names.
enum class Option { NprocPerNode, Nnodes, NodeRank, MasterAddr, MasterPort, MaxRestarts, GracePeriod };

const std::map<std::string, Option> &option_table() {
  static const std::map<std::string, Option> table = {
      {"--nproc-per-node", Option::NprocPerNode}, {"--nnodes", Option::Nnodes},
      {"--node-rank", Option::NodeRank},          {"--master-addr", Option::MasterAddr},
      {"--master-port", Option::MasterPort},      {"--max-restarts", Option::MaxRestarts},
      {"--grace-period-s", Option::GracePeriod},
  };
  return table;
}

/// "--nproc_per_node" -> "--nproc-per-node" (torchrun accepts both).
std::string dashed(std::string name) {
  for (std::size_t i = 2; i < name.size(); ++i)
    if (name[i] == '_')
      name[i] = '-';
  return name;
}

/// The whole of `text` as an int in [lo, hi], or nullopt.
std::optional<int> parse_int(const std::string &text, long lo, long hi) {
  if (text.empty())
    return std::nullopt;
  errno = 0;
  char *end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi)
    return std::nullopt;
  return static_cast<int>(v);
}

std::optional<double> parse_seconds(const std::string &text) {
  if (text.empty())
    return std::nullopt;
  char *end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (*end != '\0' || !(v >= 0) || v > 1e6)
    return std::nullopt;
  return v;
}

/// Stores `value` into `field` when it parses as an int in [lo, hi]; returns
/// an error message naming the option and the value, or "".
std::string set_int(int &field, const std::string &name, const std::string &value, long lo, long hi,
                    const char *expected) {
  std::optional<int> v = parse_int(value, lo, hi);
  if (!v)
    return name + " " + value + ": expected " + expected;
  field = *v;
  return "";
}

/// Stores `value` into the field of `option`; returns an error message or "".
std::string set_option(LaunchConfig &c, Option option, const std::string &name, const std::string &value) {
  constexpr long kMany = 1 << 20;
  switch (option) {
  case Option::NprocPerNode:
    return set_int(c.nproc_per_node, name, value, 1, kMany, "an integer >= 1");
  case Option::Nnodes:
    if (value.find(':') != std::string::npos)
      return name + " " + value + ": elastic MIN:MAX node counts are not supported; give one number";
    return set_int(c.nnodes, name, value, 1, kMany, "an integer >= 1");
  case Option::NodeRank:
    return set_int(c.node_rank, name, value, 0, kMany, "an integer >= 0");
  case Option::MasterPort:
    return set_int(c.master_port, name, value, 1, 65535, "a port in [1, 65535]");
  case Option::MaxRestarts:
    return set_int(c.max_restarts, name, value, 0, kMany, "an integer >= 0");
  case Option::MasterAddr:
    if (value.empty())
      return name + ": expected a host name or address";
    c.master_addr = value;
    return "";
  case Option::GracePeriod: {
    std::optional<double> v = parse_seconds(value);
    if (!v)
      return name + " " + value + ": expected seconds >= 0";
    c.grace_period_s = *v;
    return "";
  }
  }
  return "";
}

/// The checks between options, after all are read.
std::string check_config(const LaunchConfig &c) {
  if (c.nproc_per_node == 0)
    return "missing --nproc-per-node";
  if (c.node_rank >= c.nnodes)
    return "--node-rank " + std::to_string(c.node_rank) + " must be < --nnodes " + std::to_string(c.nnodes);
  if (c.program.empty())
    return "no program to run";
  return "";
}

} // namespace

std::string usage_line() {
  return "usage: kilnrun --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P] "
         "[--max-restarts K] [--grace-period-s S] [--] program [args...]";
}

std::string help_text() {
  return usage_line() +
         "\n\n"
         "Starts N workers of a distributed job on this node (Kiln's torchrun).\n"
         "  --nproc-per-node N   workers on this node\n"
         "  --nnodes M           nodes in the job (default 1); start kilnrun on each\n"
         "  --node-rank R        this node, 0 .. M-1 (default 0)\n"
         "  --master-addr A      address of node 0 (default 127.0.0.1)\n"
         "  --master-port P      port of rank 0's store (default: a free port on one node, else 29500)\n"
         "  --max-restarts K     restart the whole group up to K times after a failure (default 0)\n"
         "  --grace-period-s S   seconds from SIGTERM to SIGKILL when stopping workers (default 5)\n"
         "Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,\n"
         "MASTER_ADDR, MASTER_PORT, KILN_RESTART_COUNT, KILN_MAX_RESTARTS; its output is prefixed \"[rank R]: \".\n"
         "Exit code: 0, the first failing worker's code (128+signal if killed), 128+signal if kilnrun is\n"
         "interrupted, 2 for bad arguments or a program that is not found.\n";
}

static ParsedArguments failure(std::string message) {
  ParsedArguments out;
  out.error = std::move(message);
  return out;
}

ParsedArguments parse_arguments(const std::vector<std::string> &args) {
  ParsedArguments out;
  LaunchConfig config;
  bool port_given = false;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      out.help = true;
      return out;
    }
    if (arg.rfind("--", 0) != 0)
      break; // the program
    std::size_t eq = arg.find('=');
    std::string name = dashed(arg.substr(0, eq));
    auto found = option_table().find(name);
    if (found == option_table().end())
      return failure("unknown option " + arg);
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return failure(name + ": missing value");
    }
    if (std::string err = set_option(config, found->second, name, value); !err.empty())
      return failure(err);
    port_given |= found->second == Option::MasterPort;
  }
  config.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (!port_given && config.nnodes > 1)
    config.master_port = kDefaultMasterPort;
  if (std::string err = check_config(config); !err.empty())
    return failure(err);
  if (!port_given && config.nnodes == 1) {
    try {
      config.master_port = choose_free_port();
    } catch (const std::exception &e) {
      return failure(std::string("cannot choose a master port: ") + e.what() + "; give --master-port");
    }
  }
  out.config = std::move(config);
  return out;
}

int choose_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    throw std::runtime_error(std::string("bind to port 0: ") + std::strerror(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::optional<std::string> find_program(const std::string &program) {
  auto executable = [](const std::string &path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (program.empty())
    return std::nullopt;
  if (program.find('/') != std::string::npos)
    return executable(program) ? std::optional(program) : std::nullopt;
  const char *env = std::getenv("PATH");
  std::string path = env ? env : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos)
      end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program; // "" is the current folder
    if (executable(candidate))
      return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

std::vector<std::string> worker_environment(const LaunchConfig &c, int local_rank, int restart_count,
                                            const std::vector<std::string> &base) {
  std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", std::to_string(c.global_rank(local_rank))},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(c.world_size())},
      {"LOCAL_WORLD_SIZE", std::to_string(c.nproc_per_node)},
      {"GROUP_RANK", std::to_string(c.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(c.nnodes)},
      {"MASTER_ADDR", c.master_addr},
      {"MASTER_PORT", std::to_string(c.master_port)},
      {"KILN_RESTART_COUNT", std::to_string(restart_count)},
      {"KILN_MAX_RESTARTS", std::to_string(c.max_restarts)},
  };
  auto key_of = [](const std::string &entry) { return entry.substr(0, entry.find('=')); };
  bool has_omp = false;
  std::vector<std::string> env;
  for (const std::string &entry : base) {
    std::string key = key_of(entry);
    has_omp |= key == "OMP_NUM_THREADS";
    bool replaced = false;
    for (const auto &kv : set)
      replaced |= kv.first == key;
    if (!replaced)
      env.push_back(entry);
  }
  for (const auto &kv : set)
    env.push_back(kv.first + "=" + kv.second);
  if (c.nproc_per_node > 1 && !has_omp)
    env.push_back("OMP_NUM_THREADS=1");
  return env;
}

std::string signal_name(int signal) {
  static const std::map<int, const char *> names = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},   {SIGTRAP, "SIGTRAP"},
      {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},
      {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"}, {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
      {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
  };
  auto it = names.find(signal);
  return it != names.end() ? it->second : "signal " + std::to_string(signal);
}

std::string WorkerExit::describe() const {
  if (!signaled)
    return "exited with code " + std::to_string(value);
  return "was killed by signal " + std::to_string(value) + " (" + signal_name(value) + ")";
}

LinePrefixer::LinePrefixer(int rank) : prefix_("[rank " + std::to_string(rank) + "]: ") {}

std::vector<std::string> LinePrefixer::feed(const char *data, std::size_t size) {
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < size; ++i) {
    partial_.push_back(data[i]);
    if (data[i] == '\n' || partial_.size() >= kMaxLineBytes) {
      if (partial_.back() != '\n')
        partial_.push_back('\n');
      lines.push_back(prefix_ + partial_);
      partial_.clear();
    }
  }
  return lines;
}

std::vector<std::string> LinePrefixer::finish() {
  if (partial_.empty())
    return {};
  std::vector<std::string> last = {prefix_ + partial_ + "\n"};
  partial_.clear();
  return last;
}

} // namespace kiln::runtime::distributed::kilnrun
