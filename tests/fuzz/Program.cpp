// Program.cpp - kiln-fuzz's programs: text form, replay, inputs.
#include "Program.h"

#include <cmath>
#include <sstream>

namespace kiln::fuzz {

namespace {

std::string join_ints(const std::vector<int64_t> &v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

std::vector<int64_t> split_ints(const std::string &s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ','))
    if (!tok.empty()) out.push_back(std::stoll(tok));
  return out;
}

std::string value_name(const Program &p, int id) {
  if (id == 0) return "x";
  if (id < static_cast<int>(p.inputs.size())) return "p" + std::to_string(id);
  return "v" + std::to_string(id);
}

}  // namespace

// Text form: "B=4 x[4,3]g p[3]g p[3]b i[2]<5 ; exp(0) add(1,5;;) ..." where an
// input is `[shape]` with g (requires grad), b (buffer), <n (index bound n),
// and an op is name(args;ints;scalar) with the scalar in %a (exact) form.
std::string Program::str() const {
  std::ostringstream os;
  os << "B=" << batch;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Input &in = inputs[i];
    os << " " << (i == 0 ? "x" : in.index_bound > 0 ? "i" : "p") << "[" << join_ints(in.shape) << "]";
    if (in.requires_grad) os << "g";
    if (in.buffer) os << "b";
    if (in.index_bound > 0) os << "<" << in.index_bound;
  }
  os << " ;";
  for (const Op &op : ops) {
    std::vector<int64_t> args(op.args.begin(), op.args.end());
    char scalar[64];
    std::snprintf(scalar, sizeof scalar, "%a", op.scalar);
    os << " " << op.name << "(" << join_ints(args) << ";" << join_ints(op.ints) << ";" << scalar << ")";
  }
  return os.str();
}

Program Program::parse(const std::string &text) {
  Program p;
  std::stringstream ss(text);
  std::string tok;
  bool in_ops = false;
  while (ss >> tok) {
    if (tok == ";") {
      in_ops = true;
      continue;
    }
    if (!in_ops) {
      if (tok.rfind("B=", 0) == 0) {
        p.batch = std::stoll(tok.substr(2));
        continue;
      }
      const size_t open = tok.find('['), close = tok.find(']');
      KILN_CHECK(open == 1 && close != std::string::npos, "kiln-fuzz: bad input token '", tok,
                 "' (expected x[...], p[...] or i[...])");
      Input in;
      in.shape = split_ints(tok.substr(2, close - 2));
      const std::string flags = tok.substr(close + 1);
      in.requires_grad = flags.find('g') != std::string::npos;
      in.buffer = flags.find('b') != std::string::npos;
      if (size_t lt = flags.find('<'); lt != std::string::npos) in.index_bound = std::stoll(flags.substr(lt + 1));
      p.inputs.push_back(in);
      continue;
    }
    const size_t open = tok.find('('), s1 = tok.find(';'), s2 = tok.find(';', s1 + 1);
    KILN_CHECK(open != std::string::npos && s1 != std::string::npos && s2 != std::string::npos && tok.back() == ')',
               "kiln-fuzz: bad op token '", tok, "' (expected name(args;ints;scalar))");
    Op op;
    op.name = tok.substr(0, open);
    op_def(op.name);  // throws on an unknown op
    for (int64_t a : split_ints(tok.substr(open + 1, s1 - open - 1))) op.args.push_back(static_cast<int>(a));
    op.ints = split_ints(tok.substr(s1 + 1, s2 - s1 - 1));
    op.scalar = std::strtod(tok.substr(s2 + 1, tok.size() - s2 - 2).c_str(), nullptr);
    p.ops.push_back(op);
  }
  KILN_CHECK(!p.inputs.empty(), "kiln-fuzz: program '", text, "' has no input x");
  return p;
}

std::string Program::cpp() const {
  std::ostringstream os;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op &op = ops[i];
    std::vector<std::string> names;
    for (int a : op.args) names.push_back(value_name(*this, a));
    os << "Tensor " << value_name(*this, static_cast<int>(inputs.size() + i)) << " = "
       << op_def(op.name).cpp(op, names) << ";\n";
  }
  os << "return " << value_name(*this, num_values() - 1) << ";\n";
  return os.str();
}

std::vector<Tensor> run_program(const Program &p, std::vector<Tensor> values) {
  KILN_CHECK(values.size() == p.inputs.size(), "kiln-fuzz: ", values.size(), " inputs for a program of ",
             p.inputs.size());
  for (const Op &op : p.ops) {
    std::vector<Tensor> args;
    for (int a : op.args) {
      KILN_CHECK(a >= 0 && a < static_cast<int>(values.size()), "kiln-fuzz: op ", op.name, " reads v", a,
                 " before it exists");
      args.push_back(values[a]);
    }
    values.push_back(op_def(op.name).apply(op, args));
  }
  return values;
}

std::vector<Tensor> make_inputs(const Program &p, int64_t batch, uint64_t seed, DType float_type) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<Tensor> out;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const Input &in = p.inputs[i];
    Shape shape = in.shape;
    if (i == 0) shape[0] = batch;
    const int64_t n = numel_of(shape);
    if (in.index_bound > 0) {
      std::vector<int64_t> v(n);
      for (auto &e : v) e = std::uniform_int_distribution<int64_t>(0, in.index_bound - 1)(rng);
      out.push_back(tensor(v, shape));
      continue;
    }
    std::vector<float> v(n);
    for (auto &e : v) e = normal(rng);
    Tensor t = tensor(v, shape);
    if (float_type != kFloat32) t = t.to(float_type);
    out.push_back(t);
  }
  return out;
}

}  // namespace kiln::fuzz
