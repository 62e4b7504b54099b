// Ops.cpp - kiln-fuzz's op table and the program generator.
//
// Each entry picks operands among the values so far (or adds a parameter of
// a fitting shape), runs the op with Kiln's public API and prints the same
// call as C++. Domain-sensitive ops (log, sqrt, rsqrt, fractional pow, the
// divisor of div) read abs(a) + 0.5, so inputs never reach a pole or a
// domain edge, as NNSmith guards them; NaN enters only on purpose
// (masked_nan), to check that it propagates as in eager.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "Program.h"

namespace kiln::fuzz {

namespace F = kiln::nn::functional;

namespace {

bool is_float(const Tensor &t) { return t.is_floating_point() && t.numel() > 0; }
bool rank_at_least(const Tensor &t, int64_t r) { return is_float(t) && t.dim() >= r; }

std::string ints_cpp(const std::vector<int64_t> &v) {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "}";
  return os.str();
}

std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".einf") == std::string::npos) s += ".0";
  return s;
}

/// abs(a) + 0.5: keeps a domain-sensitive op away from 0 and negatives.
Tensor away_from_zero(const Tensor &a) { return abs(a) + 0.5; }
std::string away_from_zero_cpp(const std::string &a) { return "abs(" + a + ") + 0.5"; }

/// A random non-empty subset of [0, rank) in increasing order.
std::vector<int64_t> random_dims(ProgramGenerator &g, int64_t rank) {
  std::vector<int64_t> dims;
  while (dims.empty())
    for (int64_t d = 0; d < rank; ++d)
      if (g.chance(0.4)) dims.push_back(d);
  return dims;
}

/// The dims of a shape a parameter may take to broadcast against `shape`: some
/// dims become 1 and leading dims may be dropped; a dim equal to the batch is
/// always 1 (it may be the batch, which changes between calls).
Shape broadcast_param_shape(ProgramGenerator &g, const Shape &shape) {
  Shape s = shape;
  for (auto &d : s)
    if (d == g.program.batch || g.chance(0.3)) d = 1;
  int64_t drop = g.uniform_int(0, static_cast<int64_t>(s.size()));
  if (g.chance(0.5)) drop = 0;
  s.erase(s.begin(), s.begin() + drop);
  return s;
}

// ---- entry builders ------------------------------------------------------------

/// Largest |v| of a float tensor (NaN ignored).
double max_abs(const Tensor &t) {
  double m = 0;
  for (double v : t.to_vector<double>())
    if (std::abs(v) > m) m = std::abs(v);
  return m;
}

/// Operands where a periodic function is well conditioned: |a| < 4. sin and
/// cos of large arguments turn one rounding of the argument into an O(1)
/// change of the result (cos(exp(u)) differs by more than the oracle allows
/// between two correct f32 evaluations), so, as the domain edges of log, the
/// generator keeps them out.
bool small_argument(const Tensor &t) { return is_float(t) && max_abs(t) < 4.0; }


OpDef unary(const char *name, std::function<Tensor(const Tensor &)> f, std::function<std::string(const std::string &)> cpp,
            double weight = 1.0, std::function<bool(const Tensor &)> operand_ok = is_float) {
  return OpDef{name, false,
               [operand_ok](ProgramGenerator &g, Op &op) {
                 int a = g.pick(operand_ok);
                 if (a < 0) return false;
                 op.args = {a};
                 return true;
               },
               [f](const Op &, const std::vector<Tensor> &in) { return f(in[0]); },
               [cpp](const Op &, const std::vector<std::string> &n) { return cpp(n[0]); }, weight};
}

/// A binary op on a and a b that broadcasts with it (an existing value or a
/// new parameter).
OpDef binary(const char *name, std::function<Tensor(const Tensor &, const Tensor &)> f,
             std::function<std::string(const std::string &, const std::string &)> cpp, double weight = 1.0) {
  return OpDef{name, false,
               [](ProgramGenerator &g, Op &op) {
                 int a = g.pick(is_float);
                 if (a < 0) return false;
                 const Shape sa = g.value(a).sizes();
                 int b = -1;
                 if (g.chance(0.6)) {
                   b = g.pick([&](const Tensor &t) {
                     if (!is_float(t)) return false;
                     try {
                       return numel_of(broadcast_shapes(sa, t.sizes(), "fuzz")) <= 2048;
                     } catch (const Error &) {
                       return false;
                     }
                   });
                 }
                 if (b < 0) b = g.add_param(broadcast_param_shape(g, sa));
                 op.args = g.chance(0.5) ? std::vector<int>{a, b} : std::vector<int>{b, a};
                 return true;
               },
               [f](const Op &, const std::vector<Tensor> &in) { return f(in[0], in[1]); },
               [cpp](const Op &, const std::vector<std::string> &n) { return cpp(n[0], n[1]); }, weight};
}

/// A reduction over random dims with keepdim: ints = {keepdim, dims...}.
OpDef reduction(const char *name, std::function<Tensor(const Tensor &, const Shape &, bool)> f, const char *fn,
                double weight = 1.0) {
  std::string fn_name = fn;
  return OpDef{name, false,
               [](ProgramGenerator &g, Op &op) {
                 int a = g.pick(is_float);
                 if (a < 0) return false;
                 const int64_t rank = g.value(a).dim();
                 op.args = {a};
                 op.ints = {g.chance(0.4) ? 1 : 0};
                 if (rank > 0 && g.chance(0.85))
                   for (int64_t d : random_dims(g, rank)) op.ints.push_back(d);
                 return true;
               },
               [f](const Op &op, const std::vector<Tensor> &in) {
                 return f(in[0], Shape(op.ints.begin() + 1, op.ints.end()), op.ints[0] != 0);
               },
               [fn_name](const Op &op, const std::vector<std::string> &n) {
                 return fn_name + "(" + n[0] + ", " + ints_cpp(Shape(op.ints.begin() + 1, op.ints.end())) + ", " +
                        (op.ints[0] ? "true" : "false") + ")";
               },
               weight};
}

