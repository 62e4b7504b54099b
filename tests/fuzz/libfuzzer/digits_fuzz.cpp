// libFuzzer target: kiln::data::load_digits (frontend/src/data/data.cpp), the
// digits CSV reader (plain text or gzip) on arbitrary file bytes.
//
// Properties: every rejection is a kiln::Error; an accepted file gives
// features [N, 64] float32 in [0, 1] and labels [N] int64 in 0..9, N >= 1.
#include "fuzz_input.h"
#include "kiln/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static kiln::fuzz::MemFile file;
  const std::string &path = file.put(data, size);
  kiln::data::TensorDataset ds;
  try {
    ds = kiln::data::load_digits(path);
  } catch (const kiln::Error &) {
    return 0;
  }
  const kiln::Tensor &x = ds.features, &y = ds.labels;
  const int64_t n = y.defined() && y.dim() == 1 ? y.size(0) : -1;
  if (n < 1 || x.dim() != 2 || x.size(0) != n || x.size(1) != 64 || x.dtype() != kiln::kFloat32 ||
      y.dtype() != kiln::kInt64)
    kiln::fuzz::violated("load_digits returned features " + kiln::shape_str(x.sizes()) + " and labels " +
                         kiln::shape_str(y.sizes()));
  const kiln::Tensor xc = x.contiguous(), yc = y.contiguous();
  const float *px = xc.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i)
    if (!(px[i] >= 0.0f && px[i] <= 1.0f))
      kiln::fuzz::violated("load_digits returned a pixel " + std::to_string(px[i]) + " outside [0, 1]");
  const int64_t *py = yc.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    if (py[i] < 0 || py[i] > 9)
      kiln::fuzz::violated("load_digits returned a label " + std::to_string(py[i]));
  return 0;
}
