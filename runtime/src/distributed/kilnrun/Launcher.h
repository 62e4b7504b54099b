// Launcher.h - kilnrun, Kiln's torchrun: starts the workers of one node of a
// distributed job, watches them, and restarts or stops them together.
//
// After torchrun (torch/distributed/run.py) and torch.distributed.elastic
// (agent/server/local_elastic_agent.py, multiprocessing/api.py), without the
// rendezvous: every node is started with the same --nnodes and its own
// --node-rank, and the workers meet at MASTER_ADDR:MASTER_PORT through the
// TCPStore (c10d's env:// init method).
//
// Example:
//
//   kilnrun --nproc-per-node 2 ./train --epochs 3
//   # kilnrun: 2 processes on node 0 of 1, master 127.0.0.1:41234
//   # [rank 0]: epoch 1 loss 0.31
//   # [rank 1]: epoch 1 loss 0.30
//
//   auto parsed = parse_arguments({"--nproc-per-node", "2", "./train"});
//   if (!parsed.error.empty()) ...;         // print it and usage_line(), exit 2
//   int code = launch(*parsed.config);      // the process's exit code
//
// POSIX (Linux: prctl) only; nothing else from Kiln.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime::distributed::kilnrun {

/// Exit code of kilnrun for bad arguments and a program that cannot be
/// found (argparse's code, which torchrun uses for both).
constexpr int kUsageExitCode = 2;
/// Exit code a worker reports when its program was found but execvp failed
/// (the shell's "found but not executable"; kilnrun prints why on its stderr).
constexpr int kExecFailedExitCode = 127;
/// torchrun's default master port for multi-node jobs.
constexpr int kDefaultMasterPort = 29500;
/// A worker line longer than this is written in pieces, each with the prefix
/// (bounds kilnrun's memory for a worker that never writes a newline).
constexpr std::size_t kMaxLineBytes = 64 * 1024;

/// One node's launch: torchrun's options of the same names (dashes; the
/// underscore spellings are accepted too).
struct LaunchConfig {
  int nproc_per_node = 0;                ///< workers on this node (N), >= 1
  int nnodes = 1;                        ///< nodes in the job (M), >= 1; no elastic MIN:MAX
  int node_rank = 0;                     ///< this node, in [0, nnodes)
  std::string master_addr = "127.0.0.1"; ///< where rank 0's TCPStore listens
  int master_port = 0;                   ///< 0: chosen by parse_arguments (free port if nnodes == 1, else 29500)
  int max_restarts = 0;                  ///< group restarts after a failure, >= 0
  double grace_period_s = 5.0;           ///< seconds between SIGTERM and SIGKILL when stopping, >= 0
  std::vector<std::string> program;      ///< program and its arguments (program looked up in PATH)

