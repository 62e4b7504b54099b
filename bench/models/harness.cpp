// bench/models/harness.cpp - kiln-zoo: measures every registered zoo model
// (harness.h says what and how).
#include "harness.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "zoo_common.h"

namespace kiln::zoo {
namespace {

std::map<std::string, ModelSpec> &registry() { return model_registry<ModelSpec>(); }
std::vector<std::string> model_names() { return registered_model_names<ModelSpec>(); }

/// One variant of a model (eager or compiled): its module, optimizer, step.
struct Variant {
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<CompiledModule> compiled;  ///< null for eager
  std::unique_ptr<optim::AdamW> opt;
  std::vector<double> ms_per_step;  ///< one per repetition
  int64_t peak_step_bytes = 0;      ///< the largest over repetitions

  Variant(const ModelSpec &spec, bool compile, Device device) {
    manual_seed(0);
    model = spec.make_model();
    if (device != kCPU) model->to(device);
    if (compile) model = compiled = kiln::compile(model);
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions(spec.lr));
  }
  double step(const ModelSpec &spec, const Batch &batch) {
    opt->zero_grad();
    Tensor loss = spec.loss(model->forward(batch.input), batch.target);
    loss.backward();
    opt->step();
    return loss.item();
  }
  /// Runs `steps` steps; records ms per step and the allocator's peak above
  /// the bytes held before them.
  void timed(const ModelSpec &spec, const Batch &batch, int steps) {
    auto &alloc = runtime::cpu_allocator();
    alloc.reset_peak_stats();
    const int64_t base = alloc.stats().current_bytes;
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) step(spec, batch);
    ms_per_step.push_back(1e3 * seconds_since(start) / steps);
    peak_step_bytes = std::max(peak_step_bytes, alloc.stats().peak_bytes - base);
  }
};

/// Where --device puts the models and batches (cuda-sim: cuda:0 on the simulator).
Device zoo_device(const Args &args) { return args.device == "cpu" ? kCPU : Device(DeviceType::CUDA, 0); }

/// The model's batch (after manual_seed(1)): its first --batch rows, on --device.
Batch make_batch(const ModelSpec &spec, const Args &args) {
  manual_seed(1);
  Batch batch = spec.make_batch();
  if (args.batch > 0 && args.batch < batch.input.size(0)) {
    batch.input = batch.input.narrow(0, 0, args.batch).contiguous();
    batch.target = batch.target.narrow(0, 0, args.batch).contiguous();
  }
  const Device device = zoo_device(args);
  if (device != kCPU) {
    batch.input = batch.input.to(device);
    batch.target = batch.target.to(device);
  }
  return batch;
}

json graph_report(const CompiledModule &compiled) {
  const CompileStats &s = compiled.stats();
  json breaks = json::array();
  for (const std::string &op : compiled.graph_breaks()) breaks.push_back(op);
  // A module without breaks compiles one artifact per guard key; one with
  // breaks compiles a segment per piece between them.
  const int graphs = s.graph_break_segments > 0 ? s.graph_break_segments : s.compiles;
  return {{"graphs", graphs},       {"graph_breaks", breaks.size()}, {"graph_break_ops", breaks},
          {"fused_kernels", s.num_fusions}, {"eager_fallbacks", s.eager_fallbacks}};
}

