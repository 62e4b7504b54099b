// kiln-onnx-export: exports one of the test models (onnx_models.h) with a
// dynamic batch axis and writes what ONNX Runtime is checked against
// (tests/tools/onnx_ort_check.py):
//
//   kiln-onnx-export --model mlp|gpt|cnn --out DIR [--data data/digits.csv.gz]
//
//   DIR/<model>.onnx               the export (opset 17, checked by libonnx's checker)
//   DIR/<model>_io.safetensors     "<input>@export", "<output>@export" (the
//                                  export batch), "<input>@dynamic",
//                                  "<output>@dynamic" (another batch size):
//                                  Kiln's eager eval outputs; metadata
//                                  input/output names, opset, symbol
//
// After writing, the file is read back and checked again with
// onnx::checker::check_model(path). Prints one line with the export's
// numbers. Exit 0, or 1 with the error.
#include <cstdio>
#include <cstring>
#include <string>

#include "kiln/onnx.h"
#include "kiln/serialize.h"
#include "onnx/checker.h"
#include "onnx_models.h"

using namespace kiln;

int main(int argc, char **argv) {
  std::string model_name, out, data = std::string(KILN_SOURCE_DIR) + "/data/digits.csv.gz";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model")) model_name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--out")) out = argv[i + 1];
    else if (!std::strcmp(argv[i], "--data")) data = argv[i + 1];
  }
  if (model_name.empty() || out.empty()) {
    std::fprintf(stderr, "usage: kiln-onnx-export --model mlp|gpt|cnn --out DIR [--data PATH]\n");
    return 2;
  }
  try {
    onnx_test::ModelCase c = onnx_test::make_case(model_name, data);
    const std::string onnx_path = out + "/" + model_name + ".onnx";
    const auto options = kiln::onnx::ExportOptions()
                             .input_names({c.input_name})
                             .output_names({c.output_name})
                             .dynamic_axis(c.input_name, 0, "batch")
                             .dynamic_axis(c.output_name, 0, "batch");
    kiln::onnx::ExportInfo info = kiln::onnx::export_model(*c.model, {c.input}, onnx_path, options);
    ::onnx::checker::check_model(onnx_path);  // the file as written

    NoGradGuard no_grad;
    Tensor y = c.model->forward(c.input), y2 = c.model->forward(c.other_input);
    save(out + "/" + model_name + "_io.safetensors",
         {{c.input_name + "@export", c.input},
          {c.output_name + "@export", y},
          {c.input_name + "@dynamic", c.other_input},
          {c.output_name + "@dynamic", y2}},
         {{"input", c.input_name}, {"output", c.output_name}, {"opset", std::to_string(info.opset)},
          {"symbol", info.dynamic_symbol}});
    std::string ops;
    for (const auto &[op, n] : info.op_counts) ops += " " + op + ":" + std::to_string(n);
    std::printf("%s: opset %lld, %lld nodes, %lld initializers (%lld bytes), batch %lld exported, %lld dynamic;%s\n",
                model_name.c_str(), static_cast<long long>(info.opset), static_cast<long long>(info.num_nodes),
                static_cast<long long>(info.num_initializers), static_cast<long long>(info.initializer_bytes),
                static_cast<long long>(c.input.size(0)), static_cast<long long>(c.other_input.size(0)), ops.c_str());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kiln-onnx-export: %s\n", e.what());
    return 1;
  }
  return 0;
}
