// Program.h - the random programs of kiln-fuzz: a list of tensor ops over
// numbered values, generated valid by construction, replayed eagerly, under
// kiln::compile and in float64, written as text (a regression test's input)
// and as the C++ a user would write.
//
// Values: v0 is the user input x, [B, ...] float32 (B, the batch, changes
// between calls when the options ask for a dynamic-shape call); inputs
// v1..vk are the module's parameters and buffers (float32, or int64 index
// tensors); then one value per op, in order. The module returns the value of
// the last op. Ops come from one table (ops()), so adding an op adds it to
// generation, replay, printing and coverage.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::fuzz {

/// One program input. Index inputs are int64 in [0, index_bound).
struct Input {
  Shape shape;               ///< for v0, shape[0] is the batch and is replaced per call
  bool requires_grad = false;
  bool buffer = false;       ///< registered as a buffer (else as a parameter)
  int64_t index_bound = 0;   ///< > 0: an int64 index tensor with values in [0, index_bound)
};

/// One op: `name` from the op table, operands (value ids), attributes.
struct Op {
  std::string name;
  std::vector<int> args;
  std::vector<int64_t> ints;
  double scalar = 0.0;
};

struct Program {
  std::vector<Input> inputs;  ///< inputs[0] is x
  std::vector<Op> ops;
  int64_t batch = 4;          ///< the batch size of the first call

  int num_values() const { return static_cast<int>(inputs.size() + ops.size()); }
  /// Text form, one line: inputs ';' ops. Round-trips through parse().
  std::string str() const;
  /// Parses str()'s form; throws kiln::Error naming the bad token.
  static Program parse(const std::string &text);
  /// The forward body as C++ with Kiln's public API (for a bug report).
  std::string cpp() const;
};

/// Runs `p` on `values` (the inputs, in order; x at the batch of x's shape)
/// and returns every value (inputs first). Throws kiln::Error when an op is
/// invalid for these shapes (generation and shrinking use that to reject).
std::vector<Tensor> run_program(const Program &p, std::vector<Tensor> values);

/// True when every last-dim row of the float tensor `t` (dim >= 1, last dim
/// >= 2) varies: its variance exceeds 1e-3 mean^2 + 1e-4. layer_norm of a
/// constant row is 0/sqrt(eps), so a last-bit rounding of the row's mean is
/// amplified by 1/sqrt(eps) = 316: the generator draws layer_norm only on
/// varying rows, and the oracle calls a difference ill-conditioned where a
/// fresh call's values make a row constant (a rounding op before it).
bool rows_vary(const Tensor &t);

/// The op table entry: how to pick operands and attributes for a new op
/// (false: not applicable to the values so far), how to run it, and how to
/// print it as C++ (names[i] is the C++ name of args[i]).
struct ProgramGenerator;
struct OpDef {
  const char *name;
  bool graph_break;  ///< not capturable today: splits the graph (a graph break)
  std::function<bool(ProgramGenerator &, Op &)> make;
  std::function<Tensor(const Op &, const std::vector<Tensor> &)> apply;
  std::function<std::string(const Op &, const std::vector<std::string> &)> cpp;
  double weight = 1.0;  ///< relative frequency
  /// Optional: false rejects the op for these operand values (a selection
  /// op with a near-tie, whose result or gradient a last-bit rounding flips).
  std::function<bool(const Op &, const std::vector<Tensor> &)> well_posed;
};
const std::vector<OpDef> &ops();
const OpDef &op_def(const std::string &name);

/// Builds a random program: 2-12 ops, each checked by running it eagerly on
/// real inputs (an op whose result is not finite-and-moderate where its
/// operands were is redrawn, so inputs stay away from poles and domain edges).
struct ProgramGenerator {
  explicit ProgramGenerator(uint64_t seed, std::vector<std::string> excluded = {})
      : rng(seed), excluded(std::move(excluded)) {}
  Program generate();

  // For the op table's `make` functions:
  std::mt19937_64 rng;
  std::vector<std::string> excluded;  ///< op names never drawn
  /// The program so far. While generating, an op's args name an input by its
  /// index and op j's result by kOpValue + j (stable while inputs are added);
  /// generate() renumbers them to the final form (inputs, then ops).
  Program program;
  static constexpr int kOpValue = 1 << 20;
  std::vector<Tensor> input_values, op_values;  ///< eager values so far (at program.batch)
  const Tensor &value(int id) const { return id >= kOpValue ? op_values[id - kOpValue] : input_values[id]; }
  int64_t uniform_int(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }
  bool chance(double p) { return uniform(0, 1) < p; }
  /// A value id satisfying `ok`, preferring recent and unused values; -1 if none.
  int pick(const std::function<bool(const Tensor &)> &ok);
  /// Adds a float32 parameter/buffer input of `shape`; returns its value id.
  int add_param(const Shape &shape);
  /// Adds an int64 index input of `shape` with values in [0, bound).
  int add_index(const Shape &shape, int64_t bound);
};

/// Input tensors for `p` at batch `batch`, drawn from `seed`: floats from
/// N(0, 1) (parameters scaled 1/sqrt(fan-in) for matmul weights is not
/// needed: the generator keeps values moderate), indices uniform.
std::vector<Tensor> make_inputs(const Program &p, int64_t batch, uint64_t seed, DType float_type = kFloat32);

}  // namespace kiln::fuzz
