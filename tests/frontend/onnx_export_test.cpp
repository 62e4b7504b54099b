// kiln::onnx::export_model: the file (opset, names, dynamic axes, weights as
// initializers, libonnx's checker) and the errors. Numerical agreement with
// ONNX Runtime is onnx.ort_matches_kiln.* (tests/tools/onnx_ort_check.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>

#include "kiln/compile.h"
#include "kiln/onnx.h"
#include "onnx/checker.h"
#include "onnx/graph_to_onnx.h"
#include "onnx_models.h"

using namespace kiln;

namespace {

const std::string kData = std::string(KILN_SOURCE_DIR) + "/data/digits.csv.gz";

std::string temp_path(const std::string &name) {
  return ::testing::TempDir() + "kiln_onnx_" + std::to_string(::getpid()) + "_" + name;
}

::onnx::ModelProto read_model(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  ::onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromIstream(&f)) << path;
  return m;
}

/// The message of the kiln::Error that `fn` throws ("" if none).
template <class F> std::string error_of(F fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

const ::onnx::TensorProto *find_initializer(const ::onnx::ModelProto &m, const std::string &name) {
  for (const auto &t : m.graph().initializer())
    if (t.name() == name) return &t;
  return nullptr;
}

class OnnxModels : public ::testing::TestWithParam<const char *> {};

}  // namespace

// Every model: opset 17, IR 8, the given names, the batch dim symbolic in the
// input and output, every parameter an initializer under its state_dict key
// holding the parameter's bytes, and the written file passes the checker.
TEST_P(OnnxModels, ExportPassesCheckerWithNamesDynamicBatchAndWeights) {
  onnx_test::ModelCase c = onnx_test::make_case(GetParam(), kData);
  const std::string path = temp_path(c.name + ".onnx");
  auto info = kiln::onnx::export_model(*c.model, {c.input}, path,
                                 kiln::onnx::ExportOptions()
                                     .input_names({c.input_name})
                                     .output_names({c.output_name})
                                     .dynamic_axis(c.input_name, 0, "batch"));
  EXPECT_NO_THROW(::onnx::checker::check_model(path));
  const ::onnx::ModelProto m = read_model(path);
  EXPECT_EQ(m.ir_version(), 8);
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).domain(), "");
  EXPECT_EQ(m.opset_import(0).version(), 17);
  EXPECT_EQ(info.opset, 17);
  EXPECT_EQ(info.dynamic_symbol, "batch");
  ASSERT_EQ(m.graph().input_size(), 1);  // initializers are not listed as inputs (IR >= 4)
  ASSERT_EQ(m.graph().output_size(), 1);
  const auto &in = m.graph().input(0), &out = m.graph().output(0);
  EXPECT_EQ(in.name(), c.input_name);
  EXPECT_EQ(out.name(), c.output_name);
  EXPECT_EQ(in.type().tensor_type().elem_type(),
            c.name == "gpt" ? ::onnx::TensorProto::INT64 : ::onnx::TensorProto::FLOAT);
  EXPECT_EQ(in.type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(out.type().tensor_type().shape().dim(0).dim_param(), "batch");
  for (int d = 1; d < in.type().tensor_type().shape().dim_size(); ++d)
    EXPECT_EQ(in.type().tensor_type().shape().dim(d).dim_value(), c.input.size(d));
  // Logits: [batch, 10] or [batch, T, vocab].
  const auto &out_shape = out.type().tensor_type().shape();
  EXPECT_EQ(out_shape.dim(out_shape.dim_size() - 1).dim_value(), c.name == "gpt" ? 65 : 10);

  for (const auto &[name, p] : c.model->named_parameters()) {
    const ::onnx::TensorProto *t = find_initializer(m, name);
    ASSERT_NE(t, nullptr) << "no initializer named " << name;
    ASSERT_EQ(t->data_type(), ::onnx::TensorProto::FLOAT) << name;
    ASSERT_EQ(t->dims_size(), p.dim()) << name;
    for (int64_t d = 0; d < p.dim(); ++d) EXPECT_EQ(t->dims(static_cast<int>(d)), p.size(d)) << name;
    Tensor pc = p.contiguous();
    ASSERT_EQ(t->raw_data().size(), static_cast<size_t>(pc.numel()) * 4) << name;
    EXPECT_EQ(std::memcmp(t->raw_data().data(), pc.raw_data(), t->raw_data().size()), 0) << name;
  }
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Zoo, OnnxModels, ::testing::Values("mlp", "gpt", "cnn"));

