// Eager CPU kernels: the float32 exp against libm, float32 sums against a
// float64 reference, results independent of the thread count, and the
// parallel/vectorized paths (chunk boundaries inside rows, strided and
// broadcast operands, NaN/inf) against element-by-element references.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

// libgomp, when KilnEager was built with OpenMP; null otherwise.
extern "C" __attribute__((weak)) void omp_set_num_threads(int);
extern "C" __attribute__((weak)) int omp_get_max_threads();

namespace kiln {
namespace {

/// Distance in units in the last place between two non-NaN floats.
int64_t ulp_distance(float a, float b) {
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::llabs(ordered(a) - ordered(b));
}

/// Runs f with `n` OpenMP threads (no-op without OpenMP), restoring the count.
template <class F> void with_threads(int n, F f) {
  if (!omp_set_num_threads || !omp_get_max_threads) {
    f();
    return;
  }
  const int before = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(before);
}

std::vector<uint32_t> bits_of(const std::vector<float> &v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

TEST(Kernels, ExpWithin2UlpOfLibmOverASweep) {
  // Every 1021st float bit pattern (both signs, subnormals to the largest),
  // plus the edges of the finite range.
  std::vector<float> xs;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 1021) {
    const uint32_t b = static_cast<uint32_t>(u);
    float f;
    std::memcpy(&f, &b, 4);
    if (!std::isnan(f)) xs.push_back(f);
  }
  for (float f : {0.0f, -0.0f, 1.0f, -1.0f, 88.72283f, 88.7228394f, 88.73f, -87.33654f, -103.2789f, -103.9720f,
                  -104.0f, 0.34657359f, -0.34657359f, 1e-30f, -1e-30f})
    xs.push_back(f);
  if (xs.size() % 2) xs.push_back(2.0f);
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor x = tensor(xs, {n});
  // Contiguous rows (the SIMD clone for this CPU) and strided rows (the scalar path).
  std::vector<float> dense = exp(x).to_vector<float>();
  std::vector<float> strided = exp(x.reshape({n / 2, 2}).narrow(1, 0, 1)).to_vector<float>();
  int64_t worst = 0;
  float worst_x = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = std::exp(xs[i]);
    const int64_t d = ulp_distance(dense[i], want);
    if (d > worst) worst = d, worst_x = xs[i];
    if (i % 2 == 0) {
      const int64_t ds = ulp_distance(strided[i / 2], want);
      if (ds > worst) worst = ds, worst_x = xs[i];
    }
  }
  EXPECT_LE(worst, 2) << "worst input " << worst_x << " (" << n << " inputs)";
}

TEST(Kernels, ExpSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = exp(tensor({inf, -inf, NAN, 89.0f, 1000.0f, -1000.0f, 0.0f, -0.0f}, {8})).to_vector<float>();
  EXPECT_EQ(v[0], inf);
  EXPECT_EQ(v[1], 0.0f);
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(v[3], inf);
  EXPECT_EQ(v[4], inf);
  EXPECT_EQ(v[5], 0.0f);
  EXPECT_EQ(v[6], 1.0f);
  EXPECT_EQ(v[7], 1.0f);
}

TEST(Kernels, Float32SumAccurateAgainstFloat64) {
  manual_seed(0);
  for (int64_t n : {int64_t{1} << 22, int64_t{1000003}, int64_t{65537}, int64_t{4095}}) {
    Tensor x = uniform({n});
    std::vector<float> v = x.to_vector<float>();
    double ref = 0;
    for (float f : v) ref += f;
    const double got = sum(x).item();
    EXPECT_LE(std::abs(got - ref) / ref, 1e-6) << "n=" << n;
    EXPECT_LE(std::abs(mean(x).item() - ref / static_cast<double>(n)) / (ref / static_cast<double>(n)), 1e-6);
  }
}

TEST(Kernels, RowSumsAndMaxesMatchReference) {
  manual_seed(1);
  const int64_t rows = 300, cols = 1531;
  Tensor x = uniform({rows, cols}, -1.0, 1.0);
  std::vector<float> v = x.to_vector<float>();
  std::vector<float> s = sum(x, {1}).to_vector<float>();
  std::vector<float> m = amax(x, {1}).to_vector<float>();
  std::vector<float> s0 = sum(x, {0}).to_vector<float>();  // goes through the transposed layout
  for (int64_t r = 0; r < rows; ++r) {
    double ref = 0, abs_sum = 0;
    float mx = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) {
      ref += v[r * cols + c];
      abs_sum += std::abs(v[r * cols + c]);
      mx = std::max(mx, v[r * cols + c]);
    }
    EXPECT_LE(std::abs(s[r] - ref), 1e-6 * abs_sum) << "row " << r;
    EXPECT_EQ(m[r], mx) << "row " << r;
  }
  for (int64_t c = 0; c < cols; c += 97) {
    double ref = 0;
    for (int64_t r = 0; r < rows; ++r) ref += v[r * cols + c];
    EXPECT_NEAR(s0[c], ref, 1e-4) << "col " << c;
  }
}