/// An op over one dim of a value with rank >= 1: ints = {dim}.
OpDef along_dim(const char *name, bool graph_break, std::function<Tensor(const Tensor &, int64_t)> f,
                std::function<std::string(const std::string &, int64_t)> cpp, double weight = 1.0) {
  return OpDef{name, graph_break,
               [](ProgramGenerator &g, Op &op) {
                 int a = g.pick([](const Tensor &t) { return rank_at_least(t, 1); });
                 if (a < 0) return false;
                 op.args = {a};
                 op.ints = {g.uniform_int(0, g.value(a).dim() - 1)};
                 return true;
               },
               [f](const Op &op, const std::vector<Tensor> &in) { return f(in[0], op.ints[0]); },
               [cpp](const Op &op, const std::vector<std::string> &n) { return cpp(n[0], op.ints[0]); }, weight};
}

// ---- layout ----------------------------------------------------------------------

bool make_transpose(ProgramGenerator &g, Op &op) {
  int a = g.pick([](const Tensor &t) { return rank_at_least(t, 2); });
  if (a < 0) return false;
  const int64_t r = g.value(a).dim();
  int64_t d0 = g.uniform_int(0, r - 1), d1 = g.uniform_int(0, r - 1);
  if (d0 == d1) d1 = (d0 + 1) % r;
  op.args = {a};
  op.ints = {d0, d1};
  return true;
}

bool make_permute(ProgramGenerator &g, Op &op) {
  int a = g.pick([](const Tensor &t) { return rank_at_least(t, 3); });
  if (a < 0) return false;
  op.args = {a};
  op.ints.resize(g.value(a).dim());
  for (size_t i = 0; i < op.ints.size(); ++i) op.ints[i] = static_cast<int64_t>(i);
  std::shuffle(op.ints.begin(), op.ints.end(), g.rng);
  return true;
}

/// Merges two adjacent dims or splits one by a factor; dim 0 is written -1,
/// so the same reshape serves another batch size.
bool make_reshape(ProgramGenerator &g, Op &op) {
  int a = g.pick([](const Tensor &t) { return rank_at_least(t, 1); });
  if (a < 0) return false;
  Shape s = g.value(a).sizes();
  if (s.size() >= 2 && g.chance(0.5)) {
    const size_t d = g.uniform_int(0, s.size() - 2);
    s[d] *= s[d + 1];
    s.erase(s.begin() + d + 1);
  } else {
    const size_t d = g.uniform_int(0, s.size() - 1);
    int64_t f = 0;
    for (int64_t c : {2, 3, 4})
      if (s[d] % c == 0 && s[d] > c) f = c;
    if (f == 0 || s.size() >= 5) return false;
    s[d] /= f;
    s.insert(s.begin() + d + 1, f);
  }
  s[0] = -1;
  op.args = {a};
  op.ints = s;
  return true;
}

bool make_expand(ProgramGenerator &g, Op &op) {
  int a = g.pick([](const Tensor &t) {
    return is_float(t) && std::count(t.sizes().begin(), t.sizes().end(), int64_t{1}) > 0 && t.numel() <= 512;
  });
  if (a < 0) return false;
  Shape s = g.value(a).sizes();
  std::vector<size_t> ones;
  for (size_t d = 0; d < s.size(); ++d) s[d] == 1 ? ones.push_back(d) : void(s[d] = -1);
  s[ones[g.uniform_int(0, ones.size() - 1)]] = g.uniform_int(2, 3);
  op.args = {a};
  op.ints = s;
  return true;
}

// ---- matmul family ------------------------------------------------------------------

bool make_linear(ProgramGenerator &g, Op &op) {
  int a = g.pick([](const Tensor &t) { return rank_at_least(t, 1) && t.size(-1) > 1; });
  if (a < 0) return false;
  const int64_t k = g.value(a).size(-1), n = g.uniform_int(2, 8);
  op.args = {a, g.add_param({n, k})};
  if (g.chance(0.7)) op.args.push_back(g.add_param({n}));
  return true;
}

bool make_matmul_param(ProgramGenerator &g, Op &op) {
  int a = g.pick([](const Tensor &t) { return rank_at_least(t, 2); });
  if (a < 0) return false;
  op.args = {a, g.add_param({g.value(a).size(-1), g.uniform_int(2, 8)})};
  return true;
}

bool make_bmm_expand(ProgramGenerator &g, Op &op) {
  int a = g.pick([](const Tensor &t) { return is_float(t) && t.dim() == 3; });
  if (a < 0) return false;
  op.args = {a, g.add_param({g.value(a).size(2), g.uniform_int(2, 6)})};
  return true;
}

// ---- convolution and pooling (4-D values) ---------------------------------------------

bool is_image(const Tensor &t) { return is_float(t) && t.dim() == 4 && t.size(2) >= 2 && t.size(3) >= 2; }

/// ints = {stride, padding}; args = {x, weight[, bias]}.
bool make_conv2d(ProgramGenerator &g, Op &op) {
  int a = g.pick(is_image);
  if (a < 0) return false;
  const Tensor &x = g.value(a);
  const int64_t k = std::min<int64_t>(g.uniform_int(1, 3), std::min(x.size(2), x.size(3)));
  op.args = {a, g.add_param({g.uniform_int(1, 4), x.size(1), k, k})};
  if (g.chance(0.5)) op.args.push_back(g.add_param({g.program.inputs[op.args[1]].shape[0]}));
  op.ints = {g.uniform_int(1, 2), g.uniform_int(0, 1)};
  return true;
}

/// ints = {kernel, stride}.
bool make_pool(ProgramGenerator &g, Op &op) {
  int a = g.pick(is_image);
  if (a < 0) return false;
  op.args = {a};
  op.ints = {2, g.uniform_int(1, 2)};
  return true;
}

// ---- indexing --------------------------------------------------------------------------