// Without dynamic_axes every dim is a number and the default names are used.
TEST(OnnxExport, StaticExportHasDefaultNamesAndFixedDims) {
  onnx_test::ModelCase c = onnx_test::make_case("mlp", kData);
  const std::string path = temp_path("static.onnx");
  auto info = kiln::onnx::export_model(*c.model, {c.input}, path);
  EXPECT_EQ(info.input_names, std::vector<std::string>{"input"});
  EXPECT_EQ(info.output_names, std::vector<std::string>{"output"});
  const ::onnx::ModelProto m = read_model(path);
  const auto &shape = m.graph().output(0).type().tensor_type().shape();
  ASSERT_EQ(shape.dim_size(), 2);
  EXPECT_EQ(shape.dim(0).dim_value(), 8);
  EXPECT_EQ(shape.dim(1).dim_value(), 10);
  EXPECT_EQ(info.op_counts.count("MatMul"), 1u);
  EXPECT_EQ(info.op_counts.at("MatMul"), 2);
  std::remove(path.c_str());
}

// kiln::compile's result is exported as the module it wraps (its compiled
// code records no ops: traced as it is, the output would be a constant).
TEST(OnnxExport, CompiledModuleIsExportedAsTheModuleItWraps) {
  onnx_test::ModelCase c = onnx_test::make_case("mlp", kData);
  const std::string path = temp_path("compiled.onnx");
  auto compiled = kiln::compile(c.model);
  auto info = kiln::onnx::export_model(*compiled, {c.input}, path);
  auto eager = kiln::onnx::export_model(*c.model, {c.input}, path);
  EXPECT_EQ(info.op_counts, eager.op_counts);
  EXPECT_EQ(info.initializer_bytes, eager.initializer_bytes);
  EXPECT_EQ(info.op_counts.at("MatMul"), 2);
  std::remove(path.c_str());
}

// export_model leaves the module in the mode it found it.
TEST(OnnxExport, RestoresTrainingMode) {
  onnx_test::ModelCase c = onnx_test::make_case("cnn", kData);
  c.model->train();
  const std::string path = temp_path("mode.onnx");
  kiln::onnx::export_model(*c.model, {c.input}, path);
  EXPECT_TRUE(c.model->is_training());
  std::remove(path.c_str());
}

namespace {
/// A forward that reads a value on the host (item()): no ONNX form.
class HostScale : public nn::Module {
public:
  Tensor forward(const Tensor &x) override { return x * x.sum().item(); }
  std::string name() const override { return "HostScale"; }
};
}  // namespace

