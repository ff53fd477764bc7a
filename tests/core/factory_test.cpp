// Factories and random numbers (ember/core/ops/factory.cpp, ember/core/generator.*,
// ember/core/philox.h): filled and ranged tensors, host data in and out,
// allclose/equal, Philox's known answer, seeding and reproducibility, and
// the statistics and ranges of rand/randn/randint/randperm.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "ember/core/philox.h"
#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;

TEST(Factory, FilledTensors) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::Float32);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(to_vector<float>(z), std::vector<float>(6, 0));
  EXPECT_EQ(to_vector<int64_t>(ones({4}, DType::Int64)), std::vector<int64_t>(4, 1));
  EXPECT_EQ(to_vector<double>(full({2}, -2.5, DType::Float64)), (std::vector<double>{-2.5, -2.5}));
  EXPECT_EQ(to_vector<bool>(full({2}, true, DType::Bool)), (std::vector<bool>{1, 1}));
  EXPECT_EQ(to_vector<int32_t>(full({1}, 7.9, DType::Int32)), (std::vector<int32_t>{7}));
  EXPECT_EQ(to_vector<float>(full({1}, 65504, DType::Float16)), (std::vector<float>{65504}));
  Tensor s = full({}, 3.0);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item<float>(), 3.0f);
  EXPECT_EQ(zeros({0, 3}).numel(), 0);
  Tensor like = from_vector<int32_t>({1, 2, 3}, {3, 1}).t();
  for (const Tensor& t : {zeros_like(like), ones_like(like), empty_like(like), full_like(like, 9)}) {
    EXPECT_EQ(t.shape(), (Shape{1, 3}));
    EXPECT_EQ(t.dtype(), DType::Int32);
    EXPECT_TRUE(t.is_contiguous());
  }
  EXPECT_EQ(to_vector<int32_t>(full_like(like, 9)), (std::vector<int32_t>{9, 9, 9}));
  EXPECT_TRUE(throws_with([] { zeros({2, -1}); }, {"negative", "[2, -1]"}));
}

TEST(Factory, ItemReadsTheOneElement) {
  EXPECT_EQ(from_vector<int64_t>({(int64_t(1) << 62) + 1}).item<int64_t>(), (int64_t(1) << 62) + 1);
  EXPECT_EQ(from_vector<float>({0.1f}).to(DType::Float16).item<float>(), float(Half(0.1f)));
  EXPECT_EQ(from_vector<bool>({true}).item<bool>(), true);
  EXPECT_EQ(from_vector<double>({2.75}).view({1, 1}).item<int>(), 2);
  EXPECT_EQ(from_vector<float>({1, 2, 3}).narrow(0, 2, 1).item<float>(), 3.0f);
  EXPECT_TRUE(throws_with([] { zeros({2, 3}).item<float>(); }, {"item", "6 elements", "[2, 3]"}));
}

