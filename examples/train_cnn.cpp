// kiln-train-cnn: the zoo's residual CNN (examples/models/cnn.h: conv-BN-ReLU,
// a residual block, max and average pooling) trained with AdamW and a cosine
// learning rate on the UCI handwritten digits as 1x8x8 images; compiled by
// default (kiln::compile), eagerly with --eager.
//
//   kiln-train-cnn [--eager] [--epochs N] [--seed S] [--lr X] [--batch-size B] [--channels C] [--data PATH]
//
// One progress line per epoch: epoch, steps so far, mean loss, train
// accuracy, lr, gradient norm (mean over the epoch's steps), allocator peak
// memory, images/s. Ends with the graphs compiled, the graph breaks (ops
// kiln::compile could not capture run eagerly between compiled segments)
// and the test accuracy on a held-out split of 360 digits (the split of
// kiln-train-digits).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "kiln/kiln.h"
#include "models/cnn.h"
#include "cli.h"

using namespace kiln;

namespace {

struct Args {
  bool eager = false;
  int epochs = 12;
  uint64_t seed = 0;
  double lr = 3e-3;
  int64_t batch_size = 32;
  int64_t channels = 16;
  std::string data = "data/digits.csv.gz";
};

Args parse(int argc, char **argv) {
  Args a;
  examples::Cli cli("kiln-train-cnn", "[--eager] [--epochs N] [--seed S] [--lr X] [--batch-size B] [--channels C]\n"
                                      "                      [--data PATH]");
  cli.flag("--eager", [&] { a.eager = true; });
  cli.option("--epochs", [&](const std::string &v) { a.epochs = std::stoi(v); });
  cli.option("--seed", [&](const std::string &v) { a.seed = std::stoull(v); });
  cli.option("--lr", [&](const std::string &v) { a.lr = std::stod(v); });
  cli.option("--batch-size", [&](const std::string &v) { a.batch_size = std::stoll(v); });
  cli.option("--channels", [&](const std::string &v) { a.channels = std::stoll(v); });
  cli.option("--data", [&](const std::string &v) { a.data = v; });
  cli.parse(argc, argv);
  if (a.epochs < 1 || a.batch_size < 1 || a.channels < 1 || !(a.lr > 0))
    cli.usage("epochs, batch size, channels and lr must be positive");
  return a;
}

/// Digit features [N, 64] -> images [N, 1, 8, 8].
Tensor images(const Tensor &features) { return features.reshape({-1, 1, 8, 8}); }

double accuracy(nn::Module &model, const data::TensorDataset &ds) {
  NoGradGuard no_grad;
  Tensor pred = model.forward(images(ds.features)).argmax(1);
  return eq(pred, ds.labels).to(kFloat32).mean().item();
}

void report_compiled(const CompiledModule &compiled) {
  const CompileStats &s = compiled.stats();
  std::printf("compiled %d graphs (%d segments between graph breaks), %d cached calls; graph breaks in the last "
              "call: %zu",
              s.compiles, s.graph_break_segments, s.cache_hits, compiled.graph_breaks().size());
  for (size_t i = 0; i < compiled.graph_breaks().size(); ++i)
    std::printf("%s%s", i ? ", " : " (", compiled.graph_breaks()[i].c_str());
  std::printf("%s\n", compiled.graph_breaks().empty() ? "" : ")");
}

}  // namespace

int main(int argc, char **argv) {
  Args args = parse(argc, argv);
  try {
    manual_seed(args.seed);
    auto all = data::load_digits(args.data);
    auto [train_set, test_set] = data::train_test_split(all, 360, args.seed);
    auto cnn = std::make_shared<models::DigitsCNN>(args.channels);
    std::shared_ptr<nn::Module> model = cnn;
    std::shared_ptr<CompiledModule> compiled;
    if (!args.eager) model = compiled = compile(cnn);
    optim::AdamW opt(model->parameters(), optim::AdamWOptions(args.lr));
    data::DataLoader loader(train_set, args.batch_size, /*shuffle=*/true, args.seed);
    const int64_t steps_per_epoch = (train_set.size() + args.batch_size - 1) / args.batch_size;
    optim::lr_scheduler::CosineAnnealingLR scheduler(opt, args.epochs * steps_per_epoch, args.lr / 100);

    std::printf("kiln-train-cnn: %s DigitsCNN (C=%lld), %lld train / %lld test digits as 1x8x8, batch %lld, "
                "AdamW lr %g (cosine)\n",
                args.eager ? "eager" : "compiled", static_cast<long long>(args.channels),
                static_cast<long long>(train_set.size()), static_cast<long long>(test_set.size()),
                static_cast<long long>(args.batch_size), args.lr);
    auto &alloc = runtime::cpu_allocator();
    int64_t step = 0;
    for (int epoch = 1; epoch <= args.epochs; ++epoch) {
      alloc.reset_peak_stats();
      auto start = std::chrono::steady_clock::now();
      double loss_sum = 0, norm_sum = 0;
      int64_t correct = 0, seen = 0, steps = 0;
      const double lr = opt.lr();
      model->train();
      for (auto &[x, y] : loader.epoch()) {
        opt.zero_grad();
        Tensor logits = model->forward(images(x));
        Tensor loss = nn::functional::cross_entropy(logits, y);
        loss.backward();
        norm_sum += nn::utils::clip_grad_norm_(model->parameters(), std::numeric_limits<double>::infinity());
        opt.step();
        scheduler.step();
        loss_sum += loss.item();
        {
          NoGradGuard no_grad;
          correct += static_cast<int64_t>(eq(logits.argmax(1), y).to(kInt64).sum().item());
        }
        seen += y.size(0);
        ++steps;
      }
      step += steps;
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("epoch %3d | step %5lld | loss %.4f | train acc %.4f | lr %.2e | grad norm %.3f | peak mem %.2f MB"
                  " | %.0f images/s\n",
                  epoch, static_cast<long long>(step), loss_sum / steps, static_cast<double>(correct) / seen, lr,
                  norm_sum / steps, alloc.stats().peak_bytes / 1e6, seen / secs);
      std::fflush(stdout);
    }
    model->eval();
    double test_acc = accuracy(*model, test_set);
    if (compiled) report_compiled(*compiled);
    std::printf("test accuracy: %.4f\n", test_acc);
    return 0;
  } catch (const Error &e) {
    std::fprintf(stderr, "kiln-train-cnn: error: %s\n", e.what());
    return 1;
  }
}
