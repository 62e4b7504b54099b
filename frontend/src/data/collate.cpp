// Collation: examples -> one Batch by raw byte copies into new contiguous
// tensors. No op is called (nothing is traced, no autograd history), so this
// runs safely on loader worker threads.
#include <algorithm>
#include <cstring>

#include "kiln/data.h"
#include "ops/kernels.h"

namespace kiln::data {
namespace {

/// Copies `src` (any strides) into `dst` in row-major order; dst holds
/// src.numel() elements of src.dtype().
void copy_to_contiguous(const Tensor &src, char *dst) {
  const size_t item = itemsize(src.dtype());
  const int64_t n = src.numel();
  if (n == 0) return;
  const char *base = static_cast<const char *>(src.raw_data());
  if (src.is_contiguous()) {
    std::memcpy(dst, base, static_cast<size_t>(n) * item);
    return;
  }
  const Shape &sizes = src.sizes();
  const Shape &strides = src.strides();
  const int64_t nd = src.dim();
  Shape index(static_cast<size_t>(nd), 0);
  int64_t offset = 0;  // in elements, follows `index`
  for (int64_t k = 0; k < n; ++k) {
    std::memcpy(dst + k * item, base + offset * static_cast<int64_t>(item), item);
    for (int64_t d = nd - 1; d >= 0; --d) {  // odometer increment
      if (++index[d] < sizes[d]) {
        offset += strides[d];
        break;
      }
      offset -= (sizes[d] - 1) * strides[d];
      index[d] = 0;
    }
  }
}

/// Writes `count` copies of `value` (converted to `dtype`) at `dst`.
void fill_value(char *dst, int64_t count, DType dtype, double value) {
  if (count <= 0) return;
  const size_t item = itemsize(dtype);
  kernels::store_from_double(dst, dtype, 0, value);
  for (int64_t k = 1; k < count; ++k) std::memcpy(dst + k * item, dst, item);
}

/// The data (target = false) or the target of `e`.
const Tensor &field_of(const Example &e, bool target) { return target ? e.target : e.data; }

/// Checks that every example's field is defined, on cpu, with example 0's
/// dtype, and with example 0's sizes (all dims, or dims 1.. when trailing_only).
void check_fields(const std::vector<Example> &examples, bool target, bool trailing_only, const char *op) {
  const char *name = target ? "target" : "data";
  const Tensor &first = field_of(examples[0], target);
  for (size_t i = 0; i < examples.size(); ++i) {
    const Tensor &t = field_of(examples[i], target);
    KILN_CHECK(t.defined(), op, ": example ", i, " has an undefined ", name);
    KILN_CHECK(t.device().is_cpu(), op, ": example ", i, " has its ", name, " on ", t.device().str(),
               "; collation needs cpu tensors");
    KILN_CHECK(t.dtype() == first.dtype(), op, ": example ", i, " has ", name, " of dtype ", dtype_name(t.dtype()),
               " but example 0 has ", dtype_name(first.dtype()));
    if (trailing_only) {
      KILN_CHECK(t.dim() >= 1, op, ": example ", i, " has 0-d ", name,
                 "; padding needs sequences of shape [L, ...]");
      Shape rest(t.sizes().begin() + 1, t.sizes().end()), first_rest(first.sizes().begin() + 1, first.sizes().end());
      KILN_CHECK(rest == first_rest, op, ": example ", i, " has ", name, " of shape ", shape_str(t.sizes()),
                 " but example 0 has ", shape_str(first.sizes()), "; only dim 0 may differ");
    } else {
      KILN_CHECK(t.sizes() == first.sizes(), op, ": example ", i, " has ", name, " of shape ", shape_str(t.sizes()),
                 " but example 0 has ", shape_str(first.sizes()),
                 "; default_collate stacks same-shape tensors (use pad_collate for variable-length sequences)");
    }
  }
}

/// True when every example has an undefined field; throws when only some do.
bool all_undefined(const std::vector<Example> &examples, bool target, const char *op) {
  size_t defined = 0;
  for (const Example &e : examples) defined += field_of(e, target).defined() ? 1 : 0;
  KILN_CHECK(defined == 0 || defined == examples.size(), op, ": ", defined, " of ", examples.size(), " examples have a ",
             target ? "target" : "data", "; it must be all or none");
  return defined == 0;
}

/// Same-shape fields of B examples -> [B, ...] contiguous.
Tensor stack_field(const std::vector<Example> &examples, bool target, const char *op) {
  check_fields(examples, target, /*trailing_only=*/false, op);
  const Tensor &first = field_of(examples[0], target);
  Shape shape{static_cast<int64_t>(examples.size())};
  shape.insert(shape.end(), first.sizes().begin(), first.sizes().end());
  Tensor out = Tensor::empty(shape, first.dtype());
  const size_t row_bytes = static_cast<size_t>(first.numel()) * itemsize(first.dtype());
  char *dst = static_cast<char *>(out.raw_data());
  for (size_t i = 0; i < examples.size(); ++i) copy_to_contiguous(field_of(examples[i], target), dst + i * row_bytes);
  return out;
}

/// Fields [L_i, ...] of B examples -> [B, max L_i, ...], the tail of each row
/// filled with `padding_value`; `lengths` receives L_i.
Tensor pad_field(const std::vector<Example> &examples, bool target, double padding_value, const char *op,
                 std::vector<int64_t> *lengths) {
  check_fields(examples, target, /*trailing_only=*/true, op);
  const Tensor &first = field_of(examples[0], target);
  int64_t max_len = 0;
  for (const Example &e : examples) max_len = std::max(max_len, field_of(e, target).size(0));
  Shape shape{static_cast<int64_t>(examples.size()), max_len};
  shape.insert(shape.end(), first.sizes().begin() + 1, first.sizes().end());
  Tensor out = Tensor::empty(shape, first.dtype());
  const int64_t step_elems = numel_of(Shape(first.sizes().begin() + 1, first.sizes().end()));
  const size_t item = itemsize(first.dtype());
  char *dst = static_cast<char *>(out.raw_data());
  for (size_t i = 0; i < examples.size(); ++i) {
    const Tensor &t = field_of(examples[i], target);
    char *row = dst + i * static_cast<size_t>(max_len * step_elems) * item;
    copy_to_contiguous(t, row);
    fill_value(row + static_cast<size_t>(t.numel()) * item, (max_len - t.size(0)) * step_elems, first.dtype(),
               padding_value);
    if (lengths) lengths->push_back(t.size(0));
  }
  return out;
}

bool same_shapes(const std::vector<Example> &examples, bool target) {
  for (const Example &e : examples)
    if (field_of(e, target).sizes() != field_of(examples[0], target).sizes()) return false;
  return true;
}

}  // namespace

Batch default_collate(const std::vector<Example> &examples) {
  const char *op = "default_collate";
  KILN_CHECK(!examples.empty(), op, ": no examples to collate");
  Batch batch;
  KILN_CHECK(!all_undefined(examples, /*target=*/false, op), op, ": the examples have no data");
  batch.data = stack_field(examples, /*target=*/false, op);
  if (!all_undefined(examples, /*target=*/true, op)) batch.target = stack_field(examples, /*target=*/true, op);
  return batch;
}

CollateFn pad_collate(double padding_value, double target_padding_value) {
  return [padding_value, target_padding_value](const std::vector<Example> &examples) {
    const char *op = "pad_collate";
    KILN_CHECK(!examples.empty(), op, ": no examples to collate");
    KILN_CHECK(!all_undefined(examples, /*target=*/false, op), op, ": the examples have no data");
    Batch batch;
    std::vector<int64_t> lengths;
    batch.data = pad_field(examples, /*target=*/false, padding_value, op, &lengths);
    batch.lengths = Tensor::empty({static_cast<int64_t>(lengths.size())}, kInt64);
    std::memcpy(batch.lengths.raw_data(), lengths.data(), lengths.size() * sizeof(int64_t));
    if (!all_undefined(examples, /*target=*/true, op)) {
      batch.target = same_shapes(examples, /*target=*/true)
                         ? stack_field(examples, /*target=*/true, op)
                         : pad_field(examples, /*target=*/true, target_padding_value, op, nullptr);
    }
    return batch;
  };
}

}  // namespace kiln::data
