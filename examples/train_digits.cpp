// kiln-train-digits: an MLP (64-128-10) trained with AdamW on the UCI
// handwritten digits, compiled by default (kiln::compile), eagerly with --eager.
// --device cuda trains on a CUDA device (eagerly: compiled CUDA graphs are
// not there yet; KILN_CUDA_SIM=1 gives the CUDA-on-CPU simulator).
//
//   kiln-train-digits [--eager] [--ddp] [--backend gloo|nccl] [--device cpu|cuda|cuda:N] [--epochs N] [--seed S]
//                     [--lr X] [--batch-size B] [--train-size N] [--data PATH] [--save PATH]
//
// --ddp: data parallel across the processes kilnrun starts, on one node or
// several (`kilnrun --nproc-per-node 2 kiln-train-digits --ddp`): each rank
// trains on its DistributedSampler shard with --batch-size per rank,
// gradients are averaged by DistributedDataParallel, rank 0 prints. Epoch e
// (from 0) visits the digits in the order a single process shuffles them
// in, rank r taking every world-size-th: with an even --train-size, W ranks
// at batch B step on the same global batches as one process at batch W*B,
// so they train the same parameters (up to float rounding). With --device
// cuda each rank trains a CUDA model (`KILN_CUDA_SIM=1 kilnrun
// --nproc-per-node 2 kiln-train-digits --ddp --device cuda` on the simulator;
// tests/tools/digits_ddp_cuda_sim.sh checks it against the cpu); plain
// `--device cuda` is then cuda:(LOCAL_RANK % devices), one GPU per rank.
// --backend: the process group's, gloo (the default; cpu and CUDA tensors)
// or nccl (CUDA models only, on a GPU).
// --train-size N: train on the first N digits of the training split only.
// --save PATH: write the trained parameters (the MLP's state_dict) to PATH
// as a Kiln safetensors checkpoint (kiln::save); rank 0 only under --ddp.
//
// One progress line per epoch: epoch, mean loss, train accuracy, lr, gradient
// norm (mean over the epoch's steps), allocator peak memory, steps/s. Ends with
// the test accuracy on a held-out split of 360 digits.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "kiln/kiln.h"
#include "cli.h"

using namespace kiln;

namespace {

struct Args {
  bool eager = false;
  bool ddp = false;
  std::string backend = "gloo";
  Device device = kCPU;
  bool plain_cuda = false;  // --device cuda, without an index
  int epochs = 40;
  uint64_t seed = 0;
  double lr = 2e-3;
  int64_t batch_size = 32;
  int64_t train_size = 0;  // 0: the whole training split
  std::string data = "data/digits.csv.gz";
  std::string save;
};

Args parse(int argc, char **argv) {
  Args a;
  examples::Cli cli("kiln-train-digits",
                    "[--eager] [--ddp] [--backend gloo|nccl] [--device cpu|cuda|cuda:N] [--epochs N] [--seed S] "
                    "[--lr X] [--batch-size B] [--train-size N] [--data PATH] [--save PATH]");
  cli.flag("--eager", [&] { a.eager = true; });
  cli.flag("--ddp", [&] { a.ddp = true; });
  cli.option("--backend", [&](const std::string &v) { a.backend = v; });
  cli.option("--device", [&](const std::string &v) {
    a.device = examples::parse_device(v);
    a.plain_cuda = v == "cuda";
  });
  cli.option("--epochs", [&](const std::string &v) { a.epochs = std::stoi(v); });
  cli.option("--seed", [&](const std::string &v) { a.seed = std::stoull(v); });
  cli.option("--lr", [&](const std::string &v) { a.lr = std::stod(v); });
  cli.option("--batch-size", [&](const std::string &v) { a.batch_size = std::stoll(v); });
  cli.option("--train-size", [&](const std::string &v) { a.train_size = std::stoll(v); });
  cli.option("--data", [&](const std::string &v) { a.data = v; });
  cli.option("--save", [&](const std::string &v) { a.save = v; });
  cli.parse(argc, argv);
  if (a.epochs < 1 || a.batch_size < 1 || !(a.lr > 0)) cli.usage("epochs, batch size and lr must be positive");
  if (a.train_size < 0) cli.usage("the train size must not be negative");
  if (a.backend != "gloo" && a.backend != "nccl") cli.usage("--backend " + a.backend + ": expected gloo or nccl");
  return a;
}

double accuracy(nn::Module &model, const data::TensorDataset &ds, Device device) {
  NoGradGuard no_grad;
  Tensor pred = model.forward(ds.features.to(device)).argmax(1);
  return eq(pred, ds.labels.to(device)).to(kFloat32).mean().item();
}

/// The first `n` digits of `ds` (all of them when it has fewer).
data::TensorDataset first_rows(const data::TensorDataset &ds, int64_t n) {
  n = std::min(n, ds.size());
  return data::TensorDataset(ds.features.narrow(0, 0, n), ds.labels.narrow(0, 0, n));
}

}  // namespace

