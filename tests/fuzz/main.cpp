// kiln-fuzz: random-graph differential testing of kiln::compile.
//
//   kiln-fuzz [--seed S|random] [--graphs N] [--device cpu|cuda-sim|cuda [--compiled]] [--graph K]
//             [--no-shrink] [--no-fork] [--max-failures F] [--verbose]
//             [--exclude OP,OP...]
//   kiln-fuzz --replay PROGRAM [--options OPTIONS] [--input-seed N]
//
// Graph k of seed S is generated from (S, k) alone, so `--seed S --graph k`
// replays one. Each graph runs in a forked child, so a crash (a signal) is a
// reported failure, not the end of the campaign; a failure is shrunk and
// printed as a GoogleTest case for tests/fuzz/regressions_test.cpp. The
// summary gives throughput (graphs/s) and the coverage per op, per dtype and
// per option. Exit status: 0 when every graph passed, 1 otherwise.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "Oracle.h"

using namespace kiln;
using namespace kiln::fuzz;

namespace {

struct Args {
  uint64_t seed = 1;
  int graphs = 100;
  int only = -1;
  bool shrink = true, fork = true, verbose = false;
  int max_failures = 10;
  std::vector<std::string> excluded;  ///< --exclude: ops never drawn
  Device device = kCPU;               ///< --device: cuda runs each program eagerly there against the cpu
  bool compiled = false;              ///< --compiled (with --device): compiled there instead of eagerly
  std::string replay, replay_options;  ///< --replay: check one program (Program::str() form)
  uint64_t input_seed = 1;
};

[[noreturn]] void usage(const char *why) {
  std::fprintf(stderr,
               "kiln-fuzz: %s\nusage: kiln-fuzz [--seed S|random] [--graphs N] [--device cpu|cuda-sim|cuda [--compiled]] [--graph K] "
               "[--no-shrink] [--no-fork] [--max-failures F] [--verbose] [--exclude OP,...]\n"
               "       kiln-fuzz --replay PROGRAM [--options OPTIONS] [--input-seed N]\n",
               why);
  std::exit(2);
}

Args parse_args(int argc, char **argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + k).c_str());
      return argv[++i];
    };
    if (k == "--seed") {
      const std::string v = value();
      a.seed = v == "random" ? std::random_device{}() ^ (static_cast<uint64_t>(std::time(nullptr)) << 20)
                             : std::stoull(v);
    } else if (k == "--graphs") {
      a.graphs = std::stoi(value());
    } else if (k == "--graph") {
      a.only = std::stoi(value());
    } else if (k == "--device") {
      const std::string d = value();
      if (d == "cuda-sim") {
        ::setenv("KILN_CUDA_SIM", "1", 1);  // the simulator serves cuda:0 (runtime/src/cuda/CudaRegistry.cpp)
        a.device = Device(DeviceType::CUDA, 0);
      } else if (d == "cuda") {
        a.device = Device(DeviceType::CUDA, 0);
      } else if (d != "cpu") {
        usage(("unknown device '" + d + "' (cpu, cuda-sim or cuda)").c_str());
      }
    } else if (k == "--compiled") {
      a.compiled = true;
    } else if (k == "--no-shrink") {
      a.shrink = false;
    } else if (k == "--no-fork") {
      a.fork = false;
    } else if (k == "--max-failures") {
      a.max_failures = std::stoi(value());
    } else if (k == "--exclude") {
      std::istringstream list(value());
      for (std::string op; std::getline(list, op, ',');) {
        op_def(op);  // throws on an unknown name
        a.excluded.push_back(op);
      }
    } else if (k == "--replay") {
      a.replay = value();
    } else if (k == "--options") {
      a.replay_options = value();
    } else if (k == "--input-seed") {
      a.input_seed = std::stoull(value());
    } else if (k == "--verbose") {
      a.verbose = true;
    } else {
      usage(("unknown argument " + k).c_str());
    }
  }
  return a;
}

/// What one graph gave: its status line, for the summary, and its report.
struct Outcome {
  std::string status;  ///< pass, mismatch, error, invalid, crash
  std::vector<std::string> ops;
  std::string options, dtypes;
  std::string report;
};

