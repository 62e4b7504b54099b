// Generator.cpp - kiln-fuzz's ProgramGenerator: draws ops from the table
// (Ops.cpp), checks each on real values, and numbers the result.
#include <algorithm>
#include <cmath>
#include <map>

#include "Program.h"

namespace kiln::fuzz {

// ---- the generator ---------------------------------------------------------------------

int ProgramGenerator::pick(const std::function<bool(const Tensor &)> &ok) {
  std::map<int, int> uses;
  for (const Op &op : program.ops)
    for (int a : op.args) ++uses[a];
  std::vector<int> ids;
  std::vector<double> weights;
  auto consider = [&](int id, double recency) {
    if (!ok(value(id))) return;
    ids.push_back(id);
    // Recent values and values nobody reads yet are preferred: long chains,
    // and few dead ops.
    weights.push_back(recency * (uses.count(id) ? 1.0 : 3.0));
  };
  consider(0, 1.0);  // x; parameters are read by the op that made them
  for (size_t j = 0; j < op_values.size(); ++j) consider(kOpValue + static_cast<int>(j), 2.0 + static_cast<double>(j));
  if (ids.empty()) return -1;
  return ids[std::discrete_distribution<size_t>(weights.begin(), weights.end())(rng)];
}

int ProgramGenerator::add_param(const Shape &shape) {
  Input in;
  in.shape = shape;
  in.requires_grad = chance(0.6);
  in.buffer = !in.requires_grad && chance(0.5);
  program.inputs.push_back(in);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(numel_of(shape));
  for (auto &e : v) e = normal(rng);
  input_values.push_back(tensor(v, shape));
  return static_cast<int>(program.inputs.size()) - 1;
}

int ProgramGenerator::add_index(const Shape &shape, int64_t bound) {
  Input in;
  in.shape = shape;
  in.buffer = true;
  in.index_bound = bound;
  program.inputs.push_back(in);
  std::vector<int64_t> v(numel_of(shape));
  for (auto &e : v) e = uniform_int(0, bound - 1);
  input_values.push_back(tensor(v, shape));
  return static_cast<int>(program.inputs.size()) - 1;
}

namespace {

/// A new op's result is kept if it is small and, unless an operand was
/// already non-finite, finite and moderate (|v| < 1e4).
bool acceptable(const Tensor &result, const std::vector<Tensor> &operands) {
  if (!result.defined() || result.numel() == 0 || result.numel() > 2048) return false;
  for (const Tensor &t : operands)
    if (t.is_floating_point())
      for (double v : t.to_vector<double>())
        if (!std::isfinite(v)) return true;
  for (double v : result.to_vector<double>())
    if (!std::isfinite(v) || std::abs(v) >= 1e4) return false;
  return true;
}

}  // namespace

Program ProgramGenerator::generate() {
  program = Program();
  op_values.clear();
  program.batch = uniform_int(2, 5);
  Input x;
  const int kind = static_cast<int>(uniform_int(0, 3));
  if (kind == 0) x.shape = {program.batch, uniform_int(2, 8)};
  if (kind == 1) x.shape = {program.batch, uniform_int(2, 4), uniform_int(2, 6)};
  if (kind == 2) x.shape = {program.batch, uniform_int(1, 3), uniform_int(3, 6), uniform_int(3, 6)};
  if (kind == 3) x.shape = {program.batch, uniform_int(2, 12)};
  x.requires_grad = chance(0.5);
  program.inputs.push_back(x);
  input_values = make_inputs(program, program.batch, rng());

  const int target = static_cast<int>(uniform_int(2, 12));
  std::vector<double> weights;
  for (const OpDef &d : ops())
    weights.push_back(std::find(excluded.begin(), excluded.end(), d.name) == excluded.end() ? d.weight : 0.0);
  std::discrete_distribution<size_t> choose(weights.begin(), weights.end());
  for (int attempt = 0; static_cast<int>(program.ops.size()) < target && attempt < 40 * target; ++attempt) {
    const OpDef &def = ops()[choose(rng)];
    const size_t inputs_before = program.inputs.size();
    Op op;
    op.name = def.name;
    bool ok = false;
    try {
      if (def.make(*this, op)) {
        std::vector<Tensor> operands;
        for (int a : op.args) operands.push_back(value(a));
        Tensor result = def.apply(op, operands);
        if (acceptable(result, operands) && (!def.well_posed || def.well_posed(op, operands))) {
          program.ops.push_back(op);
          op_values.push_back(result.detach());
          ok = true;
        }
      }
    } catch (const Error &) {
    }
    if (!ok) {  // drop the inputs the rejected op added
      program.inputs.resize(inputs_before);
      input_values.resize(inputs_before);
    }
  }
  // Final numbering: inputs, then op values.
  const int n_inputs = static_cast<int>(program.inputs.size());
  for (Op &op : program.ops)
    for (int &a : op.args)
      if (a >= kOpValue) a = n_inputs + (a - kOpValue);
  return program;
}

}  // namespace kiln::fuzz
