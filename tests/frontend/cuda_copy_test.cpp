// Eager Tensor::copy_ between CUDA tensors (the CUDA-on-CPU simulator,
// KILN_CUDA_SIM=1): contiguous, strided and broadcast views on either side,
// and dtype conversion, each compared bit for bit with the same copy_ on the
// CPU (the independent reference: frontend/src/tensor.cpp's CPU loop).
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

const Device kCuda0{DeviceType::CUDA, 0};

class CudaCopy : public ::testing::Test {
protected:
  void SetUp() override {
    if (!std::getenv("KILN_TEST_REAL_CUDA"))
      ::setenv("KILN_CUDA_SIM", "1", 1);
  }
};

bool bitwise_equal(const Tensor &a, const Tensor &b) {
  Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * itemsize(x.dtype())) == 0;
}

/// copy_ of `src` into `dst` on the CPU and of their cuda:0 copies on the
/// simulator (`view` applied to the destination on both sides): the whole
/// destination storage must end bit for bit the same, so elements outside
/// the view are checked to be left alone.
void expect_copy_matches(const Tensor &dst_base, const Tensor &src, const std::function<Tensor(Tensor)> &view,
                         const char *what) {
  Tensor cpu_base = dst_base.clone(), cuda_base = dst_base.to(kCuda0);
  view(cpu_base).copy_(src);
  view(cuda_base).copy_(src.to(kCuda0));
  EXPECT_EQ(cuda_base.device(), kCuda0) << what;
  EXPECT_TRUE(bitwise_equal(cuda_base, cpu_base)) << what;
}

Tensor same(Tensor t) { return t; }

TEST_F(CudaCopy, ContiguousDestinationsSameDtype) {
  manual_seed(1);
  expect_copy_matches(zeros({5, 7}), randn({5, 7}), same, "float32");
  expect_copy_matches(zeros({64}, kInt64), full({64}, 123456789012.0, kInt64), same, "int64");
  expect_copy_matches(zeros({3}, kBFloat16), randn({3}).to(kBFloat16), same, "bf16");
  expect_copy_matches(zeros({0, 4}), randn({0, 4}), same, "empty");
  expect_copy_matches(zeros({}), full({}, 2.5), same, "0-d");
}

TEST_F(CudaCopy, StridedAndBroadcastSources) {
  manual_seed(2);
  Tensor big = randn({6, 8});
  expect_copy_matches(zeros({8, 6}), big.transpose(0, 1), same, "transposed source");
  expect_copy_matches(zeros({6, 3}), big.narrow(1, 2, 3), same, "narrowed columns");
  expect_copy_matches(zeros({6, 8}), randn({8}), same, "broadcast row");
  expect_copy_matches(zeros({6, 8}), randn({6, 1}), same, "broadcast column");
  expect_copy_matches(zeros({4, 5}), full({}, -1.25), same, "0-d source");
}

TEST_F(CudaCopy, StridedDestinations) {
  manual_seed(3);
  Tensor base = randn({6, 8});
  // Dense after a permutation: one kernel.
  expect_copy_matches(
      base, randn({8, 6}), [](Tensor t) { return t.transpose(0, 1); }, "transposed destination");
  // Dense pieces: a narrow of columns (a kernel per row), of rows (one kernel).
  expect_copy_matches(
      base, randn({6, 3}), [](Tensor t) { return t.narrow(1, 4, 3); }, "narrowed columns");
  expect_copy_matches(
      base, randn({2, 8}), [](Tensor t) { return t.narrow(0, 3, 2); }, "narrowed rows");
  expect_copy_matches(
      base, randn({8}), [](Tensor t) { return t.narrow(0, 5, 1).squeeze(0); }, "a row");
  expect_copy_matches(
      base, randn({6}), [](Tensor t) { return t.narrow(1, 2, 1).squeeze(1); }, "a column: 6 one-element pieces");
  // More pieces than kMaxCopyPieces: through the host.
  Tensor tall = randn({100, 4});
  expect_copy_matches(
      tall, randn({100}), [](Tensor t) { return t.narrow(1, 1, 1).squeeze(1); }, "a column of 100 rows");
  expect_copy_matches(
      randn({3, 100, 4}), randn({3, 100, 2}).transpose(0, 1).transpose(0, 1),
      [](Tensor t) { return t.narrow(2, 1, 2); }, "3-d narrow, 300 pieces");
  // A source that is a view of the destination's own storage.
  Tensor cpu = randn({4, 4}), dev = cpu.to(kCuda0);
  cpu.narrow(0, 0, 2).copy_(cpu.narrow(0, 1, 2).clone());
  dev.narrow(0, 0, 2).copy_(dev.narrow(0, 1, 2));
  EXPECT_TRUE(bitwise_equal(dev, cpu)) << "overlapping source and destination";
}

TEST_F(CudaCopy, DtypeConversionsMatchTheCpu) {
  manual_seed(4);
  Tensor x = randn({9, 5}) * 100.0;
  const std::vector<DType> types{kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kBool};
  for (DType from : types)
    for (DType to : types) {
      const std::string what = std::string(dtype_name(from)) + " -> " + dtype_name(to);
      Tensor src = x.to(from);
      expect_copy_matches(zeros({9, 5}, to), src, same, what.c_str());
      expect_copy_matches(
          zeros({5, 9}, to), src, [](Tensor t) { return t.transpose(0, 1); }, (what + " transposed").c_str());
      expect_copy_matches(
          zeros({9, 8}, to), src, [](Tensor t) { return t.narrow(1, 1, 5); }, (what + " into columns").c_str());
    }
}

TEST_F(CudaCopy, AnExpandedDestinationIsAnError) {
  Tensor dst = zeros({1, 4}, kFloat32, kCuda0).expand({3, 4});
  try {
    dst.copy_(randn({3, 4}).to(kCuda0));
    ADD_FAILURE() << "expected a kiln::Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("copy_: the destination (sizes [3, 4], strides [0, 1]) has stride 0 in dim 0"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CudaCopy, CopyIntoACudaTensorFromTheCpuAndBack) {
  manual_seed(5);
  Tensor x = randn({4, 6});
  Tensor dev = zeros({6, 4}, kFloat64, kCuda0);
  dev.transpose(0, 1).copy_(x); // across devices, converted, strided
  Tensor cpu = zeros({6, 4}, kFloat64);
  cpu.transpose(0, 1).copy_(x);
  EXPECT_TRUE(bitwise_equal(dev, cpu));
  Tensor back = zeros({4, 6});
  back.copy_(dev.transpose(0, 1));
  EXPECT_TRUE(bitwise_equal(back, x.to(kFloat64).to(kFloat32)));
}

} // namespace
} // namespace kiln
