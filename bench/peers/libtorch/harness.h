// bench/peers/libtorch/harness.h - the model zoo in LibTorch 1.13's C++
// frontend (kiln-zoo-libtorch), the "LibTorch eager" column of the zoo.
//
// Each bench/models/<name>.cpp written again with torch::nn in <name>.cpp
// here (same shapes, hyperparameters, batch, loss and AdamW settings; the
// initialization is LibTorch's own) and registered as Kiln's are:
//
//   const bool registered = kiln::zoo::libtorch::register_model({
//       "mlp", "digits MLP 64-128-10, batch 512, AdamW 1e-3",
//       [] { return std::make_shared<Mlp>(); },
//       [] { return kiln::zoo::libtorch::Batch{torch::rand({512, 64}), torch::randint(10, {512})}; },
//       kiln::zoo::libtorch::classification_loss});
//
// kiln-zoo-libtorch measures each model eagerly exactly as kiln-zoo measures
// Kiln's eager variant (bench/models/harness.h): torch::manual_seed(0) before
// the model, 1 before the batch; one step (zero_grad, forward, loss,
// backward, AdamW step) gives "loss_eager", a second warm step sizes the
// repetitions (about --rep-seconds each, 2..500 steps), then --reps timed
// repetitions (median ms per step, "eager_ms"). Threads:
// torch::set_num_threads($OMP_NUM_THREADS, default 2), as Kiln and
// bench/peers/harness.py. The process first re-executes itself with
// OPENBLAS_CORETYPE set (bench/libtorch_env.h). No peak-bytes field: LibTorch
// 1.13's CPU allocator keeps no statistics; the context has max_rss_mb.
//
//   kiln-zoo-libtorch [--model NAME] [--reps R] [--rep-seconds S] [--json PATH] [--list] [--loss-steps N]
//
// The command line and report are bench/models/zoo_common.h's, the JSON
// fields those of kiln-zoo's eager variant.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <torch/torch.h>

namespace kiln::zoo::libtorch {

/// A zoo model: one tensor in, the output the loss reads out.
struct ZooModule : torch::nn::Module {
  virtual torch::Tensor forward(const torch::Tensor &input) = 0;
};

/// One training batch: the model's input and the loss' target.
struct Batch {
  torch::Tensor input;
  torch::Tensor target;
};

/// One zoo model (the fields of bench/models/harness.h's ModelSpec).
struct ModelSpec {
  std::string name;
  std::string description;
  std::function<std::shared_ptr<ZooModule>()> make_model;
  std::function<Batch()> make_batch;
  std::function<torch::Tensor(const torch::Tensor &output, const torch::Tensor &target)> loss;
  double lr = 1e-3;  ///< AdamW learning rate (other AdamW options at their defaults, Kiln's and LibTorch's alike)
};

/// cross_entropy(output.reshape({-1, C}), target.reshape({-1})) with
/// ignore_index -100: output [N, ..., C] float, target [N, ...] int64.
torch::Tensor classification_loss(const torch::Tensor &output, const torch::Tensor &target);

/// Adds `spec` to the zoo (from a model file's static initializer); returns
/// true. Throws std::invalid_argument on a duplicate or empty name.
bool register_model(ModelSpec spec);

}  // namespace kiln::zoo::libtorch