TEST(OnnxExport, OpWithoutOnnxFormIsAnErrorNamingIt) {
  HostScale m;
  const std::string msg = error_of([&] { kiln::onnx::export_model(m, {randn({2, 3})}, temp_path("item.onnx")); });
  std::printf("%s\n", msg.c_str());  // the message a user sees
  EXPECT_NE(msg.find("op 'item'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("has no ONNX form"), std::string::npos) << msg;
  EXPECT_NE(msg.find("HostScale"), std::string::npos) << msg;
}

// A backward-only op in a graph (hand-built: an inference trace never has
// one) is refused by name.
TEST(OnnxExport, BackwardOnlyOpIsAnErrorNamingIt) {
  ir::Graph g;
  const int gy = g.addValue({1, 2, 4, 4}, ir::ElementType::F32), w = g.addValue({2, 3, 3, 3}, ir::ElementType::F32);
  const int gx = g.addValue({1, 3, 4, 4}, ir::ElementType::F32);
  g.inputs = {gy, w};
  g.input_roles = {ir::InputRole::Primal, ir::InputRole::Primal};
  ir::Node n;
  n.kind = ir::OpKind::Conv2dInputGrad;
  n.operands = {gy, w};
  n.result = gx;
  n.ints = {1, 1, 1, 1, 1, 1, 1};
  g.nodes.push_back(n);
  g.outputs = {gx};
  g.num_forward_outputs = 1;
  kiln::onnx::detail::GraphSpec spec;
  spec.graph = &g;
  spec.num_user_inputs = 2;
  spec.input_names = {"grad_output", "weight"};
  spec.output_names = {"grad_input"};
  const std::string msg = error_of([&] { kiln::onnx::detail::graph_to_onnx(spec); });
  std::printf("%s\n", msg.c_str());
  EXPECT_NE(msg.find("op 'conv2d_input_grad'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("backward-only"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[1, 3, 4, 4]"), std::string::npos) << msg;
}

// Bad options: each error names the bad value and what was expected.
TEST(OnnxExport, BadOptionsAreErrorsNamingTheValue) {
  onnx_test::ModelCase c = onnx_test::make_case("mlp", kData);
  const std::string path = temp_path("bad.onnx");
  auto msg = [&](const kiln::onnx::ExportOptions &o, const Tensor &x) {
    return error_of([&] { kiln::onnx::export_model(*c.model, {x}, path, o); });
  };
  std::string m = msg(kiln::onnx::ExportOptions().dynamic_axis("pixelz", 0, "batch"), c.input);
  EXPECT_NE(m.find("'pixelz'"), std::string::npos) << m;
  m = msg(kiln::onnx::ExportOptions().dynamic_axis("input", 0, "batch"), c.input.narrow(0, 0, 1));
  EXPECT_NE(m.find("example size 1; expected >= 2"), std::string::npos) << m;
  m = msg(kiln::onnx::ExportOptions().dynamic_axis("input", 3, "batch"), c.input);
  EXPECT_NE(m.find("dynamic axis 3 of input 'input' (rank 2)"), std::string::npos) << m;
  m = msg(kiln::onnx::ExportOptions().input_names({"a", "b"}), c.input);
  EXPECT_NE(m.find("2 input names given for 1 inputs"), std::string::npos) << m;
  m = msg(kiln::onnx::ExportOptions().dynamic_axis("input", 0, "batch").dynamic_axis("output", 1, "batch"), c.input);
  EXPECT_NE(m.find("output 'output' dim 1"), std::string::npos) << m;
  m = msg(kiln::onnx::ExportOptions().dynamic_axis("input", 0, "batch").dynamic_axis("output", 0, "n"), c.input);
  EXPECT_NE(m.find("second symbol"), std::string::npos) << m;
}

namespace {
/// Centers over the batch: its mean's 1/N is a constant of the batch size.
class BatchCenter : public nn::Module {
public:
  Tensor forward(const Tensor &x) override { return x - mean(x, {0}, true); }
  std::string name() const override { return "BatchCenter"; }
};
}  // namespace

// A constant that the dynamic dim decides cannot be an ONNX constant; a
// static export of the same module works.
TEST(OnnxExport, ConstantOfTheDynamicDimIsAnError) {
  BatchCenter m;
  const std::string path = temp_path("center.onnx");
  const std::string msg = error_of([&] {
    kiln::onnx::export_model(m, {randn({4, 3})}, path, kiln::onnx::ExportOptions().dynamic_axis("input", 0, "batch"));
  });
  std::printf("%s\n", msg.c_str());
  EXPECT_NE(msg.find("depends on the dynamic symbol 'batch'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("op '"), std::string::npos) << msg;
  EXPECT_NO_THROW(kiln::onnx::export_model(m, {randn({4, 3})}, path));
  std::remove(path.c_str());
}

namespace {
/// Two inputs (float [B, 3], bool [B, 3]) and two outputs, the second an
/// input passed through.
class MaskedSum : public nn::Module {
public:
  std::vector<Tensor> forward(const std::vector<Tensor> &in) override {
    return {sum(where(in[1], in[0], zeros_like(in[0])), {1}), in[0]};
  }
  std::string name() const override { return "MaskedSum"; }
};
}  // namespace

TEST(OnnxExport, SeveralInputsAndOutputsKeepOrderNamesAndTypes) {
  MaskedSum m;
  const std::string path = temp_path("multi.onnx");
  Tensor x = randn({4, 3}), mask = gt(randn({4, 3}), zeros({4, 3}));
  auto info = kiln::onnx::export_model(m, {x, mask}, path,
                                       kiln::onnx::ExportOptions()
                                           .dynamic_axis("input_0", 0, "n")
                                           .dynamic_axis("input_1", 0, "n"));
  EXPECT_EQ(info.input_names, (std::vector<std::string>{"input_0", "input_1"}));
  EXPECT_EQ(info.output_names, (std::vector<std::string>{"output_0", "output_1"}));
  EXPECT_NO_THROW(::onnx::checker::check_model(path));
  const ::onnx::ModelProto model = read_model(path);
  ASSERT_EQ(model.graph().input_size(), 2);
  EXPECT_EQ(model.graph().input(1).type().tensor_type().elem_type(), ::onnx::TensorProto::BOOL);
  ASSERT_EQ(model.graph().output_size(), 2);
  const auto &sum_shape = model.graph().output(0).type().tensor_type().shape();
  ASSERT_EQ(sum_shape.dim_size(), 1);
  EXPECT_EQ(sum_shape.dim(0).dim_param(), "n");  // found dynamic by the second trace
  EXPECT_EQ(model.graph().output(1).name(), "output_1");
  EXPECT_EQ(info.op_counts.at("Identity"), 1);  // the pass-through output
  std::remove(path.c_str());
}

// User names that look like the exporter's own ("v0", "_ints_0") do not clash.
TEST(OnnxExport, UserNamesNeverClashWithGeneratedNames) {
  onnx_test::ModelCase c = onnx_test::make_case("mlp", kData);
  const std::string path = temp_path("names.onnx");
  kiln::onnx::export_model(*c.model, {c.input}, path,
                           kiln::onnx::ExportOptions().input_names({"v3"}).output_names({"_ints_0"}).dynamic_axis(
                               "v3", 0, "batch"));
  EXPECT_NO_THROW(::onnx::checker::check_model(path));  // SSA: every name defined once
  std::remove(path.c_str());
}
