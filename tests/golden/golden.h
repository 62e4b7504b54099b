// golden.h - reads golden values written by tests/golden/golden.py (PyTorch).
#pragma once

#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"

namespace kiln::golden {

/// One case: named input tensors, outputs ("out0", ..., "grad_output"),
/// gradients of inputs, and free-form attributes.
struct Case {
  std::map<std::string, Tensor> inputs, outputs, grads;
  nlohmann::json attrs;
};

/// Named input tensors of a case.
using TensorMap = std::map<std::string, Tensor>;

/// A two-int attribute of a case ("stride": [1, 2]).
inline std::array<int64_t, 2> pair_attr(const Case &c, const char *key) {
  return c.attrs.at(key).get<std::array<int64_t, 2>>();
}

/// The input named `key`, or an undefined tensor (an optional bias).
inline Tensor get_or_undefined(TensorMap &in, const std::string &key) {
  auto it = in.find(key);
  return it == in.end() ? Tensor() : it->second;
}

inline DType dtype_from(const std::string &s) {
  if (s == "float32") return kFloat32;
  if (s == "float64") return kFloat64;
  if (s == "float16") return kFloat16;
  if (s == "bfloat16") return kBFloat16;
  if (s == "int64") return kInt64;
  if (s == "int32") return kInt32;
  if (s == "bool") return kBool;
  throw Error("golden: unknown dtype " + s);
}

/// One data element: a number, or the strings "nan", "inf", "-inf" (JSON
/// has no literals for them; gen_pointwise.py writes these).
inline double element_from(const nlohmann::json &v) {
  if (!v.is_string()) return v.get<double>();
  const std::string s = v.get<std::string>();
  if (s == "nan") return std::nan("");
  if (s == "inf") return INFINITY;
  if (s == "-inf") return -INFINITY;
  throw Error("golden: unknown element " + s);
}

inline Tensor tensor_from(const nlohmann::json &j) {
  Shape shape = j.at("shape").get<Shape>();
  std::vector<double> data;
  for (const nlohmann::json &v : j.at("data")) data.push_back(element_from(v));
  Tensor t = Tensor::empty(shape, kFloat64);
  std::copy(data.begin(), data.end(), t.data_ptr<double>());
  return t.to(dtype_from(j.at("dtype").get<std::string>()));
}

/// Loads tests/golden/<relative_path>. Fails the test (and returns empty) if unreadable.
inline std::map<std::string, Case> load(const std::string &relative_path) {
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/tests/golden/" + relative_path);
  EXPECT_TRUE(f.good()) << "cannot open golden file " << relative_path;
  std::map<std::string, Case> cases;
  if (!f.good()) return cases;
  nlohmann::json doc = nlohmann::json::parse(f);
  for (auto &[name, c] : doc.at("cases").items()) {
    Case out;
    for (auto &[k, v] : c.at("inputs").items()) out.inputs[k] = tensor_from(v);
    for (auto &[k, v] : c.at("outputs").items()) out.outputs[k] = tensor_from(v);
    for (auto &[k, v] : c.at("grads").items()) out.grads[k] = tensor_from(v);
    out.attrs = c.at("attrs");
    cases[name] = std::move(out);
  }
  return cases;
}

/// Default tolerance by dtype: float32 1e-5 relative, float64 1e-10,
/// float16 1e-3, bfloat16 1e-2 (relative to max(1, |expected|)).
inline double default_rtol(DType t) {
  switch (t) {
  case DType::Float64: return 1e-10;
  case DType::Float16: return 1e-3;
  case DType::BFloat16: return 1e-2;
  default: return 1e-5;
  }
}

/// EXPECTs `actual` equals `expected` (shape, dtype, values within rtol*max(1,|e|)).
inline void expect_close(const Tensor &actual, const Tensor &expected, const std::string &what, double rtol = -1) {
  ASSERT_TRUE(actual.defined()) << what << ": undefined";
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what << ": shape";
  EXPECT_EQ(actual.dtype(), expected.dtype()) << what << ": dtype";
  if (rtol < 0) rtol = default_rtol(expected.dtype());
  auto a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(e[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << what << "[" << i << "]";
      continue;
    }
    if (std::isinf(e[i])) {
      EXPECT_EQ(a[i], e[i]) << what << "[" << i << "]";
      continue;
    }
    EXPECT_NEAR(a[i], e[i], rtol * std::max(1.0, std::abs(e[i]))) << what << "[" << i << "]";
  }
}

/// Runs fn on the case's inputs (floats marked requires_grad), compares out0
/// (and out1.. if fn returns them via `extra`), backpropagates grad_output
/// and compares every recorded input gradient.
inline void check_op(const Case &c, const std::string &name,
                     const std::function<std::vector<Tensor>(std::map<std::string, Tensor> &)> &fn, double rtol = -1) {
  std::map<std::string, Tensor> in;
  for (auto &[k, v] : c.inputs) {
    Tensor t = v.clone();
    if (t.is_floating_point() && c.grads.count(k)) t.requires_grad_(true);
    in[k] = t;
  }
  std::vector<Tensor> outs = fn(in);
  for (size_t i = 0; i < outs.size(); ++i) {
    auto it = c.outputs.find("out" + std::to_string(i));
    if (it != c.outputs.end()) expect_close(outs[i], it->second, name + " out" + std::to_string(i), rtol);
  }
  if (c.grads.empty()) return;
  outs[0].backward(c.outputs.at("grad_output"));
  for (auto &[k, g] : c.grads) expect_close(in[k].grad(), g, name + " grad " + k, rtol);
}

}  // namespace kiln::golden