int main(int argc, char **argv) {
  Args args = parse(argc, argv);
  try {
    manual_seed(args.seed);
    auto all = data::load_digits(args.data);
    auto [train_set, test_set] = data::train_test_split(all, 360, args.seed);
    if (args.train_size > 0) train_set = first_rows(train_set, args.train_size);
    auto mlp = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(64, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
    if (args.ddp && args.plain_cuda)  // one GPU per rank of this node (a single simulator device: cuda:0)
      if (const char *local = std::getenv("LOCAL_RANK"))
        args.device = Device(DeviceType::CUDA, std::atoi(local) % std::max(1, cuda::device_count()));
    mlp->to(args.device);
    std::shared_ptr<nn::Module> model = mlp;
    std::shared_ptr<CompiledModule> compiled;
    if (!args.eager) model = compiled = compile(mlp);
    std::shared_ptr<distributed::DistributedSampler> sampler;
    bool print = true;
    if (args.ddp) {
      distributed::InitOptions init;
      init.backend = args.backend;
      distributed::init_process_group(init);
      model = std::make_shared<distributed::DistributedDataParallel>(model); // rank 0's weights everywhere
      sampler = std::make_shared<distributed::DistributedSampler>(train_set.size(), /*shuffle=*/true, args.seed);
      print = distributed::get_rank() == 0;
    }
    optim::AdamW opt(model->parameters(), optim::AdamWOptions(args.lr));
    auto train_data = std::make_shared<data::TensorDataset>(train_set);
    data::DataLoader loader = sampler ? data::DataLoader(sampler->shard(train_data), data::DataLoaderOptions(args.batch_size))
                                      : data::DataLoader(train_set, args.batch_size, /*shuffle=*/true, args.seed);
    if (!print && !std::freopen("/dev/null", "w", stdout)) return 1; // rank 0 reports for the group

    if (args.ddp)
      std::printf("kiln-train-digits: DistributedDataParallel over %d processes (%s), %lld digits per rank per epoch\n",
                  distributed::get_world_size(), args.backend.c_str(), static_cast<long long>(sampler->num_samples()));
    std::printf("kiln-train-digits: %s MLP 64-128-10 on %s, %lld train / %lld test digits, batch %lld, AdamW lr %g\n",
                args.eager ? "eager" : "compiled", args.device.str().c_str(), static_cast<long long>(train_set.size()),
                static_cast<long long>(test_set.size()), static_cast<long long>(args.batch_size), args.lr);
    for (int epoch = 1; epoch <= args.epochs; ++epoch) {
      examples::reset_peak_memory(args.device);
      auto start = std::chrono::steady_clock::now();
      double loss_sum = 0, norm_sum = 0;
      int64_t correct = 0, seen = 0, steps = 0;
      model->train();
      if (sampler) sampler->set_epoch(static_cast<uint64_t>(epoch - 1));  // the single-process loader's order
      for (auto &[xb, yb] : loader.epoch()) {
        const Tensor x = xb.to(args.device), y = yb.to(args.device);
        opt.zero_grad();
        Tensor logits = model->forward(x);
        Tensor loss = nn::functional::cross_entropy(logits, y);
        loss.backward();
        norm_sum += nn::utils::clip_grad_norm_(model->parameters(), std::numeric_limits<double>::infinity());
        opt.step();
        loss_sum += loss.item();
        {
          NoGradGuard no_grad;
          correct += static_cast<int64_t>(eq(logits.argmax(1), y).to(kInt64).sum().item());
        }
        seen += y.size(0);
        ++steps;
      }
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("epoch %3d | loss %.4f | train acc %.4f | lr %.2e | grad norm %.3f | peak mem %.2f MB | %.1f steps/s\n",
                  epoch, loss_sum / steps, static_cast<double>(correct) / seen, opt.lr(), norm_sum / steps,
                  examples::peak_memory_bytes(args.device) / 1e6, steps / secs);
      std::fflush(stdout);
    }
    model->eval();
    double test_acc = accuracy(*model, test_set, args.device);
    if (compiled)
      std::printf("compiled %d graphs (%d fused kernels in the last, last compile %.2f s), %d cached calls\n",
                  compiled->stats().compiles, compiled->stats().num_fusions, compiled->stats().last_compile_seconds,
                  compiled->stats().cache_hits);
    std::printf("test accuracy: %.4f\n", test_acc);
    if (!args.save.empty() && (!args.ddp || distributed::get_rank() == 0)) {
      save(args.save, mlp->state_dict());
      std::printf("saved the parameters to %s\n", args.save.c_str());
    }
    return 0;
  } catch (const Error &e) {
    std::fprintf(stderr, "kiln-train-digits: error: %s\n", e.what());
    return 1;
  }
}
