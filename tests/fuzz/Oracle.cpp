// Oracle.cpp - compiled vs eager vs float64 for one program; the shrinker.
#include "Oracle.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kiln::fuzz {

namespace {

/// The program as a module: x in, the last op's value out; the other inputs
/// registered as parameters ("p<k>", requires_grad as the program says) or
/// buffers. `float_type` converts the float inputs (float64 for the reference).
class ProgramModule : public nn::Module {
public:
  ProgramModule(const Program &p, const std::vector<Tensor> &inputs, DType float_type) : program_(p) {
    for (size_t i = 1; i < p.inputs.size(); ++i) {
      const Input &in = p.inputs[i];
      Tensor t = inputs[i].clone();
      if (t.is_floating_point()) t = t.to(float_type);
      const std::string name = "p" + std::to_string(i);
      tensors_.push_back(in.buffer || in.index_bound > 0 ? register_buffer(name, t)
                                                           : register_parameter(name, t, in.requires_grad));
    }
  }
  Tensor forward(const Tensor &x) override {
    std::vector<Tensor> values{x};
    values.insert(values.end(), tensors_.begin(), tensors_.end());
    return run_program(program_, std::move(values)).back();
  }
  std::string name() const override { return "FuzzProgram"; }
  const std::vector<Tensor> &tensors() const { return tensors_; }

private:
  Program program_;
  std::vector<Tensor> tensors_;
};

/// The tensors one call produces: the output and the gradients of x and of
/// every parameter (undefined when there is none).
struct CallResult {
  std::vector<Tensor> tensors;
  std::vector<std::string> names;
};

Tensor fixed_weights(const Shape &shape, uint64_t seed, DType type) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(numel_of(shape));
  for (auto &e : v) e = normal(rng);
  return tensor(v, shape).to(type);
}

CallResult run_call(nn::Module &m, const std::vector<Tensor> &params, const Tensor &x_value, bool x_grad,
                    uint64_t seed, DType float_type) {
  m.zero_grad(true);
  Tensor x = x_value.to(float_type).detach();  // a leaf of its own: the caller's x is reused
  if (x_grad) x.requires_grad_(true);
  manual_seed(seed);  // dropout draws the same masks in every run
  CallResult r;
  Tensor out = m.forward(x);
  if (out.requires_grad()) {
    Tensor w = fixed_weights(out.sizes(), seed + 7, out.dtype()).to(out.device());
    sum(out * w).backward();
  }
  r.tensors.push_back(out.detach());
  r.names.push_back("output");
  r.tensors.push_back(x.grad());
  r.names.push_back("x.grad");
  for (size_t i = 0; i < params.size(); ++i) {
    r.tensors.push_back(params[i].grad());
    r.names.push_back("p" + std::to_string(i + 1) + ".grad");
  }
  return r;
}

double rmse(const std::vector<double> &ref, const std::vector<double> &v, const std::vector<bool> &use) {
  double s = 0;
  int64_t n = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (use[i]) s += (ref[i] - v[i]) * (ref[i] - v[i]), ++n;
  return n ? std::sqrt(s / n) : 0.0;
}