/// index_select(a, d, idx) with idx [K] in [0, a.size(d)); ints = {d}.
bool make_index_select(ProgramGenerator &g, Op &op) {
  int a = g.pick([](const Tensor &t) { return rank_at_least(t, 1); });
  if (a < 0) return false;
  const int64_t d = g.uniform_int(0, g.value(a).dim() - 1);
  op.args = {a, g.add_index({g.uniform_int(1, 5)}, g.value(a).size(d))};
  op.ints = {d};
  return true;
}

/// gather(a, d, idx) with idx no larger than a in any dim; ints = {d}.
bool make_gather(ProgramGenerator &g, Op &op) {
  int a = g.pick([](const Tensor &t) { return rank_at_least(t, 1); });
  if (a < 0) return false;
  Shape s = g.value(a).sizes();
  const int64_t d = g.uniform_int(0, s.size() - 1);
  const int64_t bound = s[d];
  for (auto &e : s) e = g.uniform_int(1, e);
  op.args = {a, g.add_index(s, bound)};
  op.ints = {d};
  return true;
}

/// narrow / slice-with-step / chunk over one dim of size >= 2: ints = {d, start, length or step}.
bool make_window(ProgramGenerator &g, Op &op) {
  int a = g.pick([](const Tensor &t) {
    if (!is_float(t)) return false;
    for (int64_t s : t.sizes())
      if (s >= 2) return true;
    return false;
  });
  if (a < 0) return false;
  const Tensor &t = g.value(a);
  int64_t d;
  do d = g.uniform_int(0, t.dim() - 1);
  while (t.size(d) < 2);
  const int64_t start = g.uniform_int(0, t.size(d) - 2);
  op.args = {a};
  op.ints = {d, start, g.uniform_int(1, t.size(d) - start)};
  return true;
}

/// cat/stack of a and a value of the same shape (or a new parameter).
bool make_join(ProgramGenerator &g, Op &op) {
  int a = g.pick(is_float);
  if (a < 0 || g.value(a).dim() == 0) return false;
  const Shape s = g.value(a).sizes();
  int b = g.chance(0.5) ? g.pick([&](const Tensor &t) { return is_float(t) && t.sizes() == s && t.numel() <= 1024; }) : -1;
  if (b < 0) {
    if (std::find(s.begin(), s.end(), g.program.batch) != s.end()) return false;  // a parameter cannot follow the batch
    b = g.add_param(s);
  }
  op.args = {a, b};
  op.ints = {g.uniform_int(0, static_cast<int64_t>(s.size()) - 1)};
  return true;
}

// ---- near-ties ------------------------------------------------------------------------
// Selection ops (amax, max, argmax, maximum, a where on lt) are discontinuous
// at ties: when two candidates are within a rounding of each other, eager and
// compiled (or 16-bit autocast, which rounds at other places) may pick
// differently, and the gradient moves wholesale. Like domain edges, such
// operands are redrawn: candidates must differ by 1% (+1e-3).

Tensor tie_margin(const Tensor &m) { return abs(m) * 0.01 + 1e-3; }

/// No reduction group of `a` over `dims` has a second element within the margin of its max.
bool unique_max(const Tensor &a, const Shape &dims) {
  NoGradGuard no_grad;
  Tensor m = amax(a, dims, true);
  Tensor near = ge(a, m - tie_margin(m)).to(kFloat32);
  return amax(sum(near, dims)).item() <= 1.0;
}

bool apart(const Tensor &a, const Tensor &b) {
  NoGradGuard no_grad;
  Tensor gap = abs(a - b) - (abs(a) + abs(b)) * 0.01 - 1e-3;
  return -amax(neg(gap)).item() > 0;  // min(gap) > 0
}

OpDef with_ties_checked(OpDef d, std::function<bool(const Op &, const std::vector<Tensor> &)> check) {
  d.well_posed = std::move(check);
  return d;
}

bool reduction_is_well_posed(const Op &op, const std::vector<Tensor> &in) {
  Shape dims(op.ints.begin() + 1, op.ints.end());
  if (dims.empty())
    for (int64_t d = 0; d < in[0].dim(); ++d) dims.push_back(d);
  return dims.empty() ? true : unique_max(in[0], dims);
}

bool dim_op_is_well_posed(const Op &op, const std::vector<Tensor> &in) { return unique_max(in[0], {op.ints[0]}); }
bool pair_is_well_posed(const Op &, const std::vector<Tensor> &in) { return apart(in[0], in[1]); }

/// A branch on sum(a) > 0 is a tie when the sum is within 1% of sum(|a|)
/// (+1e-3) of zero (layer_norm's output sums to 0 up to rounding).
bool branch_is_well_posed(const Op &, const std::vector<Tensor> &in) {
  NoGradGuard no_grad;
  return std::abs(in[0].sum().item()) > 0.01 * abs(in[0]).sum().item() + 1e-3;
}

/// No max pooling window (kernel ints[0], stride ints[1], no padding) of a
/// [N, C, H, W] value has a second element within the margin of its max.
bool pool_is_well_posed(const Op &op, const std::vector<Tensor> &in) {
  NoGradGuard no_grad;
  const Tensor &x = in[0];
  const std::vector<double> v = x.to_vector<double>();
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3), k = op.ints[0], st = op.ints[1];
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t h0 = 0; h0 + k <= H; h0 += st)
      for (int64_t w0 = 0; w0 + k <= W; w0 += st) {
        std::vector<double> window;
        for (int64_t h = h0; h < h0 + k; ++h)
          for (int64_t w = w0; w < w0 + k; ++w) window.push_back(v[(p * H + h) * W + w]);
        std::sort(window.begin(), window.end());
        const double top = window.back(), second = window[window.size() - 2];
        if (top - second <= std::abs(top) * 0.01 + 1e-3) return false;
      }
  return true;
}

/// min over all elements of a float tensor (as a double).
double min_of(const Tensor &t) { return -amax(neg(t)).item(); }