std::string dtypes_of(const Program &p, const Options &o) {
  std::set<std::string> d{"float32"};
  for (const Op &op : p.ops) {
    if (op.name == "round_bf16") d.insert("bfloat16");
    if (op.name == "round_f16") d.insert("float16");
    if (op.name == "via_f64") d.insert("float64");
  }
  for (const Input &in : p.inputs)
    if (in.index_bound > 0) d.insert("int64");
  if (o.autocast != kFloat32) d.insert(std::string("autocast-") + dtype_name(o.autocast));
  std::string s;
  for (const auto &e : d) s += (s.empty() ? "" : ",") + e;
  return s;
}

/// The summary's name of a verdict (a crash, seen only by the parent, is "crash").
const char *status_name(Verdict::Status s) {
  switch (s) {
  case Verdict::Pass: return "pass";
  case Verdict::Invalid: return "invalid";
  case Verdict::Mismatch: return "mismatch";
  case Verdict::CompiledError: return "error";
  case Verdict::IllConditioned: return "ill-conditioned";
  }
  return "error";
}

uint64_t graph_seed(uint64_t seed, int k) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(k)};
  std::mt19937_64 rng(seq);
  return rng();
}

/// Generates, checks and (on failure) shrinks graph k.
Outcome run_graph(const Args &a, int k) {
  const uint64_t gs = graph_seed(a.seed, k);
  ProgramGenerator gen(gs, a.excluded);
  Program p = gen.generate();
  std::mt19937_64 rng(gs ^ 0x9e3779b97f4a7c15ull);
  Options o = Options::random(rng, p.batch);
  if (!a.device.is_cpu()) {
    o = Options();  // eager (or --compiled) on the device vs eager on the cpu: no compile options
    o.device = a.device;
    o.compiled = a.compiled;
  }
  Outcome out;
  for (const Op &op : p.ops) out.ops.push_back(op.name);
  out.options = o.str();
  out.dtypes = dtypes_of(p, o);
  if (a.verbose) std::fprintf(stderr, "graph %d: %s | %s\n", k, p.str().c_str(), o.str().c_str());
  Verdict v;
  try {
    v = check(p, o, gs);
  } catch (const std::exception &e) {
    v.status = Verdict::CompiledError;
    v.message = std::string("the check itself threw: ") + e.what();
  }
  out.status = status_name(v.status);
  if (a.verbose && !v.message.empty()) std::fprintf(stderr, "graph %d: %s: %s\n", k, out.status.c_str(), v.message.c_str());
  if (!v.failed()) return out;
  const size_t ops_before = p.ops.size();
  if (a.shrink) {
    Program small = shrink(p, &o, gs);
    Verdict sv = check(small, o, gs);
    if (sv.failed()) p = small, v = sv;
  }
  out.status = status_name(v.status);
  char name[64];
  std::snprintf(name, sizeof name, "Seed%llu_Graph%d", static_cast<unsigned long long>(a.seed), k);
  out.report = "kiln-fuzz --seed " + std::to_string(a.seed) + " --graph " + std::to_string(k) + ": " + out.status +
               " (shrunk from " + std::to_string(ops_before) + " to " + std::to_string(p.ops.size()) + " ops)\n" +
               gtest_case(name, p, o, gs, v.message);
  return out;
}