  int world_size() const { return nnodes * nproc_per_node; }
  int global_rank(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
};

/// What parse_arguments found: a config, or an error message (empty on
/// success), or a request for help.
struct ParsedArguments {
  std::optional<LaunchConfig> config;
  std::string error; ///< "missing --nproc-per-node", "--node-rank 2 must be < --nnodes 2", ...
  bool help = false; ///< -h / --help: print help_text() and exit 0
};

/// Parses kilnrun's command line (without argv[0]). Options take "--opt V" or
/// "--opt=V"; the first argument that is not an option, or everything after
/// "--", is the program and its arguments. When --master-port is not given it
/// is chosen here: choose_free_port() for a single node, else 29500 (torchrun).
/// Never throws; errors are returned in ParsedArguments::error.
ParsedArguments parse_arguments(const std::vector<std::string> &args);

/// The one-line usage printed with every argument error.
std::string usage_line();
/// The usage line and a description of each option (--help).
std::string help_text();

/// A TCP port that was free a moment ago: binds port 0 on all addresses,
/// reads the port the kernel gave, closes the socket (torchrun's
/// get_free_port; another process can take it before rank 0 binds it).
/// Throws std::runtime_error when no socket can be bound.
int choose_free_port();

/// Where execvp would find `program`: a name with a '/' is taken as a path,
/// any other is searched in $PATH (default "/usr/bin:/bin"). Returns the
/// executable's path, or nullopt when none is found or it is not executable.
std::optional<std::string> find_program(const std::string &program);

/// The environment of local worker `local_rank` in round `restart_count`:
/// `base` ("KEY=VALUE" strings, e.g. environ) with these set (torchrun's
/// names): RANK = node_rank * N + local_rank, LOCAL_RANK, WORLD_SIZE = M * N,
/// LOCAL_WORLD_SIZE = N, GROUP_RANK = node_rank, GROUP_WORLD_SIZE = M,
/// MASTER_ADDR, MASTER_PORT, KILN_RESTART_COUNT (torchrun's
/// TORCHELASTIC_RESTART_COUNT) and KILN_MAX_RESTARTS; and OMP_NUM_THREADS=1
/// when N > 1 and `base` has none (torchrun's rule against oversubscribing).
std::vector<std::string> worker_environment(const LaunchConfig &config, int local_rank, int restart_count,
                                            const std::vector<std::string> &base);

/// "SIGKILL", "SIGSEGV", ... ("signal N" for one without a name here).
std::string signal_name(int signal);

/// How a worker ended, from waitid's si_code/si_status.
struct WorkerExit {
  bool signaled = false; ///< killed by a signal (else exited)
  int value = 0;         ///< the exit code, or the signal number
  bool failed() const { return signaled || value != 0; }
  /// kilnrun's exit code for it: the code itself, or 128 + signal (the shell's).
  int exit_code() const { return signaled ? 128 + value : value; }
  /// "exited with code 3" / "was killed by signal 9 (SIGKILL)".
  std::string describe() const;
};

/// Splits one worker stream into lines, each prefixed with "[rank R]: "
/// (torchrun's --tee prefix is "[default0]:"; Kiln names the global rank).
/// feed() returns the complete lines so far; finish() the unterminated rest,
/// with a newline added. A line over kMaxLineBytes comes out in pieces.
class LinePrefixer {
public:
  explicit LinePrefixer(int rank);
  std::vector<std::string> feed(const char *data, std::size_t size);
  std::vector<std::string> finish();

private:
  std::string prefix_;
  std::string partial_;
};

/// Runs one node's workers until they are done; returns kilnrun's exit code.
/// The supervisor (torch.distributed.elastic's LocalElasticAgent and
/// PContext, in one thread over poll):
///  - prints "kilnrun: N processes on node R of M, master A:P" on stderr;
///  - forks N workers, each in its own process group (setpgid) with
///    PR_SET_PDEATHSIG = SIGKILL (kilnrun killed by any means kills them),
///    stdout and stderr through pipes, then execvp's the program with
///    worker_environment(); a program that is not found gives
///    kUsageExitCode before anything starts;
///  - writes each worker line to the same stream of kilnrun with its prefix,
///    one write per line (lines never interleave), the unterminated last line
///    when the stream closes;
///  - when a worker fails (non-zero exit or a signal), SIGTERMs the other
///    groups, SIGKILLs them after grace_period_s, and restarts the whole group
///    with KILN_RESTART_COUNT + 1 while max_restarts allow; else prints which
///    rank failed first, how, and what to do, and returns that worker's
///    WorkerExit::exit_code();
///  - forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to every group (a second
///    one SIGKILLs at once), stops the group as above and returns 128 + signal;
///  - after every round SIGKILLs what is left of each worker's group (its
///    children), as torchrun's PContext.close() does, then reaps the workers.
/// Returns 0 when every worker of the last round exited 0. Throws
/// std::runtime_error when a pipe or a fork fails (the workers started die
/// with kilnrun through PR_SET_PDEATHSIG).
int launch(const LaunchConfig &config);

} // namespace kiln::runtime::distributed::kilnrun