/// The measurements of one model (harness.h).
json measure(const ModelSpec &spec, const Args &args) {
  Variant eager(spec, false, zoo_device(args)), compiled(spec, true, zoo_device(args));
  const Batch batch = make_batch(spec, args);
  int64_t parameters = 0;
  for (const Tensor &p : eager.model->parameters()) parameters += p.numel();
  json out = {{"description", spec.description}, {"parameters", parameters}};

  out["loss_eager"] = eager.step(spec, batch);
  auto start = Clock::now();
  try {
    out["loss_compiled"] = compiled.step(spec, batch);
  } catch (const Error &e) {
    out["compile_error"] = e.what();
    std::fprintf(stderr, "kiln-zoo: %s: kiln::compile failed: %s\n", spec.name.c_str(), e.what());
    return out;
  }
  const double first_compiled = seconds_since(start);
  compiled.step(spec, batch);
  start = Clock::now();
  eager.step(spec, batch);  // a warm eager step sizes the repetitions
  const double warm_eager = seconds_since(start);
  const int steps = steps_per_rep(args.rep_seconds, warm_eager);
  for (int rep = 0; rep < args.reps; ++rep) {  // interleaved: eager, compiled, eager, ...
    eager.timed(spec, batch, steps);
    compiled.timed(spec, batch, steps);
  }
  const double compiled_ms = median(compiled.ms_per_step);
  out["steps_per_rep"] = steps;
  out["reps"] = args.reps;
  out["eager_ms"] = median(eager.ms_per_step);
  out["compiled_ms"] = compiled_ms;
  out["eager_ms_reps"] = eager.ms_per_step;
  out["compiled_ms_reps"] = compiled.ms_per_step;
  out["compile_seconds"] = std::max(0.0, first_compiled - compiled_ms / 1e3);
  out["eager_peak_step_bytes"] = eager.peak_step_bytes;
  out["compiled_peak_step_bytes"] = compiled.peak_step_bytes;
  out.update(graph_report(*compiled.compiled));
  return out;
}

/// The loss of each of `steps` eager training steps on one batch (--loss-steps).
json loss_curve(const ModelSpec &spec, const Args &args, int steps) {
  Variant eager(spec, false, zoo_device(args));
  const Batch batch = make_batch(spec, args);
  json losses = json::array();
  for (int i = 0; i < steps; ++i) losses.push_back(eager.step(spec, batch));
  return {{"description", spec.description}, {"losses", losses}};
}