/// Runs graph k in a child process; a child killed by a signal is a crash.
Outcome run_forked(const Args &a, int k) {
  int fds[2];
  if (pipe(fds) != 0) return run_graph(a, k);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Outcome o = run_graph(a, k);
    std::string msg = o.status + "\n" + o.options + "\n" + o.dtypes + "\n";
    for (const auto &op : o.ops) msg += op + " ";
    msg += "\n" + o.report;
    for (size_t off = 0; off < msg.size();) {
      const ssize_t w = write(fds[1], msg.data() + off, msg.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  Outcome o;
  if (WIFSIGNALED(status) || msg.empty()) {
    o.status = "crash";
    o.report = "kiln-fuzz --seed " + std::to_string(a.seed) + " --graph " + std::to_string(k) + " --no-fork: crash (" +
               (WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "no result") + ")\n";
    return o;
  }
  auto next_line = [&](size_t &pos) {
    const size_t end = msg.find('\n', pos);
    std::string line = msg.substr(pos, end - pos);
    pos = end == std::string::npos ? msg.size() : end + 1;
    return line;
  };
  size_t pos = 0;
  o.status = next_line(pos);
  o.options = next_line(pos);
  o.dtypes = next_line(pos);
  std::istringstream ops(next_line(pos));
  for (std::string op; ops >> op;) o.ops.push_back(op);
  o.report = msg.substr(pos);
  return o;
}

}  // namespace

int main(int argc, char **argv) {
  Args a;
  try {
    a = parse_args(argc, argv);
  } catch (const std::exception &e) {
    usage(e.what());
  }
  if (!a.replay.empty()) {
    const Verdict v = check(Program::parse(a.replay), Options::parse(a.replay_options), a.input_seed);
    std::printf("%s%s%s\n", status_name(v.status), v.message.empty() ? "" : ": ", v.message.c_str());
    return v.failed() ? 1 : 0;
  }
  std::printf("kiln-fuzz: seed %llu, %d graphs (replay: kiln-fuzz --seed %llu [--graph K])\n",
              static_cast<unsigned long long>(a.seed), a.only >= 0 ? 1 : a.graphs,
              static_cast<unsigned long long>(a.seed));
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, int> statuses;
  std::map<std::string, std::pair<int, int>> per_op, per_dtype, per_option;  // graphs, failures
  int failures = 0, run = 0;
  const int first = a.only >= 0 ? a.only : 0, last = a.only >= 0 ? a.only + 1 : a.graphs;
  for (int k = first; k < last; ++k) {
    Outcome o = a.fork ? run_forked(a, k) : run_graph(a, k);
    ++run;
    ++statuses[o.status];
    const bool failed = o.status == "mismatch" || o.status == "error" || o.status == "crash";
    std::set<std::string> seen(o.ops.begin(), o.ops.end());
    for (const auto &op : seen) per_op[op].first++, per_op[op].second += failed;
    std::istringstream dts(o.dtypes);
    for (std::string d; std::getline(dts, d, ',');) per_dtype[d].first++, per_dtype[d].second += failed;
    std::istringstream opts(o.options);
    for (std::string kv; opts >> kv;) per_option[kv].first++, per_option[kv].second += failed;
    if (failed) {
      ++failures;
      std::printf("\n---- FAILURE %d ----\n%s\n", failures, o.report.c_str());
      std::fflush(stdout);
      if (failures >= a.max_failures) {
        std::printf("kiln-fuzz: stopping after %d failures (--max-failures)\n", failures);
        break;
      }
    }
    if (run % 50 == 0) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("kiln-fuzz: %d graphs, %d failures, %.1f s, %.2f graphs/s\n", run, failures, s, run / s);
      std::fflush(stdout);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\nkiln-fuzz summary: seed %llu, %d graphs in %.1f s (%.2f graphs/s):",
              static_cast<unsigned long long>(a.seed), run, seconds, run / seconds);
  for (const auto &[s, n] : statuses) std::printf(" %s %d", s.c_str(), n);
  std::printf("\n  coverage per op (graphs containing it / failing):\n");
  int col = 0;
  for (const auto &d : ops()) {
    auto it = per_op.find(d.name);
    const auto c = it == per_op.end() ? std::pair<int, int>{0, 0} : it->second;
    std::printf("    %-16s %5d/%-3d%s", d.name, c.first, c.second, ++col % 4 == 0 ? "\n" : "");
  }
  std::printf("\n  coverage per dtype:");
  for (const auto &[d, c] : per_dtype) std::printf(" %s %d/%d", d.c_str(), c.first, c.second);
  std::printf("\n  coverage per option:");
  for (const auto &[d, c] : per_option) std::printf(" %s %d/%d", d.c_str(), c.first, c.second);
  std::printf("\n");
  return failures == 0 ? 0 : 1;
}
