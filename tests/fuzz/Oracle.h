// Oracle.h - kiln-fuzz's differential oracle: a program run under
// kiln::compile against the same program run eagerly and eagerly in float64.
//
// The rule is torch._dynamo's (torch/_dynamo/utils.py, same() with
// fp64_ref): a compiled tensor passes if allclose(compiled, eager, tol, tol);
// else if rmse(f64, compiled) <= m * rmse(f64, eager) + tol / 10, with
// tol = 1e-4 (1e-2 for 16-bit work: autocast or a 16-bit tensor, as dynamo's
// benchmark runners use under amp) and m as same()'s get_multiplier: 3 for
// 16-bit and for tensors under 1000 elements, else 2. NaN and +-Inf must sit
// at the same places with the same sign in both; integer tensors must be
// equal; a gradient eager leaves undefined must be undefined compiled.
#pragma once

#include <string>

#include "Program.h"

namespace kiln::fuzz {

/// The compile options and calls a check makes.
struct Options {
  double memory_budget = 1.0;
  bool remat = true;
  DType autocast = kFloat32;  ///< kBFloat16 / kFloat16: CompileOptions::autocast, eager under AutocastGuard
  /// > 0: after two calls at the program's batch, a third at this batch
  /// (automatic dynamic shapes make the batch dim symbolic).
  int64_t batch2 = 0;
  /// Not the cpu: the program runs eagerly on this device against the same
  /// program eagerly on the cpu (and float64 on the cpu), with the same rule;
  /// the compile options are unused (kiln-fuzz --device cuda-sim).
  Device device = kCPU;
  /// With a device: the program compiled there (kiln::compile with the
  /// device's target: the CUDA target on cuda) instead of run eagerly, two
  /// calls (compile, then the cached artifact), against eager on the cpu
  /// (kiln-fuzz --device cuda-sim --compiled).
  bool compiled = false;

  std::string str() const;
  static Options parse(const std::string &text);
  static Options random(std::mt19937_64 &rng, int64_t batch);
};

struct Verdict {
  /// IllConditioned: a program differed where the float64 oracle cannot
  /// judge it (16-bit rounding near a jump or of a large exp argument, a
  /// layer_norm of a constant row; see check()); not a failure.
  enum Status { Pass, Mismatch, CompiledError, Invalid, IllConditioned };
  Status status = Pass;
  std::string message;  ///< what differed: the call, the tensor, the values
  bool failed() const { return status == Mismatch || status == CompiledError; }
};

/// Runs `p` with options `o` and inputs drawn from `seed`: calls at the
/// program's batch twice (the second one hits the compiled cache) and at
/// o.batch2 if set; in each, forward and, when the output requires grad,
/// backward of sum(out * w) for a fixed random w; compares the output and
/// every input gradient. Invalid: the program does not run eagerly (only
/// possible for hand-edited or shrunk programs; a call at batch2 that eager
/// rejects is skipped instead). IllConditioned: under 16-bit autocast, a
/// difference in a program whose exp-like ops (exp, softmax, log_softmax,
/// logsumexp) see arguments beyond |x| = 2 (bfloat16) or 16 (float16): their
/// result's relative error is |x| times a one-step 16-bit rounding of x, so
/// two correct 16-bit evaluations differ by more than the tolerance (eager
/// rounds a product to bfloat16 where a fused kernel keeps it in float32;
/// seed 9300 graph 156: exp of ~11), as sin/cos arguments over 4 are kept
/// out by the generator.
Verdict check(const Program &p, const Options &o, uint64_t seed);

/// The rule above for one tensor: empty if `tested` passes against
/// `expected` (the trusted run: eager, or eager on the cpu) and `reference`
/// (that run in float64; undefined or of another shape: `expected` stands
/// in), else what differed, naming the element and the three values.
/// `sixteen`: 16-bit work (tol 1e-2, multiplier 3). Tensors of any device.
std::string same(const Tensor &tested, const Tensor &expected, const Tensor &reference, bool sixteen);

/// Shrinks a failing (p, o) while check() still fails: drops ops (a dropped
/// op's readers read its first operand instead), unused inputs,
/// requires_grad flags and options; at most `max_checks` checks.
Program shrink(Program p, Options *o, uint64_t seed, int max_checks = 200);

/// A GoogleTest case that replays (p, o, seed) through check(), ready to
/// paste into tests/fuzz/regressions_test.cpp, with the C++ of the program
/// and the failure as comments.
std::string gtest_case(const std::string &name, const Program &p, const Options &o, uint64_t seed,
                       const std::string &message);

}  // namespace kiln::fuzz