TEST(Kernels, ReductionsPropagateNanAndInf) {
  const int64_t n = 200003;  // above the parallel threshold, several chunks
  std::vector<float> v(n, 1.0f);
  v[150001] = NAN;
  EXPECT_TRUE(std::isnan(sum(tensor(v, {n})).item()));
  EXPECT_TRUE(std::isnan(amax(tensor(v, {n}), {}).item()));
  v[150001] = INFINITY;
  EXPECT_EQ(sum(tensor(v, {n})).item(), INFINITY);
  EXPECT_EQ(amax(tensor(v, {n}), {}).item(), INFINITY);
  v[7] = -INFINITY;
  EXPECT_TRUE(std::isnan(sum(tensor(v, {n})).item()));  // inf + -inf
  std::vector<float> all_neg_inf(70000, -INFINITY);
  EXPECT_EQ(amax(tensor(all_neg_inf, {70000}), {}).item(), -INFINITY);
  EXPECT_EQ(amax(tensor({-INFINITY, -INFINITY}, {2}), {}).item(), -INFINITY);
  // NaN in one row only.
  std::vector<float> rows(4 * 20000, 0.5f);
  rows[2 * 20000 + 3] = NAN;
  std::vector<float> m = amax(tensor(rows, {4, 20000}), {1}).to_vector<float>();
  EXPECT_EQ(m[0], 0.5f);
  EXPECT_EQ(m[1], 0.5f);
  EXPECT_TRUE(std::isnan(m[2]));
  EXPECT_EQ(m[3], 0.5f);
}

TEST(Kernels, IntegerSumsExact) {
  const int64_t n = 100001;
  std::vector<int64_t> v(n);
  int64_t ref = 0;
  for (int64_t i = 0; i < n; ++i) ref += v[i] = (i * 7919) % 1000 - 500;
  Tensor t = tensor(v, {n});
  EXPECT_EQ(static_cast<int64_t>(sum(t).item()), ref);
  EXPECT_EQ(static_cast<int64_t>(sum(gt(t, zeros({}, kInt64))).item()), std::count_if(v.begin(), v.end(), [](int64_t a) { return a > 0; }));
}

TEST(Kernels, ResultsIndependentOfThreadCount) {
  manual_seed(2);
  Tensor x = uniform({1 << 20}), y = uniform({512, 2048}, -3.0, 3.0);
  std::vector<float> s1, s2, r1, r2, e1, e2, m1, m2;
  with_threads(1, [&] {
    s1 = {static_cast<float>(sum(x).item())};
    r1 = sum(y, {1}).to_vector<float>();
    e1 = nn::functional::softmax(y, 1).to_vector<float>();
    m1 = amax(y, {1}).to_vector<float>();
  });
  with_threads(2, [&] {
    s2 = {static_cast<float>(sum(x).item())};
    r2 = sum(y, {1}).to_vector<float>();
    e2 = nn::functional::softmax(y, 1).to_vector<float>();
    m2 = amax(y, {1}).to_vector<float>();
  });
  EXPECT_EQ(bits_of(s1), bits_of(s2));
  EXPECT_EQ(bits_of(r1), bits_of(r2));
  EXPECT_EQ(bits_of(e1), bits_of(e2));
  EXPECT_EQ(bits_of(m1), bits_of(m2));
}

TEST(Kernels, LargeStridedAndBroadcastMapsMatchReference) {
  // 300 x 257 (odd row length: parallel chunks start and end mid-row).
  manual_seed(3);
  const int64_t r = 300, c = 257;
  Tensor a = uniform({c, r}).t();          // non-contiguous [r, c]
  Tensor b = uniform({r, 1}, 1.0, 2.0);    // broadcast along columns
  Tensor row = uniform({c});               // broadcast along rows
  std::vector<float> av = a.contiguous().to_vector<float>(), bv = b.to_vector<float>(), rv = row.to_vector<float>();
  std::vector<float> sum_ab = (a + b).to_vector<float>();
  std::vector<float> div_rb = (row / b).to_vector<float>();
  std::vector<float> ex = exp(a).to_vector<float>();
  std::vector<float> rl = relu(a - 0.5).to_vector<float>();
  std::vector<float> sel = where(gt(a, row), a, b).to_vector<float>();
  std::vector<float> ab = abs(a - 0.5).to_vector<float>();
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const int64_t k = i * c + j;
      const float x = av[k];
      ASSERT_EQ(sum_ab[k], x + bv[i]) << i << "," << j;
      ASSERT_EQ(div_rb[k], rv[j] / bv[i]) << i << "," << j;
      ASSERT_LE(ulp_distance(ex[k], std::exp(x)), 2) << i << "," << j;
      ASSERT_EQ(rl[k], std::max(x - 0.5f, 0.0f)) << i << "," << j;
      ASSERT_EQ(sel[k], x > rv[j] ? x : bv[i]) << i << "," << j;
      ASSERT_EQ(ab[k], std::abs(x - 0.5f)) << i << "," << j;
    }
}

TEST(Kernels, LargeComparisonsAndWhereOnOtherDtypes) {
  const int64_t n = 100000;
  std::vector<int64_t> iv(n);
  for (int64_t i = 0; i < n; ++i) iv[i] = i % 13;
  Tensor t = tensor(iv, {n});
  std::vector<float> mask = le(t, full({}, 6.0, kInt64)).to(kFloat32).to_vector<float>();
  std::vector<int64_t> w = where(eq(t, zeros({}, kInt64)), full({}, -1.0, kInt64), t).to_vector<int64_t>();
  Tensor h = tensor(std::vector<float>(n, 1.5f), {n}).to(kFloat16);
  std::vector<float> hv = where(lt(t, full({}, 3.0, kInt64)), h, zeros({}, kFloat16)).to(kFloat32).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(mask[i], iv[i] <= 6 ? 1.0f : 0.0f) << i;
    ASSERT_EQ(w[i], iv[i] == 0 ? -1 : iv[i]) << i;
    ASSERT_EQ(hv[i], iv[i] < 3 ? 1.5f : 0.0f) << i;
  }
}

}  // namespace
}  // namespace kiln
