// A user program against the installed package (Kiln::kiln): an MLP compiled
// and trained for 20 AdamW steps on one fixed batch (the loss must fall), then
// the same steps eagerly from the same initial weights (the compiled losses
// must equal them to 1e-4 relative). With a folder argument it also exports
// the trained model (kiln::export_compiled) as DIR/mlp.kiln, with the input
// DIR/x.bin and the compiled eval output DIR/y.bin (raw float32), which
// runtime_app (Kiln::runtime only) must reproduce bit for bit. Prints
// "kiln-user-app: ok" on success.
#include "kiln/export.h"
#include "kiln/kiln.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

using namespace kiln;

/// Writes t's float32 elements (contiguous) to `path`.
static void write_floats(const Tensor &t, const std::string &path) {
  Tensor c = t.contiguous();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char *>(c.data_ptr<float>()), c.numel() * 4);
}

static std::vector<double> train(bool compiled, const char *export_dir) {
  manual_seed(0);
  auto mlp = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 4)});
  std::shared_ptr<nn::Module> model = mlp;
  if (compiled) model = compile(mlp);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-2));
  Tensor x = randn({8, 16});
  Tensor y = tensor(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}, {8});
  std::vector<double> losses;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  if (export_dir) {
    const std::string dir = export_dir;
    export_compiled(mlp, {x}, dir + "/mlp.kiln");
    mlp->eval();
    NoGradGuard no_grad;
    write_floats(x, dir + "/x.bin");
    write_floats(compile(mlp)->forward(x), dir + "/y.bin");
  }
  return losses;
}

int main(int argc, char **argv) {
  std::vector<double> compiled = train(true, argc > 1 ? argv[1] : nullptr), eager = train(false, nullptr);
  std::printf("kiln-user-app: compiled loss %.4f -> %.4f, eager %.4f -> %.4f\n", compiled.front(), compiled.back(),
              eager.front(), eager.back());
  if (!(compiled.back() < 0.5 * compiled.front())) {
    std::printf("kiln-user-app: the compiled loss did not fall\n");
    return 1;
  }
  for (size_t i = 0; i < compiled.size(); ++i)
    if (std::fabs(compiled[i] - eager[i]) > 1e-4 * std::fabs(eager[i])) {
      std::printf("kiln-user-app: step %zu compiled %.8f vs eager %.8f\n", i, compiled[i], eager[i]);
      return 1;
    }
  std::printf("kiln-user-app: ok\n");
  return 0;
}