/// Empty if `c` (compiled) passes against `e` (eager) and `r` (float64):
/// allclose at `tol`, else rmse(r, c) <= multiplier * rmse(r, e) + tol / 10.
std::string compare(const Tensor &c, const Tensor &e, const Tensor &r, double multiplier, double tol) {
  if (c.defined() != e.defined())
    return std::string("compiled ") + (c.defined() ? "defined" : "undefined") + ", eager " +
           (e.defined() ? "defined" : "undefined");
  if (!e.defined()) return "";
  if (c.sizes() != e.sizes()) return "shape " + shape_str(c.sizes()) + " compiled, " + shape_str(e.sizes()) + " eager";
  if (c.dtype() != e.dtype())
    return std::string("dtype ") + dtype_name(c.dtype()) + " compiled, " + dtype_name(e.dtype()) + " eager";
  const auto cv = c.to_vector<double>(), ev = e.to_vector<double>();
  const auto rv = r.defined() && r.sizes() == e.sizes() ? r.to_vector<double>() : ev;
  std::ostringstream os;
  os.precision(9);
  std::vector<bool> finite(cv.size());
  bool close = true;
  size_t worst = 0;
  double worst_diff = -1;
  for (size_t i = 0; i < cv.size(); ++i) {
    const bool cf = std::isfinite(cv[i]), ef = std::isfinite(ev[i]);
    if (!cf || !ef) {
      const bool same = (std::isnan(cv[i]) && std::isnan(ev[i])) || cv[i] == ev[i];
      if (!same) {
        os << "element " << i << ": " << cv[i] << " compiled, " << ev[i] << " eager (NaN/Inf must match)";
        return os.str();
      }
      continue;
    }
    finite[i] = std::isfinite(rv[i]);
    const double diff = std::abs(cv[i] - ev[i]);
    if (!c.is_floating_point() && diff != 0) {
      os << "element " << i << ": " << cv[i] << " compiled, " << ev[i] << " eager (integers must be equal)";
      return os.str();
    }
    if (diff > tol + tol * std::abs(ev[i])) close = false;
    if (diff > worst_diff) worst_diff = diff, worst = i;
  }
  if (close) return "";
  const double rc = rmse(rv, cv, finite), re = rmse(rv, ev, finite);
  if (rc <= multiplier * re + tol / 10) return "";
  os << "element " << worst << ": " << cv[worst] << " compiled, " << ev[worst] << " eager, " << rv[worst]
     << " float64; rmse vs float64 " << rc << " compiled, " << re << " eager";
  return os.str();
}

}  // namespace

std::string Options::str() const {
  std::ostringstream os;
  os << "budget=" << memory_budget << " remat=" << remat << " autocast=" << dtype_name(autocast)
     << " batch2=" << batch2;
  if (!device.is_cpu()) os << " device=" << device_type_name(device.type) << ":" << device.index;
  if (compiled) os << " compiled=1";
  return os.str();
}

Options Options::parse(const std::string &text) {
  Options o;
  std::stringstream ss(text);
  std::string tok;
  while (ss >> tok) {
    const size_t eq = tok.find('=');
    KILN_CHECK(eq != std::string::npos, "kiln-fuzz: bad option '", tok, "' (expected key=value)");
    const std::string k = tok.substr(0, eq), v = tok.substr(eq + 1);
    if (k == "budget") o.memory_budget = std::stod(v);
    else if (k == "remat") o.remat = v == "1";
    else if (k == "batch2") o.batch2 = std::stoll(v);
    else if (k == "autocast") o.autocast = v == "bfloat16" ? kBFloat16 : v == "float16" ? kFloat16 : kFloat32;
    else if (k == "compiled") o.compiled = v == "1";
    else if (k == "device") {
      KILN_CHECK(v == "cpu" || v.rfind("cuda", 0) == 0, "kiln-fuzz: bad device '", v, "' (cpu or cuda:N)");
      o.device = v == "cpu" ? kCPU : Device(DeviceType::CUDA, v.size() > 5 ? std::stoi(v.substr(5)) : 0);
    } else throw Error("kiln-fuzz: unknown option '" + k + "' (budget, remat, autocast, batch2, device, compiled)");
  }
  return o;
}

Options Options::random(std::mt19937_64 &rng, int64_t batch) {
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  Options o;
  if (chance(0.3)) o.memory_budget = chance(0.3) ? 0.0 : std::round(std::uniform_real_distribution<double>(0, 1)(rng) * 20) / 20;
  o.remat = !chance(0.15);
  if (chance(0.2)) o.autocast = chance(0.6) ? kBFloat16 : kFloat16;
  if (chance(0.4)) o.batch2 = batch + std::uniform_int_distribution<int64_t>(1, 3)(rng);
  return o;
}