TEST(Factory, Arange) {
  Tensor a = arange(5, DType::Int64);
  EXPECT_EQ(a.dtype(), DType::Int64);
  EXPECT_EQ(to_vector<int64_t>(a), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(0, 3).dtype(), DType::Int64);  // integral arguments
  EXPECT_EQ(to_vector<int64_t>(arange(2, 11, 3)), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(to_vector<int64_t>(arange(10, 0, -3)), (std::vector<int64_t>{10, 7, 4, 1}));
  EXPECT_EQ(to_vector<int64_t>(arange(-2, 2)), (std::vector<int64_t>{-2, -1, 0, 1}));
  EXPECT_EQ(arange(3, 3).numel(), 0);
  Tensor f = arange(0.5, 2.0, 0.5);  // any floating argument: float32
  EXPECT_EQ(f.dtype(), DType::Float32);
  EXPECT_EQ(to_vector<float>(f), (std::vector<float>{0.5, 1.0, 1.5}));
  EXPECT_EQ(to_vector<double>(arange(1.0, -0.5, -0.5, DType::Float64)), (std::vector<double>{1, 0.5, 0}));
  EXPECT_EQ(to_vector<int32_t>(arange(0, 4, 1, DType::Int32)), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(arange(0, 1, 0.1).numel(), 10);
  // Large int64 ranges stay exact.
  int64_t big = int64_t(1) << 60;
  EXPECT_EQ(to_vector<int64_t>(arange(big, big + 3)), (std::vector<int64_t>{big, big + 1, big + 2}));
  EXPECT_TRUE(throws_with([] { arange(0, 5, 0); }, {"arange", "step", "nonzero"}));
  EXPECT_TRUE(throws_with([] { arange(0, 5, -1); }, {"arange", "5", "-1"}));
  EXPECT_TRUE(throws_with([] { arange(5, 0, 1); }, {"arange", "step"}));
}

TEST(Factory, FromVectorAndToVector) {
  Tensor t = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), DType::Int32);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  // to_vector reads any layout in row-major order, converting the dtype.
  EXPECT_EQ(to_vector<int32_t>(t.t()), (std::vector<int32_t>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(to_vector<double>(t.narrow(1, 1, 2)), (std::vector<double>{2, 3, 5, 6}));
  EXPECT_EQ(to_vector<float>(t.select(1, 0).unsqueeze(1).expand({2, 2})), (std::vector<float>{1, 1, 4, 4}));
  EXPECT_EQ(to_vector<bool>(from_vector<float>({0, 0.5f, -1})), (std::vector<bool>{0, 1, 1}));
  Tensor h = from_vector<Half>({Half(1.5f), Half(-0.25f)});
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(to_vector<float>(h), (std::vector<float>{1.5f, -0.25f}));
  EXPECT_EQ(from_vector<BFloat16>({BFloat16(2.0f)}).dtype(), DType::BFloat16);
  EXPECT_TRUE(throws_with([] { from_vector<float>({1, 2, 3}, {2, 2}); }, {"from_vector", "3 values", "[2, 2]", "4"}));
}

TEST(Factory, FromBlobSharesTheCallersMemory) {
  std::vector<float> buf = {1, 2, 3, 4, 5, 6};
  Tensor t = from_blob(buf.data(), {2, 3}, DType::Float32);
  EXPECT_EQ(t.data_ptr(), buf.data());
  EXPECT_EQ(to_vector<float>(t), buf);
  buf[4] = 50;  // the caller's writes show through the tensor
  EXPECT_EQ(to_vector<float>(t)[4], 50);
  t.select(0, 0).fill_(-1);  // and the tensor's writes land in the buffer
  EXPECT_EQ(buf, (std::vector<float>{-1, -1, -1, 4, 50, 6}));
  // With strides: every other element, read as a column.
  std::vector<double> d = {0, 10, 1, 11, 2, 12};
  Tensor s = from_blob(d.data(), {3}, DType::Float64, kCPU, {2});
  EXPECT_EQ(to_vector<double>(s), (std::vector<double>{0, 1, 2}));
  s.mul_(3);
  EXPECT_EQ(d, (std::vector<double>{0, 10, 3, 11, 6, 12}));
  EXPECT_TRUE(throws_with(
      [&] {
        from_blob(d.data(), {3}, DType::Float64, kCPU, {1, 1});
      },
      {"from_blob", "[3]", "[1, 1]"}));
}

TEST(Factory, AllcloseAndEqual) {
  Tensor a = from_vector<double>({1, 2, 3});
  EXPECT_TRUE(allclose(a, a));
  EXPECT_TRUE(allclose(a, from_vector<double>({1, 2, 3 + 1e-9})));
  EXPECT_FALSE(allclose(a, from_vector<double>({1, 2, 3.001})));
  EXPECT_TRUE(allclose(a, from_vector<double>({1, 2, 3.001}), 1e-3));
  EXPECT_TRUE(allclose(a, from_vector<double>({1, 2, 3.001}), 0, 2e-3));
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(allclose(from_vector<double>({inf, -inf}), from_vector<double>({inf, -inf})));
  EXPECT_FALSE(allclose(from_vector<double>({inf}), from_vector<double>({-inf})));
  EXPECT_FALSE(allclose(from_vector<double>({nan}), from_vector<double>({nan})));
  EXPECT_TRUE(allclose(from_vector<float>({2, 2}, {2, 1}), full({2, 3}, 2.0)));  // broadcasts
  EXPECT_TRUE(allclose(from_vector<int32_t>({1, 2}), from_vector<float>({1, 2})));
  EXPECT_TRUE(throws_with([&] { allclose(a, zeros({2})); }, {"allclose", "[3]", "[2]"}));
  EXPECT_TRUE(equal(a, from_vector<double>({1, 2, 3})));
  EXPECT_FALSE(equal(a, from_vector<double>({1, 2, 3 + 1e-9})));
  EXPECT_FALSE(equal(a, a.view({3, 1})));
}

// ---------------- random numbers ----------------

TEST(Philox, KnownAnswer) {
  // Random123's kat_vectors: philox4x32 10 rounds, counter 0 and key 0.
  philox::Uint4 r = philox::generate(0, 0);
  EXPECT_EQ(r.x, 0x6627e8d5u);
  EXPECT_EQ(r.y, 0xe169c58du);
  EXPECT_EQ(r.z, 0xbc57ac4cu);
  EXPECT_EQ(r.w, 0x9b00dbd8u);
  EXPECT_EQ(philox::uniform(0), 0.0f);
  EXPECT_LT(philox::uniform(0xffffffffu), 1.0f);
  EXPECT_GT(philox::uniform_open0(0), 0.0f);
  EXPECT_EQ(philox::uniform_open0(0xffffffffu), 1.0f);
}

TEST(Random, ManualSeedReproduces) {
  manual_seed(1234);
  Tensor a = randn({50});
  Tensor b = rand({3, 7});
  manual_seed(1234);
  EXPECT_TRUE(equal(randn({50}), a));
  EXPECT_TRUE(equal(rand({3, 7}), b));
  manual_seed(1235);
  EXPECT_FALSE(equal(randn({50}), a));
  // Consecutive draws differ, and one draw of 15 equals draws of 10 and 5.
  manual_seed(7);
  Tensor first = randn({10}), second = randn({5});
  EXPECT_FALSE(equal(first.narrow(0, 0, 5), second));
  manual_seed(7);
  Tensor whole = randn({15});
  EXPECT_TRUE(equal(whole.narrow(0, 0, 10), first));
  EXPECT_TRUE(equal(whole.narrow(0, 10, 5), second));
}

TEST(Random, ExplicitGeneratorsAreIndependentOfTheDefault) {
  Generator g1(42), g2(42), g3(43);
  manual_seed(0);
  Tensor a = randn({20}, DType::Float64, kCPU, &g1);
  randn({100});  // the default generator does not disturb g2
  Tensor b = randn({20}, DType::Float64, kCPU, &g2);
  EXPECT_TRUE(equal(a, b));
  EXPECT_FALSE(equal(a, randn({20}, DType::Float64, kCPU, &g3)));
  EXPECT_FALSE(equal(a, randn({20}, DType::Float64, kCPU, &g1)));  // g1 moved on
  // get_state / set_state replay a draw.
  GeneratorState st = g1.get_state();
  Tensor c = rand({8}, DType::Float32, kCPU, &g1);
  g1.set_state(st);
  EXPECT_TRUE(equal(rand({8}, DType::Float32, kCPU, &g1), c));
  g1.manual_seed(42);
  EXPECT_EQ(g1.seed(), 42u);
  EXPECT_TRUE(equal(randn({20}, DType::Float64, kCPU, &g1), a));
  // The same seed gives the same values in every floating dtype (up to rounding).
  Generator h1(5), h2(5);
  std::vector<double> v32 = to_vector<double>(randn({64}, DType::Float32, kCPU, &h1));
  std::vector<double> v16 = to_vector<double>(randn({64}, DType::Float16, kCPU, &h2));
  for (size_t i = 0; i < v32.size(); ++i) EXPECT_NEAR(v16[i], v32[i], 4e-3 * std::fabs(v32[i]) + 1e-4);
}

TEST(Random, RandnStatistics) {
  Generator g(2024);
  std::vector<double> v = to_vector<double>(randn({100000}, DType::Float32, kCPU, &g));
  double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double var = 0, tail = 0;
  for (double x : v) {
    var += (x - mean) * (x - mean);
    tail += std::fabs(x) > 2 ? 1 : 0;
  }
  var /= double(v.size() - 1);
  EXPECT_NEAR(mean, 0.0, 0.015);  // standard error 0.0032
  EXPECT_NEAR(std::sqrt(var), 1.0, 0.01);
  EXPECT_NEAR(tail / double(v.size()), 0.0455, 0.004);  // P(|z| > 2)
  for (double x : v) ASSERT_TRUE(std::isfinite(x));
}

TEST(Random, RandIsUniformInHalfOpenUnitInterval) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Generator g(99);  // with this seed, 8 float16 and 63 bfloat16 draws round up to 1
    std::vector<double> v = to_vector<double>(rand({40000}, dt, kCPU, &g));
    double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
    EXPECT_GE(lo, 0.0) << dtype_name(dt);
    EXPECT_LT(hi, 1.0) << dtype_name(dt);
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    EXPECT_NEAR(mean, 0.5, 0.007) << dtype_name(dt);  // 5 standard errors
    int below_tenth = int(std::count_if(v.begin(), v.end(), [](double x) { return x < 0.1; }));
    EXPECT_NEAR(below_tenth / 40000.0, 0.1, 0.0075) << dtype_name(dt);
  }
  EXPECT_TRUE(throws_with([] { rand({2}, DType::Int32); }, {"rand", "floating", "int32"}));
  EXPECT_TRUE(throws_with([] { randn({2}, DType::Bool); }, {"randn", "floating", "bool"}));
}

