// The zoo's shared definitions (models/harness.h): the model registry the
// model files register into, the classification loss and random labels.
// Linked by kiln-zoo (models/harness.cpp) and kiln-bench-nvrtc.
#include <algorithm>
#include <string>
#include <vector>

#include "harness.h"
#include "zoo_common.h"

namespace kiln::zoo {

Tensor classification_loss(const Tensor &output, const Tensor &target) {
  return nn::functional::cross_entropy(output.reshape({-1, output.size(-1)}), target.reshape({-1}),
                                       nn::functional::Reduction::Mean, /*ignore_index=*/-100);
}

Tensor random_labels(const Shape &shape, int64_t classes) {
  std::vector<float> u = rand(shape).to_vector<float>();
  std::vector<int64_t> labels(u.size());
  for (size_t i = 0; i < u.size(); ++i)
    labels[i] = std::min<int64_t>(classes - 1, static_cast<int64_t>(u[i] * static_cast<float>(classes)));
  return tensor(labels, shape);
}

bool register_model(ModelSpec spec) {
  auto &registry = model_registry<ModelSpec>();
  KILN_CHECK(!spec.name.empty(), "kiln::zoo::register_model: the model needs a name");
  KILN_CHECK(!registry.count(spec.name), "kiln::zoo::register_model: a model named '", spec.name,
             "' is registered already");
  const std::string name = spec.name;
  registry.emplace(name, std::move(spec));
  return true;
}

}  // namespace kiln::zoo