namespace {

bool is_exp_like(const std::string &name) {
  return name == "exp" || name == "softmax" || name == "log_softmax" || name == "logsumexp";
}

/// The rows whose result jumps by 1 (or by the divisor) at integer points of
/// their argument: floor, ceil, trunc, round and the division modes.
bool is_jump_op(const std::string &name) {
  return name == "floor" || name == "ceil_trunc" || name == "round" || name == "floor_divide" ||
         name == "remainder" || name == "fmod";
}

/// The first jump op of p, or "" if it has none.
std::string first_jump_op(const Program &p) {
  for (const Op &op : p.ops)
    if (is_jump_op(op.name)) return op.name;
  return "";
}

/// The largest |argument| of p's exp-like ops when it runs eagerly (float32)
/// on `inputs` with x replaced by `x`.
double exp_argument_max(const Program &p, std::vector<Tensor> inputs, const Tensor &x) {
  NoGradGuard no_grad;
  inputs[0] = x;
  const std::vector<Tensor> values = run_program(p, inputs);
  double m = 0;
  for (const Op &op : p.ops) {
    if (!is_exp_like(op.name) || op.args.empty()) continue;
    const Tensor &a = values[op.args[0]];
    if (!a.is_floating_point()) continue;
    for (double v : a.to_vector<double>())
      if (std::isfinite(v)) m = std::max(m, std::abs(v));
  }
  return m;
}

/// rmse between the finite elements of two float tensors of one shape.
double rmse_between(const Tensor &a, const Tensor &b) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<bool> use(av.size());
  for (size_t i = 0; i < av.size(); ++i) use[i] = std::isfinite(av[i]) && std::isfinite(bv[i]);
  return rmse(av, bv, use);
}

/// `t` with every element moved by a relative `step` times a uniform draw
/// in [-1, 1] (integer tensors unchanged).
Tensor perturbed(const Tensor &t, double step, std::mt19937_64 &rng) {
  if (!t.defined() || !t.is_floating_point()) return t;
  std::vector<float> v = t.to_vector<float>();
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (float &e : v) e = static_cast<float>(e * (1.0 + step * u(rng)));
  return tensor(v, t.sizes()).to(t.dtype());
}

/// Perturbed eager runs sixteen_bit_spread takes the largest move of (one
/// draw can land on a lucky direction; they run only for a mismatch).
constexpr int kSpreadDraws = 4;

/// How far tensor `k` of p's eager 16-bit autocast run moves (rmse) when
/// every float input and parameter moves by one 16-bit rounding step
/// (relative 2^-8 for bfloat16, 2^-11 for float16): the noise any two
/// correct 16-bit evaluations may differ by, which a result that cancels
/// (a small sum of large terms) amplifies far beyond one step.
double sixteen_bit_spread(const Program &p, const Options &o, const std::vector<Tensor> &inputs, const Tensor &x,
                          uint64_t seed, size_t k, const Tensor &eager_value) {
  const double step = o.autocast == kBFloat16 ? 1.0 / 256 : 1.0 / 2048;
  std::mt19937_64 rng(seed ^ 0x5eed5eedULL);
  double spread = 0;
  for (int draw = 0; draw < kSpreadDraws && eager_value.defined(); ++draw) {
    std::vector<Tensor> moved;
    for (const Tensor &t : inputs) moved.push_back(perturbed(t, step, rng));
    ProgramModule m(p, moved, kFloat32);
    AutocastGuard amp(o.autocast);
    CallResult e = run_call(m, m.tensors(), perturbed(x, step, rng), p.inputs[0].requires_grad, seed, kFloat32);
    if (k < e.tensors.size() && e.tensors[k].defined())
      spread = std::max(spread, rmse_between(e.tensors[k].to(kFloat32), eager_value.to(kFloat32)));
  }
  return spread;
}

/// True when some layer_norm of p normalizes a (nearly) constant row when p
/// runs eagerly (float32) on `inputs` with x replaced by `x` (rows_vary).
bool layer_norm_of_constant_row(const Program &p, std::vector<Tensor> inputs, const Tensor &x) {
  NoGradGuard no_grad;
  inputs[0] = x;
  const std::vector<Tensor> values = run_program(p, inputs);
  for (const Op &op : p.ops)
    if (op.name == "layer_norm" && !op.args.empty() && !rows_vary(values[op.args[0]])) return true;
  return false;
}

}  // namespace

