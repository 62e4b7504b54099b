// embedding (a row lookup: a gather whose errors name embedding) and dropout (a Philox mask
// that can be replayed from the generator's (seed, offset)).
#include <cstring>

#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/random.h"
#include "../ops/gather.h"
#include "../ops/kernels.h"
#include "../trace.h"

namespace kiln::nn::functional {
namespace {

/// The dropout keep mask of `n` elements, drawn at (seed, offset):
/// element i uses 32-bit word i % 4 of the Philox4x32-10 block with counter
/// (offset + i / 4) and key seed (exactly what Generator::next4 returns at
/// that offset); u_i = (word >> 8) * 2^-24 is uniform in [0, 1) and element
/// i is kept iff u_i < 1 - p. Kept elements hold `scale`, dropped ones 0.
/// Uses ceil(n / 4) blocks.
std::vector<double> dropout_mask(int64_t n, double p, double scale, uint64_t seed, uint64_t offset) {
  std::vector<double> mask(static_cast<size_t>(n));
  const std::array<uint32_t, 2> key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const double keep = 1.0 - p;
  for (int64_t b = 0; b * 4 < n; ++b) {
    const uint64_t c = offset + static_cast<uint64_t>(b);
    const auto words = Generator::philox({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0, 0}, key);
    for (int64_t j = 0; j < 4 && b * 4 + j < n; ++j) {
      const double u = static_cast<double>(words[j] >> 8) * (1.0 / 16777216.0);
      mask[b * 4 + j] = u < keep ? scale : 0.0;
    }
  }
  return mask;
}

}  // namespace

Tensor embedding(const Tensor &input, const Tensor &weight) {
  KILN_CHECK(input.defined() && (input.dtype() == kInt64 || input.dtype() == kInt32),
             "embedding: expected input (indices) of dtype int64 or int32, got ",
             input.defined() ? dtype_name(input.dtype()) : "undefined");
  KILN_CHECK(weight.defined() && weight.dim() == 2, "embedding: weight must be 2-D [num_embeddings, embedding_dim], got ",
             weight.defined() ? shape_str(weight.sizes()) : std::string("undefined"));
  Shape out_shape = input.sizes();
  out_shape.push_back(weight.size(1));
  // A gather of whole rows: the index of each row broadcast over the
  // embedding dim. Its range check names embedding, in eager and in every
  // compiled call (kiln.gather ... as "embedding").
  const int64_t n = input.numel();
  Tensor rows = input.to(kInt64).reshape({n, 1}).expand({n, weight.size(1)});
  return kiln::detail::gather_as(weight, 0, rows, ir::IndexSource::Embedding).reshape(out_shape);
}

Tensor dropout(const Tensor &x, double p, bool training) {
  KILN_CHECK(x.defined() && x.is_floating_point(), "dropout: expected a floating point input, got ",
             x.defined() ? dtype_name(x.dtype()) : "undefined");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.0) return x;
  // float16/bfloat16 are scaled in float32 and rounded once, as PyTorch's fused kernel.
  const bool half = x.dtype() == kFloat16 || x.dtype() == kBFloat16;
  const DType compute = half ? kFloat32 : x.dtype();
  const Shape shape = x.sizes();
  // The scaled mask (0 or 1/(1-p)) is a random input of a compiled graph:
  // redrawn per call at the generator's current (seed, offset).
  const Device device = x.device();
  Tensor mask = trace::random_input(shape, [p, compute, device](const Shape &shape) {
    Generator &gen = default_generator();
    const uint64_t seed = gen.seed(), offset = gen.offset();
    const int64_t n = numel_of(shape);
    const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
    const std::vector<double> values = dropout_mask(n, p, scale, seed, offset);
    gen.set_offset(offset + static_cast<uint64_t>((n + 3) / 4));
    Tensor m = Tensor::empty(shape, kFloat64);
    if (n > 0) std::memcpy(m.data_ptr<double>(), values.data(), values.size() * sizeof(double));
    return kernels::host_to_device(m.to(compute), device);
  });
  if (half) return (x.to(kFloat32) * mask).to(x.dtype());
  return x * mask;
}

}  // namespace kiln::nn::functional