TEST(Random, RandintCoversItsRange) {
  Generator g(3);
  Tensor r = randint(-3, 4, {7000}, DType::Int64, kCPU, &g);
  EXPECT_EQ(r.dtype(), DType::Int64);
  std::vector<int64_t> v = to_vector<int64_t>(r);
  std::vector<int> counts(7, 0);
  for (int64_t x : v) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 4);
    ++counts[size_t(x + 3)];
  }
  for (int c : counts) EXPECT_NEAR(c, 1000, 150);
  Tensor i32 = randint(0, 2, {100}, DType::Int32, kCPU, &g);
  EXPECT_EQ(i32.dtype(), DType::Int32);
  // A huge range uses all 64 bits: values beyond 2^32 appear.
  std::vector<int64_t> wide = to_vector<int64_t>(randint(0, int64_t(1) << 62, {64}, DType::Int64, kCPU, &g));
  EXPECT_GT(*std::max_element(wide.begin(), wide.end()), int64_t(1) << 40);
  EXPECT_TRUE(throws_with([] { randint(5, 5, {2}); }, {"randint", "high (5)", "low (5)"}));
  Generator a(11), b(11);
  EXPECT_TRUE(equal(randint(0, 100, {20}, DType::Int64, kCPU, &a), randint(0, 100, {20}, DType::Int64, kCPU, &b)));
}

TEST(Random, RandpermIsAPermutation) {
  for (int64_t n : {0, 1, 2, 1000}) {
    Generator g(uint64_t(n) + 1);
    std::vector<int64_t> p = to_vector<int64_t>(randperm(n, kCPU, &g));
    ASSERT_EQ(int64_t(p.size()), n);
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[size_t(i)], i);
    if (n == 1000) {
      int fixed = 0;
      for (int64_t i = 0; i < n; ++i) fixed += p[size_t(i)] == i;
      EXPECT_LT(fixed, 10);  // a shuffle, not the identity (expected 1 fixed point)
    }
  }
  Generator a(1), b(1), c(2);
  Tensor pa = randperm(50, kCPU, &a);
  EXPECT_TRUE(equal(pa, randperm(50, kCPU, &b)));
  EXPECT_FALSE(equal(pa, randperm(50, kCPU, &c)));
  EXPECT_TRUE(throws_with([] { randperm(-1); }, {"randperm", "-1"}));
}

}  // namespace
}  // namespace ember