/// torch._dynamo same()'s tolerance for the eager tensor `e`: multiplier 3
/// for 16-bit results and for tensors under 1000 elements ("noise might
/// dominate"), else 2; tol 1e-4, and 1e-2 with 16-bit work, as dynamo's
/// benchmark runners use for training under amp.
struct Tolerance {
  double multiplier, tol;
};
Tolerance dynamo_tolerance(const Tensor &e, bool sixteen) {
  return {sixteen || (e.defined() && e.numel() < 1000) ? 3.0 : 2.0, sixteen ? 1e-2 : 1e-4};
}

std::string same(const Tensor &tested, const Tensor &expected, const Tensor &reference, bool sixteen) {
  const Tolerance t = dynamo_tolerance(expected, sixteen);
  return compare(tested, expected, reference, t.multiplier, t.tol);
}

bool is_sixteen_bit(const Tensor &t) { return t.defined() && (t.dtype() == kBFloat16 || t.dtype() == kFloat16); }

/// The verdict of a difference `why` (non-empty) in tensor `name` of call
/// `call` at `batch`: ill-conditioned when a layer_norm row of this call is
/// constant, else a mismatch. The generator drew layer_norm on varying rows;
/// a fresh call's values can still make a row constant (a rounding op before
/// it: seed 10200 graph 482, floor_divide(p, |v| + 0.5) + p), where eager's
/// mean is exact and the other a last bit off, times 1/sqrt(eps).
Verdict difference(const Program &p, const std::vector<Tensor> &inputs, const Tensor &x, size_t call, int64_t batch,
                   const std::string &name, const std::string &why) {
  Verdict v;
  if (layer_norm_of_constant_row(p, inputs, x)) {
    v.status = Verdict::IllConditioned;
    v.message = "layer_norm of a constant row: " + why;
    return v;
  }
  v.status = Verdict::Mismatch;
  v.message = "call " + std::to_string(call + 1) + " (batch " + std::to_string(batch) + "), " + name + ": " + why;
  return v;
}

/// check() for Options::device: eager on the device vs eager on the cpu.
Verdict check_on_device(const Program &p, const Options &o, uint64_t seed) {
  const std::vector<Tensor> inputs = make_inputs(p, p.batch, seed);
  std::vector<Tensor> device_inputs;
  for (const Tensor &t : inputs) device_inputs.push_back(t.to(o.device));
  ProgramModule cpu(p, inputs, kFloat32), reference(p, inputs, kFloat64);
  auto dev = std::make_shared<ProgramModule>(p, device_inputs, kFloat32);
  std::shared_ptr<nn::Module> run_dev = dev;
  if (o.compiled) run_dev = compile(dev);
  std::vector<int64_t> batches{p.batch};
  if (o.compiled) batches.push_back(p.batch);  // the second call runs the cached artifact
  if (o.batch2 > 0) batches.push_back(o.batch2);
  Verdict v;
  for (size_t call = 0; call < batches.size(); ++call) {
    const uint64_t call_seed = seed * 1000003 + call + 1;
    const Tensor x = make_inputs(p, batches[call], call_seed)[0];
    CallResult e, r, d;
    try {
      e = run_call(cpu, cpu.tensors(), x, p.inputs[0].requires_grad, call_seed, kFloat32);
      r = run_call(reference, reference.tensors(), x, p.inputs[0].requires_grad, call_seed, kFloat64);
    } catch (const Error &err) {
      if (call > 0) break;  // the program does not fit the second batch size
      v.status = Verdict::Invalid;
      v.message = std::string("eager throws: ") + err.what();
      return v;
    }
    try {
      d = run_call(*run_dev, dev->tensors(), x.to(o.device), p.inputs[0].requires_grad, call_seed, kFloat32);
    } catch (const std::exception &err) {
      v.status = Verdict::CompiledError;
      v.message = "call " + std::to_string(call + 1) + ": " + o.device.str() + " throws where cpu runs: " + err.what();
      return v;
    }
    for (size_t k = 0; k < e.tensors.size(); ++k) {
      const Tensor dt = d.tensors[k].defined() ? d.tensors[k].cpu() : Tensor(), et = e.tensors[k];
      const Tolerance t = dynamo_tolerance(et, is_sixteen_bit(et));
      const std::string why = compare(dt, et, r.tensors[k], t.multiplier, t.tol);
      if (!why.empty())
        return difference(p, inputs, x, call, batches[call], e.names[k] + " on " + o.device.str() + " vs cpu", why);
    }
  }
  return v;
}

