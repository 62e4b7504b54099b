// bench/peers/libtorch/harness.cpp - kiln-zoo-libtorch: measures every
// registered LibTorch zoo model (harness.h says what and how).
#include "harness.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <vector>

#include <torch/version.h>

#include "libtorch_env.h"
#include "models/zoo_common.h"

namespace kiln::zoo::libtorch {
namespace {

/// Threads when $OMP_NUM_THREADS is unset (bench/peers/harness.py's default).
constexpr int kDefaultThreads = 2;

std::map<std::string, ModelSpec> &registry() { return model_registry<ModelSpec>(); }
std::vector<std::string> model_names() { return registered_model_names<ModelSpec>(); }

/// The eager model, its optimizer and the training step.
struct Eager {
  std::shared_ptr<ZooModule> model;
  std::unique_ptr<torch::optim::AdamW> opt;
  std::vector<double> ms_per_step;  ///< one per repetition

  explicit Eager(const ModelSpec &spec) {
    torch::manual_seed(0);
    model = spec.make_model();
    model->train();
    opt = std::make_unique<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(spec.lr));
  }
  double step(const ModelSpec &spec, const Batch &batch) {
    opt->zero_grad();
    torch::Tensor loss = spec.loss(model->forward(batch.input), batch.target);
    loss.backward();
    opt->step();
    return loss.item<double>();
  }
  void timed(const ModelSpec &spec, const Batch &batch, int steps) {
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) step(spec, batch);
    ms_per_step.push_back(1e3 * seconds_since(start) / steps);
  }
};

Batch make_batch(const ModelSpec &spec) {
  torch::manual_seed(1);
  return spec.make_batch();
}

int64_t parameter_count(const ZooModule &model) {
  int64_t n = 0;
  for (const torch::Tensor &p : model.parameters()) n += p.numel();
  return n;
}

/// The measurements of one model: kiln-zoo's eager fields.
json measure(const ModelSpec &spec, const Args &args) {
  Eager eager(spec);
  const Batch batch = make_batch(spec);
  json out = {{"description", spec.description}, {"parameters", parameter_count(*eager.model)}};
  out["loss_eager"] = eager.step(spec, batch);
  const auto start = Clock::now();
  eager.step(spec, batch);  // a warm step sizes the repetitions
  const int steps = steps_per_rep(args.rep_seconds, seconds_since(start));
  for (int rep = 0; rep < args.reps; ++rep) eager.timed(spec, batch, steps);
  out["steps_per_rep"] = steps;
  out["reps"] = args.reps;
  out["eager_ms"] = median(eager.ms_per_step);
  out["eager_ms_reps"] = eager.ms_per_step;
  return out;
}

/// The loss of each of `steps` training steps on one batch (--loss-steps).
json loss_curve(const ModelSpec &spec, int steps) {
  Eager eager(spec);
  const Batch batch = make_batch(spec);
  json losses = json::array();
  for (int i = 0; i < steps; ++i) losses.push_back(eager.step(spec, batch));
  return {{"description", spec.description}, {"losses", losses}};
}

int threads_from_environment() {
  const char *threads = std::getenv("OMP_NUM_THREADS");
  return threads ? std::atoi(threads) : kDefaultThreads;
}

json context_report() {
  return {{"libtorch", TORCH_VERSION},
          {"omp_num_threads", omp_num_threads()},
          {"threads", torch::get_num_threads()},
          {"openblas_coretype", std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "(unset)"},
          {"load_average_start", load_average()}};
}

int zoo_main(int argc, char **argv) {
  bench::reexec_with_openblas_coretype(argv);
  const Args args = parse_args(argc, argv, "kiln-zoo-libtorch", model_names());
  if (args.list) {
    for (const auto &[name, spec] : registry()) std::printf("%-8s %s\n", name.c_str(), spec.description.c_str());
    return 0;
  }
  torch::set_num_threads(threads_from_environment());
  json report = {{"context", context_report()}, {"models", json::object()}};
  try {
    for (const auto &[name, spec] : registry()) {
      if (!args.model.empty() && name != args.model) continue;
      std::fprintf(stderr, "kiln-zoo-libtorch: %s ...\n", name.c_str());
      report["models"][name] = args.loss_steps > 0 ? loss_curve(spec, args.loss_steps) : measure(spec, args);
    }
  } catch (const std::exception &e) {  // c10::Error derives from std::exception
    std::fprintf(stderr, "kiln-zoo-libtorch: error: %s\n", e.what());
    return 1;
  }
  report["context"]["load_average_end"] = load_average();
  report["context"]["max_rss_mb"] = max_rss_mb();
  write_report(report, args.json_path);
  return 0;
}

}  // namespace

torch::Tensor classification_loss(const torch::Tensor &output, const torch::Tensor &target) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(output.reshape({-1, output.size(-1)}), target.reshape({-1}),
                          F::CrossEntropyFuncOptions().ignore_index(-100));
}

bool register_model(ModelSpec spec) {
  if (spec.name.empty()) throw std::invalid_argument("kiln::zoo::libtorch::register_model: the model needs a name");
  if (registry().count(spec.name))
    throw std::invalid_argument("kiln::zoo::libtorch::register_model: a model named '" + spec.name +
                                "' is registered already");
  const std::string name = spec.name;
  registry().emplace(name, std::move(spec));
  return true;
}

}  // namespace kiln::zoo::libtorch

int main(int argc, char **argv) { return kiln::zoo::libtorch::zoo_main(argc, argv); }