/// Every element of `t` is away (by 1% relative + 1e-3, as the tie margin)
/// from the points where floor/ceil/trunc (`half` false: the integers) or
/// round (`half` true: the half-integers) jump, so evaluations that round
/// their arguments differently (f32 vs f64, or eager 16-bit autocast
/// rounding a linear's output where the compiled graph keeps f32: fuzzer
/// seed 1883430438073930 graph 150) still round alike.
bool away_from_jumps(const Tensor &t, bool half) {
  NoGradGuard no_grad;
  Tensor shifted = half ? t + 0.5 : t;
  Tensor gap = abs(shifted - round(shifted)) - abs(t) * 0.01 - 1e-3;
  return min_of(gap) > 0;
}

OpDef with_break(OpDef d) {
  d.graph_break = true;
  return d;
}

std::vector<OpDef> build_ops() {
  std::vector<OpDef> t;
  // -- pointwise unary
  t.push_back(unary("neg", [](const Tensor &a) { return neg(a); }, [](auto a) { return "neg(" + a + ")"; }));
  t.push_back(unary("exp", [](const Tensor &a) { return exp(a); }, [](auto a) { return "exp(" + a + ")"; }));
  t.push_back(unary("relu", [](const Tensor &a) { return relu(a); }, [](auto a) { return "relu(" + a + ")"; }));
  t.push_back(unary("tanh", [](const Tensor &a) { return tanh(a); }, [](auto a) { return "tanh(" + a + ")"; }));
  t.push_back(unary("sigmoid", [](const Tensor &a) { return sigmoid(a); }, [](auto a) { return "sigmoid(" + a + ")"; }));
  t.push_back(unary("silu", [](const Tensor &a) { return silu(a); }, [](auto a) { return "silu(" + a + ")"; }));
  t.push_back(unary("gelu_tanh", [](const Tensor &a) { return gelu(a, "tanh"); },
                    [](auto a) { return "gelu(" + a + ", \"tanh\")"; }));
  t.push_back(unary("gelu", [](const Tensor &a) { return gelu(a); }, [](auto a) { return "gelu(" + a + ")"; }));
  t.push_back(unary("abs", [](const Tensor &a) { return abs(a); }, [](auto a) { return "abs(" + a + ")"; }));
  t.push_back(unary("sin", [](const Tensor &a) { return sin(a); }, [](auto a) { return "sin(" + a + ")"; }, 1.0,
                    small_argument));
  t.push_back(unary("cos", [](const Tensor &a) { return cos(a); }, [](auto a) { return "cos(" + a + ")"; }, 1.0,
                    small_argument));
  t.push_back(unary("log", [](const Tensor &a) { return log(away_from_zero(a)); },
                    [](auto a) { return "log(" + away_from_zero_cpp(a) + ")"; }));
  t.push_back(unary("sqrt", [](const Tensor &a) { return sqrt(away_from_zero(a)); },
                    [](auto a) { return "sqrt(" + away_from_zero_cpp(a) + ")"; }));
  t.push_back(unary("rsqrt", [](const Tensor &a) { return rsqrt(away_from_zero(a)); },
                    [](auto a) { return "rsqrt(" + away_from_zero_cpp(a) + ")"; }));
  t.push_back(unary("round_bf16", [](const Tensor &a) { return a.to(kBFloat16).to(a.dtype()); },
                    [](auto a) { return a + ".to(kBFloat16).to(" + a + ".dtype())"; }, 0.5));
  t.push_back(unary("round_f16", [](const Tensor &a) { return a.to(kFloat16).to(a.dtype()); },
                    [](auto a) { return a + ".to(kFloat16).to(" + a + ".dtype())"; }, 0.5));
  t.push_back(unary("via_f64", [](const Tensor &a) { return (a.to(kFloat64) * 2.0).to(a.dtype()); },
                    [](auto a) { return "(" + a + ".to(kFloat64) * 2.0).to(" + a + ".dtype())"; }, 0.3));
  t.push_back(unary("contiguous_clone", [](const Tensor &a) { return a.clone() * 1.5; },
                    [](auto a) { return a + ".clone() * 1.5"; }, 0.3));
  // -- pointwise with a scalar: scalar = the constant
  t.push_back(OpDef{"pow", false,
                    [](ProgramGenerator &g, Op &op) {
                      int a = g.pick(is_float);
                      if (a < 0) return false;
                      const double exps[] = {0, 1, 2, 3, 0.5, -1, 1.5};
                      op.args = {a};
                      op.scalar = exps[g.uniform_int(0, 6)];
                      return true;
                    },
                    [](const Op &op, const std::vector<Tensor> &in) {
                      const bool integral = op.scalar >= 0 && op.scalar == std::floor(op.scalar);
                      return pow(integral ? in[0] : away_from_zero(in[0]), op.scalar);
                    },
                    [](const Op &op, const std::vector<std::string> &n) {
                      const bool integral = op.scalar >= 0 && op.scalar == std::floor(op.scalar);
                      return "pow(" + (integral ? n[0] : away_from_zero_cpp(n[0])) + ", " + num(op.scalar) + ")";
                    }});
  t.push_back(OpDef{"clamp", false,
                    [](ProgramGenerator &g, Op &op) {
                      int a = g.pick(is_float);
                      if (a < 0) return false;
                      op.args = {a};
                      op.scalar = g.uniform(0.1, 1.5);
                      op.ints = {g.uniform_int(0, 2)};  // 0: both bounds, 1: min only, 2: max only
                      return true;
                    },
                    [](const Op &op, const std::vector<Tensor> &in) {
                      const double lo = op.ints[0] == 2 ? -INFINITY : -op.scalar;
                      const double hi = op.ints[0] == 1 ? INFINITY : op.scalar;
                      return clamp(in[0], lo, hi);
                    },
                    [](const Op &op, const std::vector<std::string> &n) {
                      const std::string lo = op.ints[0] == 2 ? "-INFINITY" : num(-op.scalar);
                      const std::string hi = op.ints[0] == 1 ? "INFINITY" : num(op.scalar);
                      return "clamp(" + n[0] + ", " + lo + ", " + hi + ")";
                    }});
  auto scalar_op = [](const char *name, bool is_mul) {
    return OpDef{name, false,
                 [](ProgramGenerator &g, Op &op) {
                   int a = g.pick(is_float);
                   if (a < 0) return false;
                   op.args = {a};
                   op.scalar = std::round(g.uniform(-3, 3) * 4) / 4;
                   return true;
                 },
                 [is_mul](const Op &op, const std::vector<Tensor> &in) {
                   return is_mul ? in[0] * op.scalar : in[0] + op.scalar;
                 },
                 [is_mul](const Op &op, const std::vector<std::string> &n) {
                   return n[0] + (is_mul ? " * " : " + ") + num(op.scalar);
                 }};
  };
  t.push_back(scalar_op("mul_scalar", true));
  t.push_back(scalar_op("add_scalar", false));
  // NaN on purpose where a > scalar: must propagate through every later op as in eager.
  t.push_back(OpDef{"masked_nan", false,
                    [](ProgramGenerator &g, Op &op) {
                      int a = g.pick(is_float);
                      if (a < 0) return false;
                      op.args = {a};
                      op.scalar = g.uniform(1.0, 2.0);
                      return true;
                    },
                    [](const Op &op, const std::vector<Tensor> &in) {
                      return masked_fill(in[0], gt(in[0], scalar_tensor(op.scalar, in[0].dtype())), NAN);
                    },
                    [](const Op &op, const std::vector<std::string> &n) {
                      return "masked_fill(" + n[0] + ", gt(" + n[0] + ", scalar_tensor(" + num(op.scalar) + ", " + n[0] +
                             ".dtype())), NAN)";
                    },
                    0.4});
  t.push_back(OpDef{"masked_zero", false,
                    [](ProgramGenerator &g, Op &op) {
                      int a = g.pick(is_float);
                      if (a < 0) return false;
                      op.args = {a};
                      op.scalar = g.uniform(-0.5, 0.5);
                      return true;
                    },
                    [](const Op &op, const std::vector<Tensor> &in) {
                      return masked_fill(in[0], lt(in[0], scalar_tensor(op.scalar, in[0].dtype())), 0.0);
                    },
                    [](const Op &op, const std::vector<std::string> &n) {
                      return "masked_fill(" + n[0] + ", lt(" + n[0] + ", scalar_tensor(" + num(op.scalar) + ", " + n[0] +
                             ".dtype())), 0.0)";
                    },
                    0.5});
  // -- pointwise binary (broadcasting)
  t.push_back(binary("add", [](const Tensor &a, const Tensor &b) { return a + b; },
                     [](auto a, auto b) { return a + " + " + b; }, 2));
  t.push_back(binary("sub", [](const Tensor &a, const Tensor &b) { return a - b; },
                     [](auto a, auto b) { return a + " - " + b; }));
  t.push_back(binary("mul", [](const Tensor &a, const Tensor &b) { return a * b; },
                     [](auto a, auto b) { return a + " * " + b; }, 2));
  t.push_back(binary("div", [](const Tensor &a, const Tensor &b) { return a / away_from_zero(b); },
                     [](auto a, auto b) { return a + " / (" + away_from_zero_cpp(b) + ")"; }));
  t.push_back(with_ties_checked(binary("maximum", [](const Tensor &a, const Tensor &b) { return maximum(a, b); },
                                       [](auto a, auto b) { return "maximum(" + a + ", " + b + ")"; }),
                                pair_is_well_posed));
  t.push_back(with_ties_checked(
      binary("where_lt", [](const Tensor &a, const Tensor &b) { return where(lt(a, b), a * 2.0, b); },
             [](auto a, auto b) { return "where(lt(" + a + ", " + b + "), " + a + " * 2.0, " + b + ")"; }),
      pair_is_well_posed));
  // -- issue 13: erf, rounding, division modes, extremes (redrawn near their jumps and ties)
  t.push_back(unary("erf", [](const Tensor &a) { return erf(a); }, [](auto a) { return "erf(" + a + ")"; }));
  t.push_back(with_ties_checked(unary("floor", [](const Tensor &a) { return floor(a) + a; },
                                      [](auto a) { return "floor(" + a + ") + " + a; }, 0.5),
                                [](const Op &, const std::vector<Tensor> &in) { return away_from_jumps(in[0], false); }));
  t.push_back(with_ties_checked(unary("ceil_trunc", [](const Tensor &a) { return ceil(a) * trunc(a * 2.0) + a; },
                                      [](auto a) { return "ceil(" + a + ") * trunc(" + a + " * 2.0) + " + a; }, 0.5),
                                [](const Op &, const std::vector<Tensor> &in) {
                                  return away_from_jumps(in[0], false) && away_from_jumps(in[0] * 2.0, false);
                                }));
  t.push_back(with_ties_checked(unary("round", [](const Tensor &a) { return round(a) + a; },
                                      [](auto a) { return "round(" + a + ") + " + a; }, 0.5),
                                [](const Op &, const std::vector<Tensor> &in) { return away_from_jumps(in[0], true); }));
  t.push_back(with_ties_checked(binary("minimum", [](const Tensor &a, const Tensor &b) { return minimum(a, b); },
                                       [](auto a, auto b) { return "minimum(" + a + ", " + b + ")"; }),
                                pair_is_well_posed));
  auto quotient_is_well_posed = [](const Op &, const std::vector<Tensor> &in) {
    return away_from_jumps(in[0] / away_from_zero(in[1]), false);
  };
  t.push_back(with_ties_checked(
      binary("floor_divide", [](const Tensor &a, const Tensor &b) { return floor_divide(a, away_from_zero(b)) + a; },
             [](auto a, auto b) { return "floor_divide(" + a + ", " + away_from_zero_cpp(b) + ") + " + a; }, 0.5),
      quotient_is_well_posed));
  t.push_back(with_ties_checked(
      binary("remainder", [](const Tensor &a, const Tensor &b) { return remainder(a, away_from_zero(b)); },
             [](auto a, auto b) { return "remainder(" + a + ", " + away_from_zero_cpp(b) + ")"; }, 0.5),
      quotient_is_well_posed));
  t.push_back(with_ties_checked(
      binary("fmod", [](const Tensor &a, const Tensor &b) { return fmod(a, away_from_zero(b)) + div(a, b, "trunc"); },
             [](auto a, auto b) {
               return "fmod(" + a + ", " + away_from_zero_cpp(b) + ") + div(" + a + ", " + b + ", \"trunc\")";
             },
             0.5),
      [](const Op &, const std::vector<Tensor> &in) {
        return away_from_jumps(in[0] / away_from_zero(in[1]), false) && away_from_jumps(in[0] / in[1], false);
      }));
  t.push_back(with_ties_checked(unary("clamp_min", [](const Tensor &a) { return clamp_min(a, 0.1); },
                                      [](auto a) { return "clamp_min(" + a + ", 0.1)"; }, 0.5),
                                [](const Op &, const std::vector<Tensor> &in) {
                                  NoGradGuard no_grad;
                                  return min_of(abs(in[0] - 0.1) - abs(in[0]) * 0.01 - 1e-3) > 0;
                                }));
  t.push_back(with_ties_checked(unary("max_min_all", [](const Tensor &a) { return a * max(a) - min(a); },
                                      [](auto a) { return a + " * max(" + a + ") - min(" + a + ")"; }, 0.5),
                                [](const Op &, const std::vector<Tensor> &in) {
                                  Shape all;
                                  for (int64_t d = 0; d < in[0].dim(); ++d) all.push_back(d);
                                  return unique_max(in[0], all) && unique_max(neg(in[0]), all);
                                }));
  t.push_back(with_ties_checked(
      along_dim("argmin", false, [](const Tensor &a, int64_t d) { return argmin(a, d, true).to(kFloat32) * a; },
                [](auto a, int64_t d) { return "argmin(" + a + ", " + std::to_string(d) + ", true).to(kFloat32) * " + a; },
                0.5),
      [](const Op &op, const std::vector<Tensor> &in) { return unique_max(neg(in[0]), {op.ints[0]}); }));
  t.push_back(with_ties_checked(
      reduction("amin", [](const Tensor &a, const Shape &d, bool k) { return amin(a, d, k); }, "amin", 0.5),
      [](const Op &op, const std::vector<Tensor> &in) {
        Shape dims(op.ints.begin() + 1, op.ints.end());
        if (dims.empty())
          for (int64_t d = 0; d < in[0].dim(); ++d) dims.push_back(d);
        return dims.empty() ? true : unique_max(neg(in[0]), dims);
      }));
  // -- reductions
  t.push_back(reduction("sum", [](const Tensor &a, const Shape &d, bool k) { return sum(a, d, k); }, "sum", 1.5));
  t.push_back(reduction("mean", [](const Tensor &a, const Shape &d, bool k) { return mean(a, d, k); }, "mean"));
  t.push_back(with_ties_checked(
      reduction("amax", [](const Tensor &a, const Shape &d, bool k) { return amax(a, d, k); }, "amax"),
      reduction_is_well_posed));
  t.push_back(reduction("var", [](const Tensor &a, const Shape &d, bool k) { return var(a, d, 0, k); }, "var_biased"));
  t.push_back(reduction("logsumexp", [](const Tensor &a, const Shape &d, bool k) { return logsumexp(a, d, k); },
                        "logsumexp"));
  t.push_back(along_dim("softmax", false, [](const Tensor &a, int64_t d) { return F::softmax(a, d); },
                        [](auto a, int64_t d) { return "nn::functional::softmax(" + a + ", " + std::to_string(d) + ")"; }));
  t.push_back(along_dim("log_softmax", false, [](const Tensor &a, int64_t d) { return F::log_softmax(a, d); },
                        [](auto a, int64_t d) {
                          return "nn::functional::log_softmax(" + a + ", " + std::to_string(d) + ")";
                        }));
  t.push_back(with_ties_checked(along_dim("max_dim", false, [](const Tensor &a, int64_t d) { return max(a, d).first; },
                        [](auto a, int64_t d) { return "max(" + a + ", " + std::to_string(d) + ").first"; }, 0.5), dim_op_is_well_posed));
  t.push_back(with_ties_checked(along_dim("argmax", false, [](const Tensor &a, int64_t d) { return argmax(a, d).to(kFloat32) + a.sum(); },
                        [](auto a, int64_t d) {
                          return "argmax(" + a + ", " + std::to_string(d) + ").to(kFloat32) + " + a + ".sum()";
                        },
                        0.5), dim_op_is_well_posed));
  t.push_back(along_dim("cumsum", false, [](const Tensor &a, int64_t d) { return cumsum(a, d); },
                        [](auto a, int64_t d) { return "cumsum(" + a + ", " + std::to_string(d) + ")"; }, 0.5));
  t.push_back(OpDef{"layer_norm", false,
                    [](ProgramGenerator &g, Op &op) {
                      int a = g.pick(rows_vary);
                      if (a < 0) return false;
                      op.args = {a};
                      if (g.chance(0.7)) {
                        op.args.push_back(g.add_param({g.value(a).size(-1)}));
                        op.args.push_back(g.add_param({g.value(a).size(-1)}));
                      }
                      return true;
                    },
                    [](const Op &, const std::vector<Tensor> &in) {
                      return in.size() == 3 ? F::layer_norm(in[0], {in[0].size(-1)}, in[1], in[2])
                                            : F::layer_norm(in[0], {in[0].size(-1)});
                    },
                    [](const Op &, const std::vector<std::string> &n) {
                      return "nn::functional::layer_norm(" + n[0] + ", {" + n[0] + ".size(-1)}" +
                             (n.size() == 3 ? ", " + n[1] + ", " + n[2] : std::string()) + ")";
                    }});
  // -- layout
  t.push_back(OpDef{"transpose", false, make_transpose,
                    [](const Op &op, const std::vector<Tensor> &in) { return in[0].transpose(op.ints[0], op.ints[1]); },
                    [](const Op &op, const std::vector<std::string> &n) {
                      return n[0] + ".transpose(" + std::to_string(op.ints[0]) + ", " + std::to_string(op.ints[1]) + ")";
                    }});
  t.push_back(OpDef{"permute", false, make_permute,
                    [](const Op &op, const std::vector<Tensor> &in) { return in[0].permute(op.ints); },
                    [](const Op &op, const std::vector<std::string> &n) { return n[0] + ".permute(" + ints_cpp(op.ints) + ")"; },
                    0.5});
  t.push_back(OpDef{"reshape", false, make_reshape,
                    [](const Op &op, const std::vector<Tensor> &in) { return in[0].reshape(op.ints); },
                    [](const Op &op, const std::vector<std::string> &n) { return n[0] + ".reshape(" + ints_cpp(op.ints) + ")"; }});
  t.push_back(OpDef{"expand", false, make_expand,
                    [](const Op &op, const std::vector<Tensor> &in) { return in[0].expand(op.ints); },
                    [](const Op &op, const std::vector<std::string> &n) { return n[0] + ".expand(" + ints_cpp(op.ints) + ")"; },
                    0.5});
  t.push_back(along_dim("unsqueeze", false, [](const Tensor &a, int64_t d) { return a.unsqueeze(d); },
                        [](auto a, int64_t d) { return a + ".unsqueeze(" + std::to_string(d) + ")"; }, 0.5));
  t.push_back(OpDef{"narrow", false, make_window,
                    [](const Op &op, const std::vector<Tensor> &in) { return in[0].narrow(op.ints[0], op.ints[1], op.ints[2]); },
                    [](const Op &op, const std::vector<std::string> &n) {
                      return n[0] + ".narrow(" + std::to_string(op.ints[0]) + ", " + std::to_string(op.ints[1]) + ", " +
                             std::to_string(op.ints[2]) + ")";
                    },
                    0.7});
  t.push_back(OpDef{"slice_step", false, make_window,
                    [](const Op &op, const std::vector<Tensor> &in) {
                      return slice(in[0], op.ints[0], op.ints[1], INT64_MAX, 1 + op.ints[2] % 2);
                    },
                    [](const Op &op, const std::vector<std::string> &n) {
                      return "slice(" + n[0] + ", " + std::to_string(op.ints[0]) + ", " + std::to_string(op.ints[1]) +
                             ", INT64_MAX, " + std::to_string(1 + op.ints[2] % 2) + ")";
                    },
                    0.7});
  t.push_back(OpDef{"chunk", false, make_window,
                    [](const Op &op, const std::vector<Tensor> &in) {
                      auto pieces = chunk(in[0], 2, op.ints[0]);
                      return pieces[op.ints[1] % pieces.size()];
                    },
                    [](const Op &op, const std::vector<std::string> &n) {
                      return "chunk(" + n[0] + ", 2, " + std::to_string(op.ints[0]) + ")[" + std::to_string(op.ints[1]) +
                             " % chunk(" + n[0] + ", 2, " + std::to_string(op.ints[0]) + ").size()]";
                    },
                    0.5});
  t.push_back(OpDef{"cat", false, make_join,
                    [](const Op &op, const std::vector<Tensor> &in) { return cat({in[0], in[1]}, op.ints[0]); },
                    [](const Op &op, const std::vector<std::string> &n) {
                      return "cat({" + n[0] + ", " + n[1] + "}, " + std::to_string(op.ints[0]) + ")";
                    },
                    0.6});
  t.push_back(OpDef{"stack", false, make_join,
                    [](const Op &op, const std::vector<Tensor> &in) { return stack({in[0], in[1]}, op.ints[0]); },
                    [](const Op &op, const std::vector<std::string> &n) {
                      return "stack({" + n[0] + ", " + n[1] + "}, " + std::to_string(op.ints[0]) + ")";
                    },
                    0.4});
  // -- matmul family
  t.push_back(OpDef{"linear", false, make_linear,
                    [](const Op &, const std::vector<Tensor> &in) {
                      return F::linear(in[0], in[1], in.size() == 3 ? in[2] : Tensor());
                    },
                    [](const Op &, const std::vector<std::string> &n) {
                      return "nn::functional::linear(" + n[0] + ", " + n[1] + (n.size() == 3 ? ", " + n[2] : std::string()) +
                             ")";
                    },
                    1.5});
  t.push_back(OpDef{"matmul", false, make_matmul_param,
                    [](const Op &, const std::vector<Tensor> &in) { return matmul(in[0], in[1]); },
                    [](const Op &, const std::vector<std::string> &n) { return "matmul(" + n[0] + ", " + n[1] + ")"; }});
  t.push_back(OpDef{"matmul_self", false,
                    [](ProgramGenerator &g, Op &op) {
                      int a = g.pick([](const Tensor &t) { return rank_at_least(t, 2) && t.numel() <= 256; });
                      if (a < 0) return false;
                      op.args = {a};
                      return true;
                    },
                    [](const Op &, const std::vector<Tensor> &in) { return matmul(in[0], in[0].transpose(-1, -2)); },
                    [](const Op &, const std::vector<std::string> &n) {
                      return "matmul(" + n[0] + ", " + n[0] + ".transpose(-1, -2))";
                    },
                    0.6});
  t.push_back(OpDef{"bmm_expand", false, make_bmm_expand,
                    [](const Op &, const std::vector<Tensor> &in) {
                      return bmm(in[0], in[1].unsqueeze(0).expand({in[0].size(0), -1, -1}));
                    },
                    [](const Op &, const std::vector<std::string> &n) {
                      return "bmm(" + n[0] + ", " + n[1] + ".unsqueeze(0).expand({" + n[0] + ".size(0), -1, -1}))";
                    },
                    0.5});
  // -- convolution and pooling
  // Captured since issue 13 (kiln.conv2d and its gradients, kiln.max_pool2d: extern oneDNN steps).
  t.push_back(OpDef{"conv2d", false, make_conv2d,
                    [](const Op &op, const std::vector<Tensor> &in) {
                      return F::conv2d(in[0], in[1], in.size() == 3 ? in[2] : Tensor(), {op.ints[0], op.ints[0]},
                                       {op.ints[1], op.ints[1]});
                    },
                    [](const Op &op, const std::vector<std::string> &n) {
                      const std::string s = std::to_string(op.ints[0]), p = std::to_string(op.ints[1]);
                      return "nn::functional::conv2d(" + n[0] + ", " + n[1] + ", " + (n.size() == 3 ? n[2] : "Tensor()") +
                             ", {" + s + ", " + s + "}, {" + p + ", " + p + "})";
                    }});
  t.push_back(with_ties_checked(OpDef{"max_pool2d", false, make_pool,
                    [](const Op &op, const std::vector<Tensor> &in) {
                      return F::max_pool2d(in[0], {op.ints[0], op.ints[0]}, {op.ints[1], op.ints[1]});
                    },
                    [](const Op &op, const std::vector<std::string> &n) {
                      const std::string k = std::to_string(op.ints[0]), s = std::to_string(op.ints[1]);
                      return "nn::functional::max_pool2d(" + n[0] + ", {" + k + ", " + k + "}, {" + s + ", " + s + "})";
                    },
                    0.5}, pool_is_well_posed));
  t.push_back(OpDef{"avg_pool2d", false, make_pool,
                    [](const Op &op, const std::vector<Tensor> &in) {
                      return F::avg_pool2d(in[0], {op.ints[0], op.ints[0]}, {op.ints[1], op.ints[1]});
                    },
                    [](const Op &op, const std::vector<std::string> &n) {
                      const std::string k = std::to_string(op.ints[0]), s = std::to_string(op.ints[1]);
                      return "nn::functional::avg_pool2d(" + n[0] + ", {" + k + ", " + k + "}, {" + s + ", " + s + "})";
                    },
                    0.5});
  // -- indexing
  t.push_back(OpDef{"index_select", false, make_index_select,
                    [](const Op &op, const std::vector<Tensor> &in) { return index_select(in[0], op.ints[0], in[1]); },
                    [](const Op &op, const std::vector<std::string> &n) {
                      return "index_select(" + n[0] + ", " + std::to_string(op.ints[0]) + ", " + n[1] + ")";
                    },
                    0.6});
  t.push_back(OpDef{"gather", false, make_gather,
                    [](const Op &op, const std::vector<Tensor> &in) { return gather(in[0], op.ints[0], in[1]); },
                    [](const Op &op, const std::vector<std::string> &n) {
                      return "gather(" + n[0] + ", " + std::to_string(op.ints[0]) + ", " + n[1] + ")";
                    },
                    0.6});
  // -- graph breaks around host reads, autograd and in-place updates
  t.push_back(with_ties_checked(OpDef{"item_branch", true,
                    [](ProgramGenerator &g, Op &op) {
                      int a = g.pick(is_float);
                      if (a < 0) return false;
                      op.args = {a};
                      return true;
                    },
                    [](const Op &, const std::vector<Tensor> &in) {
                      return in[0].sum().item() > 0 ? in[0] * 2.0 : in[0] - 1.0;
                    },
                    [](const Op &, const std::vector<std::string> &n) {
                      return "(" + n[0] + ".sum().item() > 0 ? " + n[0] + " * 2.0 : " + n[0] + " - 1.0)";
                    },
                    0.5}, branch_is_well_posed));
  t.push_back(unary("item_scale", [](const Tensor &a) { return a * std::tanh(a.sum().item()); },
                    [](auto a) { return a + " * std::tanh(" + a + ".sum().item())"; }, 0.3));
  t.back().graph_break = true;
  t.push_back(unary("detach_mul", [](const Tensor &a) { return a * a.detach(); },
                    [](auto a) { return a + " * " + a + ".detach()"; }, 0.5));
  t.push_back(unary("clone_inplace",
                    [](const Tensor &a) {
                      Tensor c = a.detach().clone();
                      c.mul_(2.0);
                      return c + a;
                    },
                    [](auto a) {
                      return "[&] { Tensor c = " + a + ".detach().clone(); c.mul_(2.0); return c + " + a + "; }()";
                    },
                    0.5));
  t.back().graph_break = true;
  t.push_back(unary("checkpoint",
                    [](const Tensor &a) {
                      return autograd::checkpoint([](const autograd::TensorList &in) { return tanh(in[0]) * in[0]; }, {a});
                    },
                    [](auto a) {
                      return "autograd::checkpoint([](const autograd::TensorList &in) { return tanh(in[0]) * in[0]; }, {" +
                             a + "})";
                    },
                    0.5));
  t.push_back(unary("dropout", [](const Tensor &a) { return F::dropout(a, 0.3, true); },
                    [](auto a) { return "nn::functional::dropout(" + a + ", 0.3, true)"; }, 0.4));
  return t;
}

}  // namespace

bool rows_vary(const Tensor &t) {
  if (!is_float(t) || t.dim() < 1 || t.size(-1) < 2) return false;
  const auto v = t.to_vector<double>();
  const int64_t n = t.size(-1);
  for (size_t r = 0; r + n <= v.size(); r += n) {
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) mean += v[r + i] / n;
    for (int64_t i = 0; i < n; ++i) sq += (v[r + i] - mean) * (v[r + i] - mean) / n;
    if (!(sq > 1e-3 * (mean * mean) + 1e-4)) return false;
  }
  return true;
}

const std::vector<OpDef> &ops() {
  static const std::vector<OpDef> table = build_ops();
  return table;
}

const OpDef &op_def(const std::string &name) {
  for (const OpDef &d : ops())
    if (name == d.name) return d;
  throw Error("kiln-fuzz: unknown op '" + name + "'");
}

}  // namespace kiln::fuzz