Verdict check(const Program &p, const Options &o, uint64_t seed) {
  if (!o.device.is_cpu()) return check_on_device(p, o, seed);
  const std::vector<Tensor> inputs = make_inputs(p, p.batch, seed);
  ProgramModule eager(p, inputs, kFloat32), reference(p, inputs, kFloat64);
  auto inner = std::make_shared<ProgramModule>(p, inputs, kFloat32);
  CompileOptions copts;
  copts.memory_budget = o.memory_budget;
  copts.remat = o.remat;
  copts.autocast = o.autocast;
  auto compiled = compile(inner, copts);
  const bool low_precision = o.autocast != kFloat32;
  std::vector<int64_t> batches{p.batch, p.batch};
  if (o.batch2 > 0) batches.push_back(o.batch2);
  Verdict v;
  for (size_t call = 0; call < batches.size(); ++call) {
    const uint64_t call_seed = seed * 1000003 + call + 1;
    const Tensor x = make_inputs(p, batches[call], call_seed)[0];
    CallResult e, r, c;
    try {
      std::unique_ptr<AutocastGuard> amp;
      if (low_precision) amp = std::make_unique<AutocastGuard>(o.autocast);
      e = run_call(eager, eager.tensors(), x, p.inputs[0].requires_grad, call_seed, kFloat32);
      amp.reset();
      r = run_call(reference, reference.tensors(), x, p.inputs[0].requires_grad, call_seed, kFloat64);
    } catch (const Error &err) {
      if (call == 2) break;  // the program does not fit the second batch size
      v.status = Verdict::Invalid;
      v.message = std::string("eager throws: ") + err.what();
      return v;
    }
    try {
      c = run_call(*compiled, inner->tensors(), x, p.inputs[0].requires_grad, call_seed, kFloat32);
    } catch (const std::exception &err) {
      v.status = Verdict::CompiledError;
      v.message = "call " + std::to_string(call + 1) + " (batch " + std::to_string(batches[call]) +
                  "): compiled throws where eager runs: " + err.what();
      return v;
    }
    for (size_t k = 0; k < e.tensors.size(); ++k) {
      Tensor ct = c.tensors[k], et = e.tensors[k];
      const bool half = is_sixteen_bit(et);
      // Eager autocast returns 16-bit results where the compiled graph keeps
      // the output dtype (CompileOptions::autocast): compare the values.
      if (low_precision && ct.defined() && et.defined() && ct.is_floating_point() && et.is_floating_point())
        ct = ct.to(kFloat32), et = et.to(kFloat32);
      const bool sixteen = low_precision || half;
      const Tolerance t = dynamo_tolerance(et, sixteen);
      const double multiplier = t.multiplier;
      std::string why = compare(ct, et, r.tensors[k], multiplier, t.tol);
      if (!why.empty() && low_precision) {
        const double bound = o.autocast == kBFloat16 ? 2.0 : 16.0;
        const double m = exp_argument_max(p, inputs, x);
        if (m > bound) {
          v.status = Verdict::IllConditioned;
          v.message = "16-bit autocast with an exp-like argument of " + std::to_string(m) + " (> " +
                      std::to_string(bound) + "): " + why;
          return v;
        }
        // A rounding or division-mode op turns one 16-bit rounding of its
        // argument (eager rounds a linear's output to bf16, the compiled
        // graph keeps f32) into a whole step when the argument of a fresh
        // call's input lies near a jump (seed 1883430438073930 graph 150).
        if (const std::string jump = first_jump_op(p); !jump.empty()) {
          v.status = Verdict::IllConditioned;
          v.message = "16-bit autocast with a rounding op (" + jump + "): " + why;
          return v;
        }
        // A result that cancels: compiled and eager round at different
        // points (eager rounds a linear's output and bias add to bfloat16,
        // the compiled graph keeps float32), and each rounding moves it by
        // the spread of a one-step perturbation of the inputs. Within
        // `multiplier` times (eager's error + that spread), both are
        // correct 16-bit evaluations (seed 1883438679480646 graph 273: a
        // scalar gradient summing 60 cancelling products).
        if (r.tensors[k].defined() && ct.defined()) {
          const double spread = sixteen_bit_spread(p, o, inputs, x, call_seed, k, e.tensors[k]);
          const double err_c = rmse_between(ct, r.tensors[k].to(kFloat32));
          const double err_e = rmse_between(et, r.tensors[k].to(kFloat32));
          if (err_c <= multiplier * (err_e + spread)) {
            v.status = Verdict::IllConditioned;
            v.message = "16-bit autocast on a result that moves by " + std::to_string(spread) +
                        " (rmse) when the inputs move by one 16-bit step: " + why;
            return v;
          }
        }
      }
      if (!why.empty()) return difference(p, inputs, x, call, batches[call], e.names[k], why);
    }
  }
  return v;
}

