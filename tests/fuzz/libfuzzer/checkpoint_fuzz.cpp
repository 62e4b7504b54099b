// libFuzzer target: the training checkpoint loader (read_checkpoint and
// load_checkpoint, frontend/src/serialize/checkpoint.cpp) on arbitrary file
// bytes, restoring into a fixed model (nn::Linear(2, 2)) with Adam + StepLR
// and with SGD + ReduceLROnPlateau, strict and not.
//
// Properties: every rejection is a kiln::Error; a failed load_checkpoint
// leaves the model's parameters as they were (its all-or-nothing promise).
// The corpus holds checkpoints with and without Kiln's "kiln" checksum entry:
// files without it are unverified, so mutations reach the checkpoint JSON
// and the optimizer/scheduler state instead of stopping at a CRC mismatch.
#include <cstring>

#include "fuzz_input.h"
#include "kiln/kiln.h"
#include "kiln/lr_scheduler.h"
#include "kiln/serialize.h"

namespace {

using namespace kiln;

/// The model's parameter bytes, to check rollback.
std::string parameter_bytes(const nn::Module &model) {
  std::string out;
  for (const auto &[name, t] : model.state_dict()) {
    Tensor c = t.contiguous();
    out.append(static_cast<const char *>(c.raw_data()), static_cast<size_t>(c.numel()) * itemsize(c.dtype()));
  }
  return out;
}

template <class MakeOptimizer, class MakeScheduler>
void try_load(const std::string &path, bool strict, MakeOptimizer make_optimizer, MakeScheduler make_scheduler) {
  nn::Linear model(2, 2);
  auto optimizer = make_optimizer(model);
  auto scheduler = make_scheduler(*optimizer);
  const std::string before = parameter_bytes(model);
  try {
    load_checkpoint(path, model, optimizer.get(), scheduler.get(), strict, /*restore_rng=*/true);
  } catch (const Error &) {
    if (parameter_bytes(model) != before)
      fuzz::violated("a failed load_checkpoint changed the model's parameters");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz::MemFile file;
  const std::string &path = file.put(data, size);
  try {
    read_checkpoint(path);
  } catch (const Error &) {
    return 0; // load_checkpoint reads the same way: nothing more to reach
  }
  auto adam = [](nn::Linear &m) { return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions(0.01)); };
  auto step_lr = [](optim::Optimizer &o) { return std::make_unique<optim::lr_scheduler::StepLR>(o, 2, 0.5); };
  auto sgd = [](nn::Linear &m) {
    return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  };
  auto plateau = [](optim::Optimizer &o) { return std::make_unique<optim::lr_scheduler::ReduceLROnPlateau>(o); };
  for (bool strict : {false, true}) {
    try_load(path, strict, adam, step_lr);
    try_load(path, strict, sgd, plateau);
  }
  return 0;
}