/// Largest |b| of a tensor.
double max_abs(const Tensor &b) {
  double m = 0;
  for (double v : b.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

/// Largest |a - b| over max(max |b|, floor, 1e-30): a relative difference of
/// two tensors; `floor` keeps a tensor that is zero up to rounding (the key
/// bias' gradient: softmax ignores a per-row shift) from dividing noise by noise.
double relative_difference(const Tensor &a, const Tensor &b, double floor = 0) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  double diff = 0;
  for (size_t i = 0; i < av.size(); ++i) diff = std::max(diff, std::abs(av[i] - bv[i]));
  return diff / std::max({max_abs(b), floor, 1e-30});
}

/// Gradients below this fraction of the model's largest gradient entry are
/// compared at that absolute level (relative_difference's floor).
constexpr double kGradientFloor = 1e-3;

/// The model's largest relative output / gradient difference at the first
/// step (before any update), compiled vs eager.
double first_step_difference(const ModelSpec &spec, Variant &eager, Variant &compiled, const Batch &batch,
                             std::string *worst_name) {
  Tensor ye = eager.model->forward(batch.input), yc = compiled.model->forward(batch.input);
  double worst = relative_difference(yc, ye);
  *worst_name = "the output";
  spec.loss(ye, batch.target).backward();
  spec.loss(yc, batch.target).backward();
  auto pe = eager.model->named_parameters(), pc = compiled.model->named_parameters();
  KILN_CHECK(pe.size() == pc.size(), "kiln-zoo --check-steps: ", spec.name, ": ", pe.size(), " eager parameters, ",
             pc.size(), " compiled");
  double largest = 0;
  for (const auto &[name, p] : pe)
    if (p.grad().defined()) largest = std::max(largest, max_abs(p.grad()));
  for (size_t i = 0; i < pe.size(); ++i) {
    const Tensor &ge = pe[i].second.grad(), &gc = pc[i].second.grad();
    KILN_CHECK(ge.defined() == gc.defined(), "kiln-zoo --check-steps: ", spec.name, ": ", pe[i].first,
               " has a gradient in only one variant");
    const double d = ge.defined() ? relative_difference(gc, ge, kGradientFloor * largest) : 0.0;
    if (d > worst) worst = d, *worst_name = "the gradient of " + pe[i].first;
  }
  eager.opt->zero_grad();
  compiled.opt->zero_grad();
  return worst;
}

/// --check-steps N: the compiled model against eager from the same weights
/// on one batch: the first step's output and every parameter gradient, then
/// the loss of each of N AdamW steps, all at kCheckTolerance relative; no
/// graph break. Throws kiln::Error naming the first difference.
constexpr double kCheckTolerance = 1e-4;
json check_against_eager(const ModelSpec &spec, const Args &args, int steps) {
  Variant eager(spec, false, zoo_device(args)), compiled(spec, true, zoo_device(args));
  const Batch batch = make_batch(spec, args);
  std::string worst;
  const double first = first_step_difference(spec, eager, compiled, batch, &worst);
  KILN_CHECK(first <= kCheckTolerance, "kiln-zoo --check-steps: ", spec.name, ": compiled ", worst, " differs from ",
             "eager by ", first, " (relative) at the first step (tolerance ", kCheckTolerance, ")");
  json losses = json::array();
  for (int i = 0; i < steps; ++i) {
    const double le = eager.step(spec, batch), lc = compiled.step(spec, batch);
    KILN_CHECK(std::abs(lc - le) <= kCheckTolerance * std::abs(le), "kiln-zoo --check-steps: ", spec.name, ": step ",
               i + 1, " loss ", lc, " compiled, ", le, " eager (tolerance ", kCheckTolerance, " relative)");
    losses.push_back({le, lc});
  }
  KILN_CHECK(compiled.compiled->graph_breaks().empty(), "kiln-zoo --check-steps: ", spec.name, ": graph break at ",
             compiled.compiled->graph_breaks().front());
  std::fprintf(stderr, "kiln-zoo: %s: compiled matches eager (first step %.2e relative; %d steps, final loss %.6f)\n",
               spec.name.c_str(), first, steps, losses.back()[0].get<double>());
  return {{"first_step_relative_difference", first}, {"losses_eager_compiled", losses}, {"graph_breaks", 0},
          {"device", args.device}, {"batch", batch.input.size(0)}};
}

json context_report() {
  const char *cache = std::getenv("KILN_CACHE_DIR");
  return {{"omp_num_threads", omp_num_threads()},
          {"kiln_cache_dir", cache ? cache : "(default)"},
          {"load_average_start", load_average()}};
}

}  // namespace

int zoo_main(int argc, char **argv) {
  const Args args = parse_args(argc, argv, "kiln-zoo", model_names());
  if (args.device == "cuda-sim") ::setenv("KILN_CUDA_SIM", "1", 1);  // before the first CUDA call
  if (args.list) {
    for (const auto &[name, spec] : registry()) std::printf("%-8s %s\n", name.c_str(), spec.description.c_str());
    return 0;
  }
  json report = {{"context", context_report()}, {"models", json::object()}};
  try {
    for (const auto &[name, spec] : registry()) {
      if (!args.model.empty() && name != args.model) continue;
      std::fprintf(stderr, "kiln-zoo: %s ...\n", name.c_str());
      if (args.check_steps > 0)
        report["models"][name] = check_against_eager(spec, args, args.check_steps);
      else
        report["models"][name] = args.loss_steps > 0 ? loss_curve(spec, args, args.loss_steps) : measure(spec, args);
    }
  } catch (const Error &e) {
    std::fprintf(stderr, "kiln-zoo: error: %s\n", e.what());
    return 1;
  }
  report["context"]["load_average_end"] = load_average();
  report["context"]["max_rss_mb"] = max_rss_mb();
  write_report(report, args.json_path);
  return 0;
}

}  // namespace kiln::zoo

int main(int argc, char **argv) { return kiln::zoo::zoo_main(argc, argv); }