// ---- shrinking ---------------------------------------------------------------------------

namespace {

/// `p` without op `k`: its readers read its first operand instead.
bool drop_op(const Program &p, size_t k, Program *out) {
  const Op &op = p.ops[k];
  if (op.args.empty()) return false;
  const int removed = static_cast<int>(p.inputs.size() + k);
  *out = p;
  out->ops.erase(out->ops.begin() + k);
  for (Op &o : out->ops)
    for (int &a : o.args)
      if (a == removed) a = op.args[0];
      else if (a > removed) --a;
  return !out->ops.empty();
}

/// `p` without input `k` (>= 1) if nothing reads it.
bool drop_input(const Program &p, size_t k, Program *out) {
  const int id = static_cast<int>(k);
  for (const Op &o : p.ops)
    for (int a : o.args)
      if (a == id) return false;
  *out = p;
  out->inputs.erase(out->inputs.begin() + k);
  for (Op &o : out->ops)
    for (int &a : o.args)
      if (a > id) --a;
  return true;
}

}  // namespace

Program shrink(Program p, Options *o, uint64_t seed, int max_checks) {
  int checks = 0;
  auto still_fails = [&](const Program &cand, const Options &opts) {
    if (checks >= max_checks) return false;
    ++checks;
    try {
      return check(cand, opts, seed).failed();
    } catch (const Error &) {
      return false;
    }
  };
  for (bool progress = true; progress && checks < max_checks;) {
    progress = false;
    // Options first: each simplification that keeps the failure stays.
    for (int which = 0; which < 4; ++which) {
      Options cand = *o;
      if (which == 0) cand.batch2 = 0;
      if (which == 1) cand.autocast = kFloat32;
      if (which == 2) cand.memory_budget = 1.0;
      if (which == 3) cand.remat = true;
      if (cand.str() != o->str() && still_fails(p, cand)) *o = cand, progress = true;
    }
    for (size_t k = p.ops.size(); k-- > 0;) {
      Program cand;
      if (k < p.ops.size() && drop_op(p, k, &cand) && still_fails(cand, *o)) p = cand, progress = true;
    }
    for (size_t k = p.inputs.size(); k-- > 1;) {
      Program cand;
      if (drop_input(p, k, &cand)) {
        p = cand;  // an unread input changes nothing the program computes
        progress = true;
      }
    }
    for (size_t k = 0; k < p.inputs.size(); ++k) {
      if (!p.inputs[k].requires_grad) continue;
      Program cand = p;
      cand.inputs[k].requires_grad = false;
      if (still_fails(cand, *o)) p = cand, progress = true;
    }
  }
  return p;
}

std::string gtest_case(const std::string &name, const Program &p, const Options &o, uint64_t seed,
                       const std::string &message) {
  std::ostringstream os;
  os << "// " << message << "\n// forward(x):\n";
  std::istringstream body(p.cpp());
  for (std::string line; std::getline(body, line);) os << "//   " << line << "\n";
  os << "TEST" << "(FuzzRegression, " << name << ") {\n"
     << "  expect_compiled_matches_eager(\"" << p.str() << "\",\n"
     << "                                \"" << o.str() << "\", " << seed << "u);\n"
     << "}\n";
  return os.str();
}

}  // namespace kiln::fuzz
