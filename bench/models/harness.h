// bench/models/harness.h - the model zoo's shared harness (kiln-zoo).
//
// A model file (bench/models/<name>.cpp) describes one model and registers it:
//
//   const bool registered = kiln::zoo::register_model({
//       "mlp", "digits MLP 64-128-10, batch 512",                       // name, description
//       [] { return std::make_shared<MyModel>(); },                    // the model
//       [] { return kiln::zoo::Batch{kiln::randn({512, 64}), labels}; }, // one batch
//       kiln::zoo::classification_loss});                               // loss(output, target)
//
// kiln-zoo then measures, for each model, in one process: the training step
// (zero_grad, forward, loss, backward, AdamW) eagerly and compiled
// (kiln::compile of the model; the loss runs eagerly after it), the two
// variants interleaved over --reps repetitions of about --rep-seconds each
// (median ms per step); the first compiled step's extra time over a steady
// one (trace + compile, "compile_seconds"; run it with an empty
// KILN_CACHE_DIR for a cold compile, again with the same directory for a
// warm start); the graphs compiled and the graph breaks
// (CompileStats, CompiledModule::graph_breaks); the allocator's peak bytes
// per step of each variant; the process' max RSS; the first step's loss of
// both variants (same weights and batch: they should agree).
//
//   kiln-zoo [--model NAME] [--reps R] [--rep-seconds S] [--json PATH] [--list] [--loss-steps N] [--check-steps N]
//
// Writes {"models": {name: {...}}, "context": {...}} to --json (stdout if
// absent); with --loss-steps N it times nothing and writes each model's
// losses of N eager steps on its batch ("losses"), the check that a port
// (bench/peers/) trains alike; with --check-steps N it checks the compiled
// model against eager (first-step output and gradients, then N steps' losses,
// at 1e-4 relative, no graph break) and fails naming the first difference
// (ctest zoo.compiled_matches_eager.<model>). The command line, statistics and report are
// zoo_common.h's, shared with kiln-zoo-libtorch. bench/zoo.py runs it next
// to the PyTorch peers (bench/peers/).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "kiln/kiln.h"

namespace kiln::zoo {

/// One training batch: the model's input and the loss' target.
struct Batch {
  Tensor input;
  Tensor target;
};

/// One zoo model. make_model runs after kiln::manual_seed(0), make_batch
/// after manual_seed(1), so every variant starts from the same weights and data.
struct ModelSpec {
  std::string name;         ///< the model's key in the JSON and on the command line
  std::string description;  ///< shapes and hyperparameters, copied to the JSON
  std::function<std::shared_ptr<nn::Module>()> make_model;
  std::function<Batch()> make_batch;
  std::function<Tensor(const Tensor &output, const Tensor &target)> loss;
  double lr = 1e-3;  ///< AdamW learning rate (other AdamW options at their defaults)
};

/// cross_entropy(output.reshape({-1, C}), target.reshape({-1})) with
/// ignore_index -100: output [N, ..., C] float, target [N, ...] int64.
Tensor classification_loss(const Tensor &output, const Tensor &target);

/// int64 labels [shape] drawn uniformly from [0, classes) by the default generator.
Tensor random_labels(const Shape &shape, int64_t classes);

/// Adds `spec` to the zoo (call it from a model file's static initializer);
/// returns true. Throws kiln::Error on a duplicate or empty name.
bool register_model(ModelSpec spec);

/// kiln-zoo's main (the command line above); returns the exit status.
int zoo_main(int argc, char **argv);

}  // namespace kiln::zoo
